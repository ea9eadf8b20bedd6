"""Link emulation and fault injection for the CPU backend (the GPU backends use real links)."""
from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Link:
    """An emulated link: each chunk costs latency + bytes/bandwidth (+ uniform jitter) before it is sent.

    start_s: each launch's sends on a rank start up to start_s late (one uniform draw per launch), as
    the ranks of a real job never launch together. reorder: the receiving rank lets chunks land one
    at a time, a link delay apart on its own clock, each picked at random among those that have
    arrived and kept out of the receive buffer until its flag rises: a tile that reads rows it did
    not wait for finds them as they were before (NaN with poison_receive), on every rank."""

    latency_s: float = 0.0
    bandwidth_Bps: float = float("inf")
    jitter_s: float = 0.0
    start_s: float = 0.0
    reorder: bool = False
    hold_until_waited: bool = False  # see Hold below
    hold_s: float = 0.3  # hold_until_waited: how long a chunk no program polls is held at most
    seed: int = 0  # mixed into every launch's draws (delays, start, landing order): another seed, other orders
    record_taken: bool = False  # producers: each partial's rows as taken at its flag, in Taken.records

    def delay(self, nbytes: int, rng: random.Random) -> float:
        t = self.latency_s + (nbytes / self.bandwidth_Bps if self.bandwidth_Bps != float("inf") else 0.0)
        return t + (rng.uniform(0, self.jitter_s) if self.jitter_s else 0.0)

    def start_delay(self, rng: random.Random) -> float:
        return rng.uniform(0, self.start_s) if self.start_s else 0.0


class Hold:
    """Link.hold_until_waited, an oracle for "the tile really blocked": the receiving rank keeps each
    arrived chunk out of the receive buffer, its flag down, until a program of the running kernel
    has been seen polling that flag (down) in this launch, or for `hold_s` at most (a chunk no
    program polls: counted as such). Under the interpreter a wait that finds its flag down calls
    device._note_waiting (device.wait_chunks) with the flag's address and the launch's epoch word.

        kernel    |-- tile: wait_chunks(c): flag down -> note (addr(c), epoch) -- spin ------|-- reads c
        receiver       c arrived, held ........ sees the note -> copy c in, flag = epoch ---^
    """

    records: list[dict] = []  # per launch that held chunks: {"epoch", "waited": [chunk], "unwaited": [chunk]}

    @classmethod
    def polled(cls, addresses: list[int], epoch: int) -> bool:
        from syncopy import device as dev  # the kernels' module: loaded by the launch already, not by a Link

        return any((a, epoch) in dev.POLLED_DOWN for a in addresses)

    @classmethod
    def forget(cls, addresses: list[int], epoch: int) -> None:
        from syncopy import device as dev

        for a in addresses:
            dev.POLLED_DOWN.discard((a, epoch))


class Taken:
    """Link.record_taken, the oracle for "a producer announced a chunk before its last store": each
    chunk's partial rows as the link took them when its flag rose (sent to a peer, or added here),
    with a view of the partial, whose rows once the kernel is done are the kernel's final ones.

        {"epoch", "chunk", "rows": the rows taken (a copy), "partial": the chunk's view of the partial}

    A chunk whose taken rows differ from its final ones was announced early (syncopy verify)."""

    records: list[dict] = []

    @classmethod
    def note(cls, epoch: int, chunk: int, rows, partial) -> None:
        cls.records.append({"epoch": epoch, "chunk": chunk, "rows": rows, "partial": partial})


#: The link of a CPU launch that names none: instant. The CPU-world tests make a slow one the default
#: of their rank processes (tests/world/harness.py), so that chunks land after tiles start.
default = Link()


@dataclass(frozen=True)
class Faults:
    """Faults injected at the sending rank: drop or delay chunk `index` of rank `src` (every epoch),
    or `kill`: rank `src` dies (the process exits at once, as in a crash) where it would have sent
    chunk `index` of its first launch; its earlier chunks have left, its peers see the connection close.
    `corrupt`: chunk `index` of rank `src` has bytes flipped in flight (every epoch), after the sender
    computed its checksum (`verify_chunks=True` finds it; without, only a check of the result can)."""

    drop: frozenset[tuple[int, int]] = field(default_factory=frozenset)
    delay_s: tuple[tuple[tuple[int, int], float], ...] = ()
    kill: tuple[int, int] | None = None
    corrupt: frozenset[tuple[int, int]] = field(default_factory=frozenset)

    KILLED_EXIT = 75  # the exit status of a rank that `kill` stopped

    @staticmethod
    def of(drop=(), delay=None, kill=None, corrupt=()) -> "Faults":
        return Faults(frozenset(tuple(x) for x in drop), tuple(((int(k[0]), int(k[1])), float(v)) for k, v in (delay or {}).items()),
                      (int(kill[0]), int(kill[1])) if kill is not None else None, frozenset((int(s), int(i)) for s, i in corrupt))

    def named(self) -> list[tuple[str, tuple[int, int]]]:
        """(kind, (src, chunk)) of every fault, sorted: what each one names."""
        found = [*(("drop", k) for k in self.drop), *(("delay", k) for k, _ in self.delay_s),
                 *([("kill", self.kill)] if self.kill is not None else []), *(("corrupt", k) for k in self.corrupt)]
        return sorted(found)

    def spec(self) -> str:
        """The faults as `--inject` text, sorted (the same faults give the same text on every rank); '' for none."""
        delays = dict(self.delay_s)
        return ",".join(f"{kind}={src}:{chunk}" + (f":{delays[(src, chunk)] * 1e3:g}" if kind == "delay" else "")
                        for kind, (src, chunk) in self.named())

    def extra_delay(self, src: int, index: int) -> float:
        return sum(v for k, v in self.delay_s if k == (src, index))

    def corrupted(self, src: int, index: int, payload):
        """`payload` (a contiguous tensor about to be sent as chunk `index` of rank `src`) as the link
        delivers it: a copy with the first element's bytes flipped for a `corrupt` chunk (flipping
        every bit of an element changes its sign, so no value survives it), else itself."""
        if (src, index) not in self.corrupt or payload.numel() == 0:
            return payload
        import torch

        hit = payload.clone()
        raw = hit.reshape(-1).view(torch.uint8)
        raw[: hit.element_size()] ^= 0xFF
        return hit

    def die_if_killed(self, src: int, index: int) -> None:
        """Called by rank `src` just before it sends its chunk `index`."""
        if self.kill == (src, index):
            import os
            import sys

            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(self.KILLED_EXIT)  # no cleanup, no goodbye: what a crashed or OOM-killed rank does


def sends(plan) -> set[tuple[int, int]]:
    """What a fault can name on `plan` (one rank's): (rank, chunk) of each send it makes of its own.
    A consumer's chunk is the index among its own shard's chunks, a producer's the global chunk id
    (as the gloo transfers look faults up: a consumer's relays of other ranks' chunks are not its own)."""
    if hasattr(plan, "steps"):  # a ReducePlan: every send step carries this rank's partial, sum or final
        return {(plan.rank, s.chunk) for s in plan.steps if s.kind == "send"}
    c = plan.chunks_per_rank
    return {divmod(n.chunk, c) for n in plan.sends() if n.chunk // c == plan.rank}


def missing(faults: Faults, world: int, made: set[tuple[int, int]], producer: bool, chunks_per_rank: int) -> str | None:
    """The one line for the first fault that names a send no rank of `world` makes (`made`: every
    rank's `sends`), or None when each names one (a fault on no send would silently do nothing)."""
    for kind, (src, chunk) in faults.named():
        if (src, chunk) in made:
            continue
        what = f"injected fault {kind}={src}:{chunk}"
        if not 0 <= src < world:
            return f"{what} names rank {src}, but the group has {world} rank(s); name a rank 0..{world - 1}"
        if world == 1:
            return f"{what} names a send, but a world of one rank sends nothing; drop the fault or launch on more ranks"
        theirs = ", ".join(str(i) for r, i in sorted(made) if r == src) or "none"
        c = chunks_per_rank
        unit = (f"a global chunk id (rank d's rows of the result are chunks d*{c}..d*{c}+{c - 1})" if producer
                else f"a chunk of rank {src}'s own shard (0..{c - 1})")
        return f"{what} names a send rank {src} never makes: CHUNK is {unit}, and rank {src} sends {theirs}; name one of those"
    return None
