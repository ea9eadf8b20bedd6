"""The full (explicit) schedule form: every chunk slice and every transfer written out.

The minimal form names an order (`ring`, `local_first`, `bidirectional_ring`, a list of peer
offsets) and syncopy derives the transfers. The full form writes them down, so that a plan from
another system (Syncopate's plan descriptors, a hand-tuned swizzle) is ported verbatim:

    pattern: all_gather
    tensor: A
    units_per_rank: 5              # each shard is cut into 5 equal units (boundaries floor(u*S/5))
    chunks: [[2, 5], [0, 2]]       # chunk i of every shard = units [lo, hi): chunk 0 is the bottom 3/5
    order: explicit
    world: 3                       # the plan is written for 3 ranks (checked at launch)
    transfers:                     # chunk [block, index] moves from -> to, in step `step`
      - {id: a, chunk: [0, 1], from: 0, to: 1, step: 1}
      - {chunk: [0, 1], from: 1, to: 2, step: 2}              # a relay: rank 1 forwards what `a` brought
      - {chunk: [1, 0], from: 1, to: 0, step: 2, after: [a]}  # rank 1 sends only once `a` landed on it
      ...                          # the whole plan: examples/explicit_all_gather.yaml

Meaning (what the runtime does with it):
- **Slices.** `units_per_rank: U` cuts every shard into U units with the same floor(u*S/U)
  boundaries as the minimal form; `chunks` lists each chunk's units [lo, hi). Units keep a plan
  independent of the shard size (a row-exact plan for one shape takes U = rows per rank) and keep
  the kernel side unchanged: the kernel waits on one flag per *unit*, and a chunk landing raises
  the flags of all its units. Slices may be listed in any order but must tile [0, U) exactly.
  Without `chunks`, chunk i is unit i of `chunks_per_rank` units (the minimal form).
- **Transfers.** `chunk: [b, i]` is chunk i of block b (for all_gather: of rank b's shard). A
  transfer sent from a rank other than b is a relay: it waits until the chunk landed on that rank.
  `after: [id or index, ...]` adds waits for other transfers landing on the *sending* rank (the
  only signals a rank can see). `step` orders things: each rank expects its chunks in (step, list
  position) order and issues its sends in that order; a transfer's step must come after the steps
  of the transfers it waits for (by default it is one more than the latest of them, or 1).
  `mode` (push | pull) says who drives the copy (the gloo backend moves both the same way).
- **Per pattern** (a key a pattern does not use is refused, never ignored):
  - all_gather: transfers copy, land where they come from (`into`, if given, equals `chunk`) and
    signal; relays as above.
  - all_to_all: rank d's buffer holds in block b what rank b's input holds in block d, so a block
    goes straight from its owner (relays are refused): `{chunk: [b, i], from: b, to: d}` lands
    chunk i in block b of rank d. A plan descriptor's form is accepted too: `chunk` the sender's
    block for the receiver, `into` where it lands, `{chunk: [d, i], from: b, to: d, into: [b, i]}`.
  - reduce_scatter, all_reduce: chunk [b, i] is rows of rank b's part of the output, and every
    transfer of a reduce_scatter says `reduce: sum` (the only op lowered; what it carries is
    explained where reduce plans are checked, below). An all_reduce transfer without `reduce`
    copies a chunk's sum on. Neither takes `chunks:` slices, `after`, `into` or `signal: false`.

Validation that needs neither the world nor the shard shape runs when the schedule loads (errors
name the key path, e.g. `transfers[3].from`, and the file's line): slices that overlap, leave gaps
or fall outside the units; ranks outside `world`; unknown `after` names; a chunk that reaches a rank
twice or reaches the rank it came from (its signal would be produced twice in one epoch); a relay of
a chunk its rank never receives, a rank that never receives a chunk (waits on signals nobody
produces); all_to_all blocks sent by a rank that does not own them; reduce plans in which a
partial would be added twice or a sum misses one, a rank that never gets a sum it must hold, a
copy of a sum its rank never has; dependency cycles (named in order); steps that run before what
they wait for. At launch the plan's `world` must equal the group's size and no chunk may be empty
for the shard's row count.

`expand(schedule, world)` (schedule/expand.py) writes a named order as this form (`syncopy expand S.yaml --world N`)
for every pattern; its plans equal the named order's, which is how the form is tested to be faithful.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from syncopy.errors import ScheduleError, ScheduleLocation
from syncopy.schedule.patterns import PRODUCER_PATTERNS

if TYPE_CHECKING:
    from syncopy.schedule.model import Schedule, Transfer


def key_path(path: tuple) -> str:
    """('transfers', 3, 'from') -> 'transfers[3].from'."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


class PlanError(ScheduleError):
    """A full-form schedule that contradicts itself; `path` is the key path it points at (the loader
    adds the file and line)."""

    def __init__(self, path: tuple, message: str):
        self.path = path
        super().__init__(message, ScheduleLocation(None, key_path(path)))


# --------------------------------------------------------------------------------------------------
# Validation (at load: needs neither the launch world nor the shard shape)
# --------------------------------------------------------------------------------------------------
def validate(s: "Schedule") -> None:
    """Raise `PlanError` at the first contradiction in the full-form keys of `s`."""
    _check_slices(s)
    if s.transfers is None:
        if s.order == "explicit":
            raise PlanError(("order",), "`order: explicit` needs a `transfers:` list; write the transfers or use a named order")
        if isinstance(s.order, list) and s.world is not None and len(s.order) != s.world - 1:
            raise PlanError(("order",), f"the explicit order {s.order} lists {len(s.order)} peer offsets but `world: {s.world}` "
                                        f"has {s.world - 1} peers; list each of the offsets 1..{s.world - 1} once, or fix `world`")
        return
    if s.order == "auto":
        raise PlanError(("order",), "order 'auto' lets the planner choose a named order, but the `transfers:` already fix "
                                    "every transfer; write `order: explicit` (or drop `order`), or drop `transfers:` to let the planner choose")
    if s.chunks_per_rank == "auto":
        raise PlanError(("chunks_per_rank",), "chunks_per_rank 'auto' lets the planner choose the chunk count, but the "
                                              "`transfers:` name chunk indices; give the chunk count the transfers are written for")
    if s.order != "explicit":
        raise PlanError(("order",), f"order {s.order!r} contradicts the explicit `transfers:`; write `order: explicit` (or drop `order`)")
    if s.world is None:
        raise PlanError(("transfers",), "explicit transfers need `world: N`, the number of ranks they are written for; add it")
    after = _check_transfers(s)
    if s.pattern == "all_gather":
        _check_all_gather_flow(s, after)
    elif s.pattern == "all_to_all":
        _check_every_rank_receives(s, _delivery(s))
    edges = _waits_for(s, after)
    if s.pattern in PRODUCER_PATTERNS:
        # Counting partials needs the partial sums acyclic; copies of sums are checked after the counts,
        # so that a copy to a rank that adds the sum itself is named as that, not as the cycle it makes.
        _check_acyclic(s, [e if t.reduce is not None else [] for t, e in zip(s.transfers, edges)])
        _check_reduce_flow(s)
    _check_acyclic(s, edges)
    _steps(s, edges, check=True)


def _check_slices(s: "Schedule") -> None:
    if s.chunks is None:
        if s.units_per_rank is not None:
            raise PlanError(("units_per_rank",), "units_per_rank only applies to an explicit `chunks:` list of slices; add the slices or remove it")
        return
    if s.pattern in PRODUCER_PATTERNS:
        raise PlanError(("chunks",), f"explicit slices are lowered for all_gather and all_to_all only: a {s.pattern} kernel announces "
                                     "chunks_per_rank equal chunks; drop `units_per_rank` and `chunks` and give chunks_per_rank")
    units = s.units_per_rank
    if units is None:
        raise PlanError(("chunks",), "explicit chunk slices need `units_per_rank: U` (each shard is cut into U equal units and "
                                     "a slice [lo, hi] takes units lo..hi-1); add it")
    if not s.chunks:
        raise PlanError(("chunks",), "the list of chunk slices is empty; list at least one slice [lo, hi]")
    if s.chunks_per_rank != len(s.chunks):
        raise PlanError(("chunks_per_rank",), f"chunks_per_rank is {s.chunks_per_rank} but `chunks` lists {len(s.chunks)} slices; "
                                              f"drop chunks_per_rank or make it {len(s.chunks)}")
    for i, (lo, hi) in enumerate(s.chunks):
        if not 0 <= lo < hi:
            raise PlanError(("chunks", i), f"slice [{lo}, {hi}] is empty or negative; a slice [lo, hi] takes units lo..hi-1 with 0 <= lo < hi")
        if hi > units:
            raise PlanError(("chunks", i), f"slice [{lo}, {hi}] ends past the {units} units of a shard (units_per_rank); "
                                           f"end it at {units} or raise units_per_rank")
    by_start = sorted(range(len(s.chunks)), key=lambda i: s.chunks[i])
    covered = 0
    for i in by_start:
        lo, hi = s.chunks[i]
        if lo < covered:
            j = next(j for j in by_start if s.chunks[j][0] < hi and lo < s.chunks[j][1] and j != i)
            a, b = sorted((i, j))
            raise PlanError(("chunks", b), f"slice {list(s.chunks[b])} overlaps chunks[{a}] {list(s.chunks[a])}; "
                                           "every unit must belong to exactly one chunk")
        if lo > covered:
            raise PlanError(("chunks",), f"units [{covered}, {lo}) of each shard are in no chunk (a gap); "
                                         "extend a slice over them or add the slice " + f"[{covered}, {lo}]")
        covered = hi
    if covered < units:
        raise PlanError(("chunks",), f"units [{covered}, {units}) of each shard are in no chunk (a gap; units_per_rank is {units}); "
                                     f"extend a slice over them, add the slice [{covered}, {units}] or lower units_per_rank")


def name(s: "Schedule", i: int) -> str:
    """How errors call transfer i: its id, else its place in the list."""
    t = s.transfers[i]
    return repr(t.id) if t.id is not None else f"transfers[{i}]"


def _describe(s: "Schedule", i: int) -> str:
    t = s.transfers[i]
    return f"{name(s, i)} ({t.src}->{t.dst} chunk {_chunk(t.chunk)})"


def _chunk(c) -> str:
    return f"({c[0]}, {c[1]})"


def _check_transfers(s: "Schedule") -> list[list[int]]:
    """Per-transfer checks; returns each transfer's `after` as list indices."""
    world, c, transfers = s.world, s.chunks_per_rank, s.transfers
    ids: dict[str, int] = {}
    for i, t in enumerate(transfers):
        if t.id is not None:
            if t.id in ids:
                raise PlanError(("transfers", i, "id"), f"id {t.id!r} is already used by transfers[{ids[t.id]}]; give every transfer its own id")
            ids[t.id] = i
    after: list[list[int]] = []
    for i, t in enumerate(transfers):
        for key, rank in (("from", t.src), ("to", t.dst)):
            if rank >= world:
                raise PlanError(("transfers", i, key), f"rank {rank} is outside the world of {world} ranks (`world: {world}`); use a rank in 0..{world - 1}")
        if t.src == t.dst:
            raise PlanError(("transfers", i, "to"), f"the transfer goes from rank {t.src} to itself; a transfer moves a chunk between two ranks")
        for key, region in (("chunk", t.chunk), ("into", t.into)):
            if region is None:
                continue
            block, index = region
            if not 0 <= block < world:
                raise PlanError(("transfers", i, key), f"[{block}, {index}] names block {block} but the world has {world} ranks; "
                                                       f"use a block (the chunk's home rank) in 0..{world - 1}")
            if not 0 <= index < c:
                raise PlanError(("transfers", i, key), f"[{block}, {index}] names chunk {index} but a shard has {c} chunks; use an index in 0..{c - 1}")
        _check_fields(s, i, t)
        deps = []
        for k, ref in enumerate(t.after):
            where = ("transfers", i, "after", k)
            if isinstance(ref, int):
                if not 0 <= ref < len(transfers):
                    raise PlanError(where, f"there is no transfers[{ref}] (the list has {len(transfers)}); name a transfer by its id or its index")
                j = ref
            elif ref in ids:
                j = ids[ref]
            else:
                raise PlanError(where, f"no transfer has id {ref!r}; name a transfer by its id or its index in the list")
            if j == i:
                raise PlanError(where, "a transfer cannot wait for itself; remove this entry")
            if transfers[j].dst != t.src:
                raise PlanError(where, f"{_describe(s, j)} lands on rank {transfers[j].dst}, but this transfer starts on rank {t.src}, "
                                       f"which never sees that signal (a wait on a signal nobody produces there); "
                                       f"wait only for transfers that land on rank {t.src}")
            deps.append(j)
        after.append(deps)
    if s.pattern in PRODUCER_PATTERNS:
        return after  # partials reach a rank several times by design: _check_reduce_flow counts them
    # A region signalled twice on one rank: its flag would be raised twice in one epoch.
    signalled: dict[tuple, int] = {}
    for i, t in enumerate(transfers):
        region = landing(t)
        if (t.dst, region) in signalled:
            j = signalled[(t.dst, region)]
            raise PlanError(("transfers", i), f"chunk {_chunk(region)} reaches rank {t.dst} twice (also {_describe(s, j)}), so its signal would "
                                              "be produced twice in one epoch; remove one of the two")
        signalled[(t.dst, region)] = i
    return after


def landing(t: "Transfer") -> tuple[int, int]:
    """The region transfer `t` fills on its receiver, [block, index]: `into` where given, else `chunk`.
    For all_gather and all_to_all it is also the kernel's chunk whose flag the landing raises."""
    return tuple(t.into if t.into is not None else t.chunk)


def _check_fields(s: "Schedule", i: int, t: "Transfer") -> None:
    """What one transfer may say for `s.pattern`: a key the pattern does not use is refused, never ignored."""
    if s.pattern == "all_to_all":
        _check_all_to_all_fields(s, i, t)
    elif t.into is not None and tuple(t.into) != tuple(t.chunk):
        what = ("an all_gather chunk lands where it comes from in the gathered tensor" if s.pattern == "all_gather" else
                f"a {s.pattern} transfer adds into the same chunk of the receiver's partial")
        raise PlanError(("transfers", i, "into"), f"{what}; drop `into`")
    if s.pattern in PRODUCER_PATTERNS:
        _check_reduce_fields(s, i, t)
        return
    if t.reduce is not None:
        raise PlanError(("transfers", i, "reduce"), f"an {s.pattern} transfer copies; `reduce` is for reduce_scatter and all_reduce plans, drop it")
    if not t.signal:
        raise PlanError(("transfers", i, "signal"), f"the kernel on rank {t.dst} reads chunk {_chunk(landing(t))}, so its landing must raise "
                                                    "the signal; drop `signal: false`")


def _check_all_to_all_fields(s: "Schedule", i: int, t: "Transfer") -> None:
    # Rank d's buffer holds in block b what rank b's input holds in block d: a block has one owner,
    # and what lands is fixed by (owner, receiver, index). Without `into`, `chunk` names that landing
    # region [owner, index]; with `into`, `chunk` names the sender's block for the receiver (its
    # source region) and `into` the landing region, as a plan descriptor from another system would.
    block, index = t.chunk
    if t.into is None or tuple(t.into) == tuple(t.chunk):
        if block != t.src:
            raise PlanError(("transfers", i, "from"), f"chunk {_chunk(t.chunk)} is rank {block}'s block, but this transfer sends it from "
                                                      f"rank {t.src}; all_to_all blocks go straight from their owner (relays are not "
                                                      f"lowered for all_to_all): send it from rank {block}")
        return
    if block != t.dst:
        raise PlanError(("transfers", i, "chunk"), f"with `into`, `chunk` names the block of rank {t.src}'s input that goes to rank {t.dst}, "
                                                   f"[{t.dst}, {index}], not {list(t.chunk)}; write chunk: [{t.dst}, {index}]")
    if tuple(t.into) != (t.src, index):
        raise PlanError(("transfers", i, "into"), f"rank {t.dst} keeps what rank {t.src} sends in its block {t.src}, so chunk {index} lands "
                                                  f"at [{t.src}, {index}], not {list(t.into)}; write into: [{t.src}, {index}]")


def _check_reduce_fields(s: "Schedule", i: int, t: "Transfer") -> None:
    if t.reduce is None and s.pattern == "reduce_scatter":
        raise PlanError(("transfers", i), "a reduce_scatter transfer adds the sender's partial (or partial sum) into the receiver's; "
                                          "add `reduce: sum`")
    if t.reduce not in (None, "sum"):
        raise PlanError(("transfers", i, "reduce"), f"reduce {t.reduce!r} is not lowered: the kernel's partials are added; "
                                                    "write reduce: sum")
    if not t.signal:
        raise PlanError(("transfers", i, "signal"), f"the {s.pattern} kernel waits on no landing (it writes the chunks the runtime "
                                                    "sends), so `signal` says nothing here; drop `signal: false`")
    if t.after:
        raise PlanError(("transfers", i, "after"), f"`after` is not lowered for {s.pattern} plans: a partial sum leaves once every "
                                                   "partial of its chunk has reached its rank, and the sum once it is complete; drop `after`")


def _delivery(s: "Schedule") -> dict[tuple[int, tuple[int, int]], int]:
    """(rank, chunk) -> the transfer that lands it there (all_gather, all_to_all: at most one, checked)."""
    return {(t.dst, landing(t)): i for i, t in enumerate(s.transfers)}


def _check_all_gather_flow(s: "Schedule", after: list[list[int]]) -> None:
    world, c = s.world, s.chunks_per_rank
    delivered = _delivery(s)
    for i, t in enumerate(s.transfers):
        block = t.chunk[0]
        if t.dst == block:
            raise PlanError(("transfers", i), f"chunk {_chunk(t.chunk)} comes from rank {block}, which holds it from the start, so its signal "
                                              "would be produced twice in one epoch; remove this transfer")
        if t.src != block and (t.src, tuple(t.chunk)) not in delivered:
            raise PlanError(("transfers", i), f"rank {t.src} forwards chunk {_chunk(t.chunk)} but no transfer brings it to rank {t.src}, so this "
                                              f"send would wait on a signal nobody produces; add a transfer of chunk {list(t.chunk)} to "
                                              f"rank {t.src}, or send it from rank {block}")
    _check_every_rank_receives(s, delivered)


def _check_every_rank_receives(s: "Schedule", delivered: dict) -> None:
    """Every rank's kernel reads every peer's chunks: each must land there (all_gather, all_to_all)."""
    world, c = s.world, s.chunks_per_rank
    for rank in range(world):
        for block in range(world):
            if block == rank:
                continue
            for index in range(c):
                if (rank, (block, index)) not in delivered:
                    raise PlanError(("transfers",), f"rank {rank} never receives chunk ({block}, {index}), so its kernel would wait on a signal "
                                                    f"nobody produces; add a transfer of chunk [{block}, {index}] to rank {rank}")


def _waits_for(s: "Schedule", after: list[list[int]]) -> list[list[tuple[int, str]]]:
    """Edges i -> j (transfer i waits for transfer j), with why: 'after' or 'relay'."""
    if s.pattern in PRODUCER_PATTERNS:
        arrivals = _arrivals(s)
        return [[(j, "relay") for j in _passes_on(s, i, arrivals)] for i in range(len(s.transfers))]
    delivered = _delivery(s) if s.pattern == "all_gather" else {}
    edges = []
    for i, t in enumerate(s.transfers):
        out = [(j, "after") for j in after[i]]
        relay = delivered.get((t.src, tuple(t.chunk)))
        if relay is not None and t.src != t.chunk[0] and relay not in after[i]:
            out.append((relay, "relay"))
        edges.append(out)
    return edges


# --------------------------------------------------------------------------------------------------
# reduce_scatter and all_reduce: chunk [b, i] = rows of rank b's part of the output. Every rank's
# kernel writes a partial of every chunk. A transfer with `reduce: sum` sends what its rank holds
# of the chunk and the receiver adds it to its own: the rank's partial sum (its own partial plus
# every partial sum of the chunk that reaches it: the transfer leaves once they all have), or its
# own partial alone when the transfer's `step` comes no later than the (explicit) steps of all of
# them. A rank to which every rank's partial comes exactly once holds the chunk's sum. all_reduce:
# a transfer without `reduce` copies the sum on, from a rank that has it.
#
#   reduce_scatter, ring of 3, chunk (2, 0):   0 --partial--> 1 --partial sum--> 2 (= the sum)
#   all_reduce, one-shot (every transfer `step: 1`): every rank sends its own partial to every rank
# --------------------------------------------------------------------------------------------------
def _arrivals(s: "Schedule") -> tuple[dict, dict]:
    """(rank, chunk) -> the transfers adding into it there, and the transfers copying its sum there."""
    adds: dict[tuple, list[int]] = {}
    copies: dict[tuple, list[int]] = {}
    for i, t in enumerate(s.transfers):
        (adds if t.reduce is not None else copies).setdefault((t.dst, tuple(t.chunk)), []).append(i)
    return adds, copies


def _passes_on(s: "Schedule", i: int, arrivals: tuple[dict, dict]) -> list[int]:
    """What transfer i waits for on its sending rank: every partial sum of its chunk coming there and,
    for a copy of the sum, the copy that brings the sum there."""
    t = s.transfers[i]
    adds, copies = arrivals
    key = (t.src, tuple(t.chunk))
    if t.reduce is None:
        return adds.get(key, []) + copies.get(key, [])
    coming = adds.get(key, [])
    own_only = t.step is not None and all(s.transfers[j].step is not None and s.transfers[j].step >= t.step for j in coming)
    return [] if own_only else coming


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def partials(s: "Schedule") -> dict[tuple[int, tuple[int, int]], frozenset]:
    """(rank, chunk) -> the ranks whose partials the rank adds up for that chunk (its own included),
    for every rank and chunk; raises PlanError where a partial would be added twice. Needs an acyclic plan."""
    world, c = s.world, s.chunks_per_rank
    arrivals = _arrivals(s)
    adds, _ = arrivals
    out: dict[tuple, frozenset] = {}

    def at(rank: int, chunk: tuple) -> frozenset:
        key = (rank, chunk)
        if key in out:
            return out[key]
        have = {rank: None}
        for j in adds.get(key, []):
            sender = s.transfers[j].src
            brought = at(sender, chunk) if _passes_on(s, j, arrivals) else frozenset({sender})
            twice = sorted(brought & have.keys())
            if twice:
                k = twice[0]
                already = "its own" if have[k] is None else f"brought by {name(s, have[k])}"
                raise PlanError(("transfers", j), f"{_describe(s, j)} brings rank {k}'s partial of chunk {_chunk(chunk)} to rank {rank}, which "
                                                  f"already adds it ({already}), so it would be added twice; send each rank's partial "
                                                  "to a chunk's sum once")
            have.update(dict.fromkeys(brought, j))
        out[key] = frozenset(have)
        return out[key]

    for rank in range(world):
        for block in range(world):
            for index in range(c):
                at(rank, (block, index))
    return out


def _check_reduce_flow(s: "Schedule") -> None:
    everyone = frozenset(range(s.world))
    summed = partials(s)
    _, copies = _arrivals(s)

    def missing(rank: int, chunk: tuple) -> str:
        return _ranks(everyone - summed[(rank, chunk)])

    def has_sum(rank: int, chunk: tuple) -> bool:
        return summed[(rank, chunk)] == everyone or (rank, chunk) in copies

    if s.pattern == "reduce_scatter":
        for (rank, chunk), have in summed.items():
            if chunk[0] == rank and have != everyone:
                raise PlanError(("transfers",), f"rank {rank} sums chunk {_chunk(chunk)} of its part without the partials of "
                                                f"{missing(rank, chunk)}, so its result would be wrong; add transfers of chunk "
                                                f"{list(chunk)} with reduce: sum that bring them to rank {rank}")
        return
    for i, t in enumerate(s.transfers):
        if t.reduce is None and not has_sum(t.src, tuple(t.chunk)):
            raise PlanError(("transfers", i), f"rank {t.src} copies on the sum of chunk {_chunk(t.chunk)}, but it never has it (it adds "
                                              f"no partials of {missing(t.src, tuple(t.chunk))} and no transfer copies the sum to it), so "
                                              "this send would wait on a signal nobody produces; add `reduce: sum` to pass on a partial "
                                              "sum, or send the sum from a rank that has it")
    for (rank, chunk), have in summed.items():
        came = copies.get((rank, chunk), [])
        if have == everyone and came:
            raise PlanError(("transfers", came[0]), f"rank {rank} adds every partial of chunk {_chunk(chunk)} itself, so this copy would land "
                                                    "its sum there a second time; remove this transfer")
        if len(came) > 1:
            raise PlanError(("transfers", came[1]), f"the sum of chunk {_chunk(chunk)} reaches rank {rank} twice (also "
                                                    f"{_describe(s, came[0])}); remove one of the two")
        if have != everyone and not came:
            raise PlanError(("transfers",), f"rank {rank} never gets the sum of chunk {_chunk(chunk)}: it adds no partials of "
                                            f"{missing(rank, chunk)} and no transfer copies the sum to it; add a transfer of chunk "
                                            f"{list(chunk)} to rank {rank} (reduce: sum for the missing partials, or a copy of the sum)")


def _check_acyclic(s: "Schedule", edges) -> None:
    white, grey, black = 0, 1, 2
    color = [white] * len(edges)
    for root in range(len(edges)):
        if color[root] != white:
            continue
        stack, path = [(root, iter(edges[root]))], [root]
        color[root] = grey
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = black
                stack.pop()
                path.pop()
                continue
            j = nxt[0]
            if color[j] == grey:
                cycle = path[path.index(j):]
                k = cycle.index(min(cycle))  # start at the first-listed transfer: stable messages
                cycle = cycle[k:] + cycle[:k]
                chain = " -> ".join(_describe(s, x) for x in cycle) + f" -> {name(s, cycle[0])}"
                raise PlanError(("transfers", cycle[0]), f"transfers form a cycle, a deadlock: {chain} {_cycle_fix(s)}")
            if color[j] == white:
                color[j] = grey
                stack.append((j, iter(edges[j])))
                path.append(j)


def _cycle_fix(s: "Schedule") -> str:
    if s.pattern in PRODUCER_PATTERNS:
        return ("(each passes on a partial sum that includes what the next brings); to send a rank's own partial alone, give "
                "that transfer a step no later than the steps of every transfer adding its chunk on its rank")
    return "(each waits for the next, by `after` or because it forwards what the next brings); remove an `after` entry or re-route a relay on this cycle"


def _topological(edges) -> list[int]:
    done, out = [False] * len(edges), []

    def visit(i):
        stack = [(i, iter(edges[i]))]
        done[i] = True
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                out.append(node)
                stack.pop()
            elif not done[nxt[0]]:
                done[nxt[0]] = True
                stack.append((nxt[0], iter(edges[nxt[0]])))

    for i in range(len(edges)):
        if not done[i]:
            visit(i)
    return out


def _relay_reason(s: "Schedule", t: "Transfer", other: str) -> str:
    if t.reduce is not None:
        return f"it passes on rank {t.src}'s partial sum of chunk {_chunk(t.chunk)}, which includes what {other} brings there"
    if s.pattern in PRODUCER_PATTERNS:
        return f"it copies on the sum of chunk {_chunk(t.chunk)}, which needs what {other} brings to rank {t.src}"
    return f"it forwards chunk {_chunk(t.chunk)}, which {other} brings to rank {t.src}"


def _steps(s: "Schedule", edges, check: bool) -> list[int]:
    """Each transfer's step: as written, or one after the latest step it waits for (1 with no waits)."""
    steps = [0] * len(edges)
    for i in _topological(edges):
        t = s.transfers[i]
        latest = max((steps[j] for j, _ in edges[i]), default=0)
        if t.step is None:
            steps[i] = latest + 1
            continue
        steps[i] = t.step
        if check and edges[i] and t.step <= latest:
            j, why = max(edges[i], key=lambda e: steps[e[0]])
            reason = _relay_reason(s, t, name(s, j)) if why == "relay" else "listed in `after`"
            raise PlanError(("transfers", i, "step"), f"step {t.step} is not after step {steps[j]} of {name(s, j)}, which this transfer "
                                                      f"waits for ({reason}); give it a step of at least {steps[j] + 1}")
    return steps


# --------------------------------------------------------------------------------------------------
# For the runtime: the transfers in execution order, with their waits
# --------------------------------------------------------------------------------------------------
def ordered(s: "Schedule") -> list[tuple[int, int, list[int]]]:
    """[(index, step, waits-for indices)] of every transfer, in (step, list position) order: the order
    in which each rank expects its chunks and issues its sends. Waits list relays first, then `after`."""
    after = [[_resolve(s, ref) for ref in t.after] for t in s.transfers]
    edges = _waits_for(s, after)
    steps = _steps(s, edges, check=False)
    waits = [[j for j, why in e if why == "relay"] + [j for j, why in e if why == "after"] for e in edges]
    return sorted(((i, steps[i], waits[i]) for i in range(len(edges))), key=lambda x: (x[1], x[0]))


def _resolve(s: "Schedule", ref) -> int:
    if isinstance(ref, int):
        return ref
    return next(i for i, t in enumerate(s.transfers) if t.id == ref)


# --------------------------------------------------------------------------------------------------
# Named orders written out
# --------------------------------------------------------------------------------------------------
