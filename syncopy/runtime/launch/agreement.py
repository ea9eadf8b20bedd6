"""What each rank launches, told to its peers at every launch on a group.

Launches on a group take turns on each rank, and the n-th launch of a rank meets the n-th launch of
each peer (runtime/launch/sequence.py, launch). So every launch first says, in one small all_gather
on a gloo group of its own (`_Group.exchange`), what it is about to launch: the operator, the
communicated tensors' shapes and dtypes, and the error this rank's own checks of the call raised, if
any. Ranks that disagree -- another operator, other shapes from the second launch on, a tensor one
rank passed non-contiguous, a launch fewer -- each raise one line that names the rank at fault and
what differs, before any chunk moves; the group stays usable.

    rank 0   |say(mm, A [8, 16])|=== transfers, kernel ===|
    rank 1   |say(mm, A [12,16])|  -> both: "rank 1 passed 'A' with shape [12, 16] but rank 0 [8, 16] ..."

Where it waits: CPU ranks (their launches are synchronous anyway) wait for the answer before their
transfers, bounded by the operator's timeout_s (a first launch of the operator: by the control
plane's bound, `control.wait_bound`, as it may build the kernel). A warm launch on CUDA tensors
enqueues and returns, as any CUDA op: its exchange completes in the background and is read at the
next launch on the group, or when a wait times out (`cause`), never with a host wait.

What a rank does after its exchange is noted too, in the group's store: its last launch number, and
the error of a launch it refused after the exchange (a grid that writes past its output, an
autotune failure). A peer whose chunks then never come names that rank and its error
(`cause`), or the rank that never made this launch, instead of a bare timeout."""
from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import threading
from datetime import timedelta

import torch
import torch.distributed as dist

from syncopy.errors import LaunchError
from syncopy.runtime.launch import contexts
from syncopy.runtime.transport.backends import control

SIZE = 4096  # bytes each rank says per launch (an error longer than fits is cut; long lists go as digests)
_ERROR_CHARS = 900
SAME = "every rank of the group must launch the same operators, with the same shapes, the same number of times, in the same order"


def _error_words(exc: BaseException) -> str:
    """An error as a peer quotes it: syncopy's own one line as it is; another's with its type."""
    from syncopy.errors import SyncopyError

    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, SyncopyError) else f"{type(exc).__name__}: {text}"


def _schedule_said(op) -> str:
    """The schedule as `Schedule.key()` JSON, each long value (an explicit plan, a list of ranks) as
    its digest: what is compared fits in SIZE, and a difference still names the key. Kept per operator."""
    said = getattr(op, "_said_schedule", None)
    if said is None:
        full = json.loads(op.schedule.key())
        said = json.dumps({k: v if len(json.dumps(v)) <= _LONG else f"sha1:{_digest(v)}" for k, v in full.items()},
                          sort_keys=True)
        op._said_schedule = said
    return said


def _digest(value) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


_LONG = 96  # a schedule value longer than this (as JSON) is said as its digest
_told = threading.local()  # .facts: (who, [[phrase, value], ...], why) of the launch a caller wraps (`facts`)


@contextlib.contextmanager
def facts(who: str, told: dict, why: str):
    """Launches in this block also say `told` (a caller's facts, each a phrase with {} for its value:
    "a with {} rows"), and ranks whose facts differ refuse in one line naming them (a template's own
    arguments, which its kernel never sees: the b whose columns differ, not the C it allocates)."""
    before = getattr(_told, "facts", None)
    _told.facts = (who, [[phrase, value] for phrase, value in told.items()], why)
    try:
        yield
    finally:
        _told.facts = before


@contextlib.contextmanager
def guarded(op, group):
    """A caller's own checks before it launches `op` on `group` (a template's argument checks): an
    error raised in the block before the launch said anything is said to the peers as this rank's
    refusal of that launch, so that they name this rank and its error instead of waiting for it, and
    the group's launches stay in step. Thread worlds and worlds of one have nothing to tell."""
    token = _launch_token(group)
    before = getattr(_told, "launches", 0)
    try:
        yield
    except Exception as exc:
        # Only a refusal before the launch began: a launch refuses, or says its own refusal, itself.
        if token is not None and getattr(op, "schedule", None) is not None and getattr(_told, "launches", 0) == before:
            with contextlib.suppress(Exception):  # a peer that did not come either: this rank's own error comes first
                meet(op, _group_of(group), said(op, error=exc))
        raise


def began() -> None:
    """A launch began on this thread (runtime/launch/sequence.py, launch): `guarded` says nothing for it."""
    _told.launches = getattr(_told, "launches", 0) + 1


def _group_of(group):
    return dist.group.WORLD if group is None else group


def _launch_token(group) -> int | None:
    """The token of the process group a launch on `group` runs on; None where launches say nothing."""
    if not dist.is_initialized():
        return None
    group = _group_of(group)
    try:
        if not isinstance(group, dist.ProcessGroup) or dist.get_rank(group) < 0 or dist.get_world_size(group) == 1:
            return None
    except (RuntimeError, ValueError):  # not a member: its launch is refused before it says anything
        return None
    return control.group_token(group)


def said(op, call=None, uneven: bool = False, error: BaseException | None = None) -> dict:
    """What this rank says of its launch of `op`: the operator (its kernel and schedule), the
    communicated tensors' (shape, dtype) from the bound `call`, the caller's facts (`facts`), or the
    error its own checks raised."""
    words = {"kernel": op.local.fn.__name__, "schedule": _schedule_said(op)}
    if getattr(_told, "facts", None) is not None:
        words["facts"] = _told.facts
    if call is not None:
        words["shard"] = [list(contexts._shard_shape(call.shard, uneven)), str(call.shard.dtype)]
        words["listed"] = str(op.contexts.listed_shapes(call.arguments))  # as the first launch's check prints them
    if error is not None:
        words["error"] = _error_words(error)[:_ERROR_CHARS]
    return words


class _Group:
    """The launches of one user group on this rank: its own gloo group, how many launches it made,
    and the exchanges not yet read (warm CUDA launches)."""

    def __init__(self, group, timeout_s: float | None):
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.name = control._name_of(group)
        bound = timedelta(seconds=control.wait_bound(timeout_s))
        self.group = control.member_group(group, "launches", "gloo", bound)
        self.count = 0  # launches made on the group (exchanges started)
        self.pending: collections.deque = collections.deque()  # (n, work, outs, words, op name)
        self.broken: str | None = None
        self.seen_ops: set[str] = set()  # operators (kernel, schedule) this rank launched here before
        self.counter = _Counter(f"syncopy-launch/{self.name}/last/{self.rank}")

    def exchange(self, words: dict) -> tuple[int, object, list]:
        """Start launch n's exchange (n counts from 1); returns (n, its work, the buffers it fills)."""
        self.count += 1
        words = dict(words, n=self.count)
        data = json.dumps(words).encode()
        if len(data) > SIZE and "error" in words:  # a long error is cut
            words["error"] = words["error"][: max(0, len(words["error"]) - (len(data) - SIZE) - 8)]
            data = json.dumps(words).encode()
        for key in ("facts", "listed", "schedule"):  # then long lists are said as their digests
            if len(data) > SIZE and key in words:
                words[key] = f"sha1:{_digest(words[key])}"
                data = json.dumps(words).encode()
        if len(data) > SIZE:
            raise LaunchError(f"rank {self.rank}: what this launch says to its peers takes {len(data)} bytes, more than "
                              f"{SIZE}: this is syncopy's bug to report")
        mine = torch.zeros(SIZE, dtype=torch.uint8)
        mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        outs = [torch.empty(SIZE, dtype=torch.uint8) for _ in range(self.world)]
        self.counter.tell(f"{self.count} {words['kernel']}")
        return self.count, dist.all_gather(outs, mine, group=self.group, async_op=True), outs

    def _note(self, key: str, value: str) -> None:
        """A word in the job's store for peers that time out later (`cause`); best effort."""
        try:
            control._store().set(f"syncopy-launch/{self.name}/{key}", value)
        except Exception:  # no store (it went with rank 0): peers say what they saw
            pass

    def _read(self, key: str) -> str | None:
        try:
            store = control._store()
            full = f"syncopy-launch/{self.name}/{key}"
            return store.get(full).decode() if store.check([full]) else None
        except Exception:
            return None


class _Counter:
    """This rank's launch count on a group, written to the store by a thread of its own (a store
    write is a round trip to the store's host, which a warm launch must not wait for): only the
    latest count is written; peers read it seconds later, when they time out (`_missing`, `cause`)."""

    def __init__(self, key: str):
        # The key alone, no reference to the group: a thread (or a cycle) holding the group would keep
        # its store, and with it rank 0's TCPStore server, alive after destroy_process_group.
        self.key, self.latest, self.changed, self.closed = key, None, threading.Event(), False
        self.thread = threading.Thread(target=self._run, daemon=True, name="syncopy-launch-count")
        self.thread.start()

    def tell(self, said: str) -> None:
        self.latest = said
        self.changed.set()

    def close(self) -> None:
        """Stop the thread (its group was destroyed): what it had to write is written first."""
        self.closed = True
        self.changed.set()
        self.thread.join(timeout=5.0)

    def _run(self) -> None:
        while True:
            self.changed.wait()
            self.changed.clear()
            if self.latest is not None:
                try:
                    control._store().set(self.key, self.latest)
                except Exception:  # no store (destroyed, or gone with rank 0): peers say what they saw
                    pass
            if self.closed:
                return


_lock = threading.Lock()
_groups: dict[int, _Group] = {}  # group token -> its launches


def _drop(alive: set[int]) -> None:
    """Let go of the launches of groups that were destroyed (control.release_destroyed): their gloo
    group goes with the control plane's internal groups, their count's thread here."""
    with _lock:
        gone = [_groups.pop(t) for t in list(_groups) if t not in alive]
    for g in gone:
        g.counter.close()


control.on_release(_drop)


def _of(group, timeout_s: float | None) -> _Group:
    token = control.group_token(group)
    with _lock:
        found = _groups.get(token)
    if found is None:
        try:
            found = _Group(group, timeout_s)
        except RuntimeError as exc:  # a member never came to the group's creation
            raise LaunchError(f"rank {dist.get_rank(group)}: not every rank of the group reached its first syncopy launch "
                              f"within {control.wait_bound(timeout_s):g}s ({control.transport_text(exc)}); {SAME}") from None
        with _lock:
            _groups[token] = found
    return found


class Told:
    """A launch's exchange, started (`tell`): its number on the group, and whether the operator (or
    the caller: a first launch of a shape) launches here for the first time (`first`)."""

    def __init__(self, g: _Group, n: int, work, outs: list, words: dict, first: bool):
        self.g, self.n, self.work, self.outs, self.words, self.first = g, n, work, outs, words, first

    def hear(self, bound: float, timeout: tuple | None = None) -> None:
        """Wait up to `bound` for the peers' words and compare: a LaunchError naming the rank at
        fault when they differ or a peer did not come. `timeout` (rank, chunk_of, epoch, timeout_s): a
        peer p that did not come is a SyncopyTimeout for chunk chunk_of(p) instead (a warm launch,
        whose chunks are what never comes)."""
        _wait(self.g, self.n, self.work, self.outs, self.words, bound, timeout)

    def defer(self) -> None:
        """Read the peers' words later (a warm CUDA launch enqueues and returns): `settle_pending`, `cause`."""
        self.g.pending.append((self.n, self.work, self.outs, self.words))


def tell(op, group, words: dict) -> Told | None:
    """Start this rank's exchange of launch n of `op` on `group`: it says `words` (`said`). None in a
    world of one. Earlier warm launches' exchanges that completed are read first (a disagreement
    there raises now); a group whose launches fell out of step refuses at once."""
    if dist.get_world_size(group) == 1:
        return None
    g = _of(group, op.timeout_s)
    if g.broken is not None:
        raise LaunchError(f"rank {g.rank}: {g.broken}; create a new process group (dist.new_group) and launch on it")
    settle_pending(g, block=False)
    op_id = f"{words['kernel']} {words['schedule']}"
    first = op_id not in g.seen_ops
    g.seen_ops.add(op_id)
    return Told(g, *g.exchange(words), words, first)


def meet(op, group, words: dict, wait: bool = True) -> int:
    """`tell`, then hear the peers (bounded by the control plane's bound at the operator's first
    launch here, else by its timeout_s), or, without `wait`, read their answer later. Returns the
    launch's number on the group (1, 2, ...); 0 in a world of one."""
    told = tell(op, group, words)
    if told is None:
        return 0
    if not wait and not told.first:
        told.defer()
    else:
        told.hear(control.wait_bound(op.timeout_s) if told.first else op.timeout_s)
    return told.n


def settle_pending(g: _Group, block: bool, bound: float = 0.0) -> None:
    """Read the exchanges of earlier warm launches that completed (all of them, waiting up to `bound`
    for each, with `block`); a disagreement found there raises as at the launch itself."""
    while g.pending:
        n, work, outs, words = g.pending[0]
        if not block and not work.is_completed():
            return
        g.pending.popleft()
        _wait(g, n, work, outs, words, bound)


def _completed_difference(g: _Group) -> str | None:
    """The disagreement an earlier warm launch's completed exchange found (its text), if any; the
    exchanges still in flight stay pending."""
    try:
        settle_pending(g, block=False)
    except LaunchError as exc:
        return str(exc)
    return None


def settle(group) -> None:
    """What the warm launches' exchanges on `group` found so far, raised (FusedKernel.synchronize)."""
    g = _groups.get(control.group_token(group))
    if g is not None:
        settle_pending(g, block=False)


def _wait(g: _Group, n: int, work, outs: list, words: dict, bound: float, timeout: tuple | None = None) -> None:
    """Wait up to `bound` for launch n's exchange and compare: a LaunchError naming the rank at fault
    when a peer differs, did not come (this rank gives up, and says so for it: `_gave_up`), or came
    only after its peers had given up on it (this rank is the late one)."""
    try:
        work.wait(timeout=timedelta(seconds=max(bound, 0.001)))
    except RuntimeError as exc:
        g.broken = f"launch {n} of this group never met every peer's"
        kind, detail, late = _missing(g, n, bound, exc)
        _gave_up(g, n, f"after {bound:g}s")
        if timeout is not None and kind == "missing":
            from syncopy.errors import SyncopyTimeout

            rank, chunk_of, epoch, timeout_s = timeout
            chunk = chunk_of(min(late) if late else next(r for r in range(g.world) if r != g.rank))
            raise SyncopyTimeout(rank, chunk, epoch, timeout_s, f"launch {n} on this group: {detail}", SAME + ", or raise timeout_s") from None
        raise LaunchError(f"rank {g.rank}: launch {n} on this group ({words['kernel']}): {detail}" + (
            f"; {SAME}, or raise timeout_s" if kind == "missing" else "")) from None
    given_up = _given_up_on(g, n) if bound > 0 else None  # a deferred exchange read later: no rank waited for it
    if given_up is not None:
        g.broken = f"launch {n} of this group came after its peers had given up on it"
        raise LaunchError(f"rank {g.rank}: launch {n} on this group ({words['kernel']}): {_came_late(given_up)}")
    theirs = [json.loads(o.numpy().tobytes().rstrip(b"\0").decode() or "{}") for o in outs]
    problem = difference(g.rank, n, theirs[g.rank], theirs)  # this rank's words as its peers read them
    if problem is not None:
        if "are out of step" in problem:
            g.broken = f"the launches on this group fell out of step at launch {n}"
        raise LaunchError(problem)


def _gave_up(g: _Group, n: int, after: str) -> None:
    """This rank stops waiting for launch n (`after`: how long it waited): its word for the peer that
    comes late (`_given_up_on`)."""
    g._note(f"gaveup/{n}/{g.rank}", after)
    try:
        control._store().add(f"syncopy-launch/{g.name}/gaveup/{n}", 1)
    except Exception:
        pass


def _given_up_on(g: _Group, n: int) -> str | None:
    """Did a peer give up waiting for launch n before this rank came (one store round trip when none did)?"""
    try:
        if control._store().add(f"syncopy-launch/{g.name}/gaveup/{n}", 0) == 0:
            return None
    except Exception:  # no store: nothing known
        return None
    words = [f"rank {r} gave up waiting for it {said}" for r in range(g.world)
             if r != g.rank and (said := g._read(f"gaveup/{n}/{r}")) is not None]
    return "; ".join(words) or None


def difference(rank: int, n: int, mine: dict, theirs: list[dict]) -> str | None:
    """The first way a peer's launch n differs from this rank's (`mine`), in one line; None if none.
    This rank's own error is its own to raise (the caller does): it is not reported here."""
    if "error" in mine:
        return None
    for r, other in enumerate(theirs):
        if r == rank:
            continue
        if other.get("n") != n:  # one rank made a launch the others did not: no later launch can pair
            return (f"rank {rank}: the launches on this group are out of step: rank {r} made its launch {other.get('n')} "
                    f"({other.get('kernel')}) as rank {rank} made its launch {n} ({mine['kernel']}); {SAME}; create a new "
                    "process group")
        if "error" in other:
            return f"rank {rank}: launch {n} on this group ({mine['kernel']}): rank {r} refused it: {other['error']}"
        if other.get("facts") != mine.get("facts") and isinstance(other.get("facts"), list) and isinstance(mine.get("facts"), list):
            who, told, why = mine["facts"]
            for (phrase, value), (_, theirs) in zip(told, other["facts"][1]):
                if value != theirs:
                    return f"{who}: rank {r} passed {phrase.format(theirs)} but rank {rank} passed {phrase.format(value)}; {why}"
        if other["kernel"] != mine["kernel"]:
            return (f"rank {rank}: launch {n} on this group: rank {r} launched {other['kernel']} ({_schedule_words(other)}) but "
                    f"rank {rank} {mine['kernel']} ({_schedule_words(mine)}); {SAME}")
        if other["schedule"] != mine["schedule"]:
            if not (_schedule_of(other) and _schedule_of(mine)):  # said as digests: only that they differ is known
                return f"rank {rank}: launch {n} on this group: rank {r} launched {mine['kernel']} with another schedule; {SAME}"
            differs = contexts._schedule_difference(r, other["schedule"], rank, mine["schedule"])
            if n == 1:
                return differs
            differs = differs.split(";")[0].replace(f"rank {r} launched with", f"rank {r} launched {mine['kernel']} with", 1)
            return (f"rank {rank}: launch {n} on this group: {differs}; every rank must launch the same operators in the same "
                    "order, each with the same schedule (the same file and the same overlap() overrides)")
        schedule = _schedule_of(mine)
        tensors = schedule.get("tensor", "?")
        tensors = tensors if isinstance(tensors, list) else [tensors]
        if other.get("shard") != mine.get("shard"):
            return contexts.shard_difference(tensors[0], schedule.get("pattern", "the pattern"), schedule.get("dim", 0), r,
                                             other["shard"], rank, mine["shard"])
        if other.get("listed") != mine.get("listed"):
            return contexts.listed_difference(tensors[1:], r, other["listed"], rank, mine["listed"])
    return None


def _schedule_of(words: dict) -> dict:
    """The schedule a rank said, as a dict ({} where it was said as its digest)."""
    said = words.get("schedule", "")
    return {} if said.startswith("sha1:") else json.loads(said)


def _schedule_words(words: dict) -> str:
    s = _schedule_of(words)
    tensor = s.get("tensor")
    tensor = ", ".join(f"'{t}'" for t in tensor) if isinstance(tensor, list) else f"'{tensor}'"
    return f"{s.get('pattern')} of {tensor}"


def _missing(g: _Group, n: int, bound: float, exc: BaseException) -> tuple[str, str, dict[int, tuple[int, str]]]:
    """Why launch n's exchange never completed, as (kind, words, late): "late" (this rank came after
    its peers gave up on it), "closed" (a peer's connection closed: it died, or gave up on its own
    wait) or "missing" (peers that did not come within `bound`); `late`: those peers, from the store's
    words (`_late`)."""
    text = control.transport_text(exc)
    late = _late(g, n)
    if "imeout" not in text and "imed out" not in text:
        # A connection closed: a peer that gave up on this launch before this rank came closes it too.
        given_up = _given_up_on(g, n)
        if given_up is not None:
            return "late", _came_late(given_up), late
        who = f"rank(s) {', '.join(map(str, late))} had not made it" if late else "every peer had made it"
        return "closed", (f"a peer's connection closed while this rank waited for it ({text}); {who}: look for the cause "
                          "in their own output, then restart the job"), late
    said = [f"rank {r} made {count} launch{'es' if count != 1 else ''} here" + (f", the last of {kernel}" if count else "")
            for r, (count, kernel) in late.items()]
    who = f"rank(s) {', '.join(map(str, late))}" if late else "some rank"
    why = f" ({'; '.join(said)})" if said else f" ({text})"
    return "missing", f"{who} did not make it within {bound:g}s{why}", late


def _came_late(given_up: str) -> str:
    return (f"this rank came late: {given_up}; launch on every rank within timeout_s of each other (or raise timeout_s), "
            "then create a new process group")


def _last(g: _Group, r: int) -> tuple[int, str]:
    """Rank r's launches on the group so far and the kernel of its last, as it last wrote in the
    store ((0, '-'): none, or no word)."""
    count, _, kernel = (g._read(f"last/{r}") or "0 -").partition(" ")
    return int(count), kernel


def _late(g: _Group, n: int) -> dict[int, tuple[int, str]]:
    """The peers that have not made launch n, with what they made (`_last`)."""
    return {r: last for r in range(g.world) if r != g.rank and (last := _last(g, r))[0] < n}


def refused(group, n: int, exc: BaseException) -> None:
    """This rank refuses its launch n after the exchange (its own later checks): say so in the store,
    so that peers waiting for its chunks name it and its error (`cause`)."""
    if not n:
        return
    g = _groups.get(control.group_token(group))
    if g is not None:
        g._note(f"refused/{n}/{g.rank}", _error_words(exc)[:_ERROR_CHARS])


def cause(group, n: int | None) -> str | None:
    """Why a peer's chunks of launch n may never come, if this rank can tell: a peer refused that
    launch after the exchange (`refused`), a warm launch's exchange found the ranks disagreeing, or a
    peer never made launch n. n None: a launch before this one, whose error was read only now (a GPU
    launch's, from its error ring): what the earlier exchanges found. None when nothing is known (a
    slow link, a peer stuck in its kernel)."""
    g = _groups.get(control.group_token(group))
    if g is None or n == 0:
        return None
    found = _completed_difference(g)
    if found is not None:
        return found.split(": ", 1)[-1] if found.startswith(f"rank {g.rank}: ") else found
    if n is None:
        return None
    for r in range(g.world):
        if r != g.rank:
            text = g._read(f"refused/{n}/{r}")
            if text is not None:
                return f"rank {r} refused launch {n} on this group: {text}"
    late = _late(g, n)
    if late:
        return f"rank(s) {', '.join(map(str, late))} never made launch {n} on this group"
    return None
