"""The full (explicit) schedule form: loading, every rejection with its key, line and fix, the
launch-time checks, the lowering to per-rank plans, and the named orders written out (`expand`),
whose plans must equal the named orders' own."""
from __future__ import annotations

import itertools
import json
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import torch

from syncopy.cli import main
from syncopy.device import SIG_HEADER
from syncopy.errors import LaunchError, ScheduleError, ScheduleLocation
from syncopy.runtime.state.context import Context
from syncopy.runtime.state.plan import Node, all_gather
from syncopy.schedule import Schedule, from_dict, load_schedule, loads
from syncopy.schedule.expand import expand, to_yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "explicit_all_gather.yaml"

# A ring for 3 ranks, 2 chunks per rank cut 1:3, written out by hand (lines 9-20 are the transfers).
GOOD = textwrap.dedent(
    """\
    version: 1
    pattern: all_gather
    tensor: A
    units_per_rank: 4
    chunks: [[0, 1], [1, 4]]
    order: explicit
    world: 3
    transfers:
      - {id: a, chunk: [0, 0], from: 0, to: 1, step: 1}
      - {id: b, chunk: [0, 1], from: 0, to: 1, step: 1}
      - {chunk: [0, 0], from: 1, to: 2, step: 2}
      - {chunk: [0, 1], from: 1, to: 2, step: 2}
      - {chunk: [1, 0], from: 1, to: 2, step: 1}
      - {chunk: [1, 1], from: 1, to: 2, step: 1}
      - {chunk: [1, 0], from: 2, to: 0, step: 2}
      - {chunk: [1, 1], from: 2, to: 0, step: 2}
      - {chunk: [2, 0], from: 2, to: 0, step: 1}
      - {chunk: [2, 1], from: 2, to: 0, step: 1}
      - {chunk: [2, 0], from: 0, to: 1, step: 2}
      - {chunk: [2, 1], from: 0, to: 1, step: 2}
    """
)


def _error(text: str) -> ScheduleError:
    with pytest.raises(ScheduleError) as info:
        loads(text, file="s.yaml")
    return info.value


def _edit(*pairs: tuple[str, str]) -> str:
    text = GOOD
    for old, new in pairs:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


# --- loading -----------------------------------------------------------------------------------

def test_the_full_form_loads():
    s = loads(GOOD, file="s.yaml")
    assert (s.order, s.world, s.units_per_rank, s.chunks, s.chunks_per_rank) == ("explicit", 3, 4, [(0, 1), (1, 4)], 2)
    assert len(s.transfers) == 12
    t = s.transfers[0]
    assert (t.id, t.chunk, t.src, t.dst, t.step, t.after, t.mode, t.into, t.reduce, t.signal) == (
        "a", (0, 0), 0, 1, 1, (), "push", None, None, True)


def test_slices_give_the_chunk_count_and_transfers_give_the_order():
    s = loads(GOOD.replace("order: explicit\n", ""))
    assert s.order == "explicit" and s.chunks_per_rank == 2


def test_every_transfer_key_loads():
    s = loads(GOOD.replace("{chunk: [0, 0], from: 1, to: 2, step: 2}",
                           "{chunk: [0, 0], from: 1, to: 2, step: 2, after: [b, 1], mode: pull, into: [0, 0], signal: true}"))
    t = s.transfers[2]
    assert (t.after, t.mode, t.into, t.signal) == (("b", 1), "pull", (0, 0), True)


def test_the_example_in_examples_loads_and_roundtrips():
    s = load_schedule(EXAMPLE)
    assert (s.pattern, s.tensor, s.world, s.chunks, len(s.transfers)) == ("all_gather", "a", 3, [(2, 5), (0, 2)], 12)
    assert loads(to_yaml(s)) == s
    assert from_dict(json.loads(json.dumps(s.model_dump()))) == s  # JSON of the Python field names loads too


def test_reduce_and_all_to_all_plans_can_be_written_down():
    # Ring reduce-scatter, 2 ranks: each rank's partial of block b goes to rank b and is summed there.
    rs = loads(textwrap.dedent("""\
        pattern: reduce_scatter
        tensor: C
        world: 2
        transfers:
          - {chunk: [1, 0], from: 0, to: 1, reduce: sum}
          - {chunk: [0, 0], from: 1, to: 0, reduce: sum}
        """))
    assert [t.reduce for t in rs.transfers] == ["sum", "sum"]
    a2a = loads(textwrap.dedent("""\
        pattern: all_to_all
        tensor: X
        world: 2
        transfers:
          - {chunk: [1, 0], from: 0, to: 1, into: [0, 0]}
          - {chunk: [0, 0], from: 1, to: 0, into: [1, 0]}
        """))
    assert [t.into for t in a2a.transfers] == [(0, 0), (1, 0)]


# --- rejections: key path, line, what to change ------------------------------------------------

A_CYCLE = ("{id: a, chunk: [0, 0], from: 0, to: 1, step: 1}", "{id: a, chunk: [0, 0], from: 0, to: 1, step: 1, after: [6]}"), \
          ("{chunk: [1, 0], from: 1, to: 2, step: 1}", "{chunk: [1, 0], from: 1, to: 2, step: 1, after: [a]}")

ERRORS = [
    pytest.param(
        [("chunks: [[0, 1], [1, 4]]", "chunks: [[0, 2], [1, 4]]")], ("chunks[1]", 5),
        "slice [1, 4] overlaps chunks[0] [0, 2]; every unit must belong to exactly one chunk",
        id="slices-overlap"),
    pytest.param(
        [("chunks: [[0, 1], [1, 4]]", "chunks: [[2, 4], [0, 1]]")], ("chunks", 5),
        "units [1, 2) of each shard are in no chunk (a gap); extend a slice over them or add the slice [1, 2]",
        id="slices-gap"),
    pytest.param(
        [("chunks: [[0, 1], [1, 4]]", "chunks: [[0, 1], [1, 3]]")], ("chunks", 5),
        "units [3, 4) of each shard are in no chunk (a gap; units_per_rank is 4); extend a slice over them, add the slice [3, 4] "
        "or lower units_per_rank",
        id="slices-gap-at-the-end"),
    pytest.param(
        [("chunks: [[0, 1], [1, 4]]", "chunks: [[0, 1], [1, 5]]")], ("chunks[1]", 5),
        "slice [1, 5] ends past the 4 units of a shard (units_per_rank); end it at 4 or raise units_per_rank",
        id="slice-past-the-units"),
    pytest.param(
        [("chunks: [[0, 1], [1, 4]]", "chunks: [[0, 1], [4, 4]]")], ("chunks[1]", 5),
        "slice [4, 4] is empty or negative; a slice [lo, hi] takes units lo..hi-1 with 0 <= lo < hi",
        id="empty-slice"),
    pytest.param(
        [("chunks: [[0, 1], [1, 4]]", "chunks: [[0, 1], [1, 4, 5]]")], ("chunks[1]", 5),
        "[1, 4, 5] is not a pair; list each chunk's slice of a shard as [lo, hi] in units (units_per_rank)",
        id="slice-not-a-pair"),
    pytest.param(
        [("units_per_rank: 4\n", "")], ("chunks", 4),
        "explicit chunk slices need `units_per_rank: U` (each shard is cut into U equal units and a slice [lo, hi] takes "
        "units lo..hi-1); add it",
        id="slices-without-units"),
    pytest.param(
        [("units_per_rank: 4\n", "units_per_rank: 4\nchunks_per_rank: 3\n")], ("chunks_per_rank", 5),
        "chunks_per_rank is 3 but `chunks` lists 2 slices; drop chunks_per_rank or make it 2",
        id="chunk-count-contradicts-slices"),
    pytest.param(
        [("{chunk: [1, 1], from: 1, to: 2, step: 1}", "{chunk: [1, 1], from: 3, to: 2, step: 1}")], ("transfers[5].from", 14),
        "rank 3 is outside the world of 3 ranks (`world: 3`); use a rank in 0..2",
        id="rank-outside-the-world"),
    pytest.param(
        [("{chunk: [1, 1], from: 1, to: 2, step: 1}", "{chunk: [1, 1], from: 1, to: 1, step: 1}")], ("transfers[5].to", 14),
        "the transfer goes from rank 1 to itself; a transfer moves a chunk between two ranks",
        id="to-itself"),
    pytest.param(
        [("{chunk: [1, 1], from: 1, to: 2, step: 1}", "{chunk: [1, 2], from: 1, to: 2, step: 1}")], ("transfers[5].chunk", 14),
        "[1, 2] names chunk 2 but a shard has 2 chunks; use an index in 0..1",
        id="chunk-index-out-of-range"),
    pytest.param(
        [("{chunk: [1, 1], from: 1, to: 2, step: 1}", "{chunk: [1, 1], from: one, to: 2, step: 1}")], ("transfers[5].from", 14),
        "'one' has the wrong type; give the sending rank, an integer in 0..world-1",
        id="rank-not-a-number"),
    pytest.param(
        [("{chunk: [0, 0], from: 1, to: 2, step: 2}", "{chunk: [0, 0], from: 1, to: 2, stp: 2}")], ("transfers[2].stp", 11),
        "unknown key; the keys of a transfer are id, chunk, from, to, step, after, mode, into, reduce, signal",
        id="unknown-transfer-key"),
    pytest.param(
        [("{chunk: [0, 0], from: 1, to: 2, step: 2}", "{chunk: [0, 0], from: 1, step: 2}")], ("transfers[2].to", 11),
        "missing required key; give the receiving rank, an integer in 0..world-1",
        id="transfer-without-destination"),
    pytest.param(
        [("{chunk: [0, 0], from: 1, to: 2, step: 2}", "{chunk: [0, 0], from: 1, to: 2, step: 2, reduce: sum}")],
        ("transfers[2].reduce", 11),
        "an all_gather transfer copies; `reduce` is for reduce_scatter and all_reduce plans, drop it",
        id="reduce-in-an-all-gather"),
    pytest.param(
        [("id: b,", "id: a,")], ("transfers[1].id", 10),
        "id 'a' is already used by transfers[0]; give every transfer its own id",
        id="duplicate-id"),
    pytest.param(
        [("{chunk: [0, 0], from: 1, to: 2, step: 2}", "{chunk: [0, 0], from: 1, to: 2, step: 2, after: [zz]}")],
        ("transfers[2].after[0]", 11),
        "no transfer has id 'zz'; name a transfer by its id or its index in the list",
        id="after-names-nothing"),
    pytest.param(
        [("world: 3\n", "")], ("transfers", 7),
        "explicit transfers need `world: N`, the number of ranks they are written for; add it",
        id="transfers-without-world"),
    pytest.param(
        [("order: explicit", "order: ring")], ("order", 6),
        "order 'ring' contradicts the explicit `transfers:`; write `order: explicit` (or drop `order`)",
        id="named-order-with-transfers"),
    # -- order: every rank gets each chunk exactly once (the arrival order is a permutation) --
    pytest.param(
        [("{chunk: [2, 1], from: 0, to: 1, step: 2}", "{chunk: [2, 0], from: 0, to: 1, step: 3}")], ("transfers[11]", 20),
        "chunk (2, 0) reaches rank 1 twice (also transfers[10] (0->1 chunk (2, 0))), so its signal would be produced twice "
        "in one epoch; remove one of the two",
        id="signal-produced-twice"),
    pytest.param(
        [("{chunk: [2, 1], from: 0, to: 1, step: 2}\n", "{chunk: [2, 1], from: 0, to: 1, step: 2}\n  - {chunk: [0, 1], from: 1, to: 0}\n")],
        ("transfers[12]", 21),
        "chunk (0, 1) comes from rank 0, which holds it from the start, so its signal would be produced twice in one epoch; "
        "remove this transfer",
        id="chunk-sent-back-home"),
    pytest.param(
        [("  - {chunk: [2, 1], from: 0, to: 1, step: 2}\n", "")], ("transfers", 8),
        "rank 1 never receives chunk (2, 1), so its kernel would wait on a signal nobody produces; add a transfer of chunk "
        "[2, 1] to rank 1",
        id="gap-in-the-arrivals"),
    # -- waits on signals nobody produces, cycles, steps --
    pytest.param(
        [("  - {id: a, chunk: [0, 0], from: 0, to: 1, step: 1}\n", "")], ("transfers[1]", 10),
        "rank 1 forwards chunk (0, 0) but no transfer brings it to rank 1, so this send would wait on a signal nobody "
        "produces; add a transfer of chunk [0, 0] to rank 1, or send it from rank 0",
        id="relay-of-a-chunk-never-received"),
    pytest.param(
        [("{chunk: [0, 0], from: 1, to: 2, step: 2}", "{chunk: [0, 0], from: 1, to: 2, step: 2, after: [4]}")],
        ("transfers[2].after[0]", 11),
        "transfers[4] (1->2 chunk (1, 0)) lands on rank 2, but this transfer starts on rank 1, which never sees that signal "
        "(a wait on a signal nobody produces there); wait only for transfers that land on rank 1",
        id="after-a-landing-elsewhere"),
    pytest.param(
        [("{chunk: [0, 0], from: 1, to: 2, step: 2}", "{chunk: [0, 0], from: 1, to: 2, step: 2, signal: false}")],
        ("transfers[2].signal", 11),
        "the kernel on rank 2 reads chunk (0, 0), so its landing must raise the signal; drop `signal: false`",
        id="unsignalled-all-gather-delivery"),
    pytest.param(
        list(A_CYCLE), ("transfers[0]", 9),
        "transfers form a cycle, a deadlock: 'a' (0->1 chunk (0, 0)) -> transfers[6] (2->0 chunk (1, 0)) -> transfers[4] "
        "(1->2 chunk (1, 0)) -> 'a' (each waits for the next, by `after` or because it forwards what the next brings); "
        "remove an `after` entry or re-route a relay on this cycle",
        id="cycle"),
    pytest.param(
        [("{chunk: [0, 0], from: 1, to: 2, step: 2}", "{chunk: [0, 0], from: 1, to: 2, step: 1}")], ("transfers[2].step", 11),
        "step 1 is not after step 1 of 'a', which this transfer waits for (it forwards chunk (0, 0), which 'a' brings to "
        "rank 1); give it a step of at least 2",
        id="relay-before-its-chunk-lands"),
    pytest.param(
        [("{id: a, chunk: [0, 0], from: 0, to: 1, step: 1}", "{id: a, chunk: [0, 0], from: 0, to: 1, step: 1, after: [6]}")],
        ("transfers[0].step", 9),
        "step 1 is not after step 2 of transfers[6], which this transfer waits for (listed in `after`); give it a step of at least 3",
        id="step-before-an-after"),
]


@pytest.mark.parametrize(("edits", "where", "message"), ERRORS)
def test_full_form_error_names_key_line_and_fix(edits, where, message):
    err = _error(_edit(*edits))
    key, line = where
    assert err.message == message
    assert err.location == ScheduleLocation("s.yaml", key, line)
    assert str(err) == f"s.yaml:{line}: {key}: {message}"


def test_a_block_style_transfer_points_at_the_line_of_the_bad_key():
    text = _edit(("  - {id: a, chunk: [0, 0], from: 0, to: 1, step: 1}\n", "  - id: a\n    chunk: [0, 0]\n    from: 7\n    to: 1\n"))
    assert str(_error(text)) == "s.yaml:11: transfers[0].from: rank 7 is outside the world of 3 ranks (`world: 3`); use a rank in 0..2"


@pytest.mark.parametrize(("text", "expected"), [
    ("pattern: all_gather\ntensor: A\norder: explicit\n",
     "s.yaml:3: order: `order: explicit` needs a `transfers:` list; write the transfers or use a named order"),
    ("pattern: all_gather\ntensor: A\nunits_per_rank: 3\n",
     "s.yaml:3: units_per_rank: units_per_rank only applies to an explicit `chunks:` list of slices; add the slices or remove it"),
    ("pattern: all_gather\ntensor: A\nbinding: {rows: r, row: 1}\n",
     "s.yaml:3: binding.row: unknown key; the keys of binding are rows, before_line"),
], ids=["explicit-without-transfers", "units-without-slices", "unknown-binding-key"])
def test_misplaced_full_form_keys(text, expected):
    assert str(_error(text)) == expected


def test_python_schedules_are_validated_too_and_name_the_key():
    data = loads(GOOD).model_dump(by_alias=True)
    data["transfers"][5]["from"] = 3
    with pytest.raises(ScheduleError) as info:
        Schedule.model_validate(data)
    assert str(info.value) == "schedule: transfers[5].from: rank 3 is outside the world of 3 ranks (`world: 3`); use a rank in 0..2"


# --- launch-time checks ------------------------------------------------------------------------

def test_world_mismatch_is_a_launch_error():
    s = loads(GOOD)
    with pytest.raises(LaunchError) as info:
        all_gather(s, 0, 4, 8)
    assert str(info.value) == (
        "the schedule says `world: 3` (its transfers are written for 3 ranks) but the group has 4 ranks; launch on 3 ranks "
        "or write the schedule for 4 (`syncopy expand` writes a named order for any world)")


def test_a_chunk_without_rows_is_a_launch_error():
    s = loads(GOOD.replace("units_per_rank: 4", "units_per_rank: 8").replace("[[0, 1], [1, 4]]", "[[0, 1], [1, 8]]"))
    all_gather(s, 0, 3, 8)  # one row per unit
    with pytest.raises(LaunchError) as info:
        all_gather(s, 0, 3, 5)  # unit 0 = rows floor(0*5/8)..floor(1*5/8) = 0..0
    assert str(info.value) == (
        "chunks[0] (units [0, 1) of 8) holds no rows when a shard of 'A' has 5 rows along dim 0; use at most 5 "
        "units_per_rank or wider slices")


# --- lowering ----------------------------------------------------------------------------------

def _plans(s, world, rows=10):
    return [all_gather(s, r, world, rows) for r in range(world)]


def test_the_example_lowers_to_its_listed_arrival_order():
    plans = _plans(load_schedule(EXAMPLE), 3, rows=21)
    # chunk id = home * 2 + index; each rank expects chunks in (step, list position) order
    assert [p.arrival for p in plans] == [[5, 3, 2, 4], [1, 5, 4, 0], [3, 1, 0, 2]]
    assert plans[0].nodes == [
        Node("recv", 5, 2), Node("recv", 3, 2), Node("recv", 2, 1), Node("recv", 4, 1),
        Node("send", 1, 1), Node("send", 5, 1, (5,)),   # step 1: own top chunk; step 2: relay of (2, 1)
        Node("send", 0, 2, (5,)),                       # step 3: own bottom chunk, after r2 landed here
        Node("send", 2, 2, (2,)),                       # step 4: relay of (1, 0)
    ]
    # Slices: chunk 0 = units 2..4 = rows 8..20 of a 21-row shard, chunk 1 = units 0..1 = rows 0..7.
    assert [plans[0].bounds(g) for g in range(6)] == [(8, 21), (0, 8), (29, 42), (21, 29), (50, 63), (42, 50)]
    # The kernel waits per unit (5 per rank): each unit's position is its chunk's arrival position.
    assert plans[0].flags(4) == range(12, 15) and plans[0].chunk_of_flag(13) == 4
    assert plans[0].position() == {0: 0, 1: 0, 2: 0, 3: 0, 4: 0, 10: 1, 11: 1, 5: 2, 6: 2, 7: 3, 8: 3, 9: 3, 12: 4, 13: 4, 14: 4}


def test_steps_not_list_positions_order_the_arrivals():
    # GOOD lists rank 1's step-2 relays of (0, *) before its own step-1 chunks (1, *).
    assert [p.arrival for p in _plans(loads(GOOD), 3)] == [[4, 5, 2, 3], [0, 1, 4, 5], [2, 3, 0, 1]]
    assert [n.chunk for n in _plans(loads(GOOD), 3)[1].sends()] == [2, 3, 0, 1]


def test_explicit_plans_fit_together_and_run_to_completion():
    for s in (load_schedule(EXAMPLE), loads(GOOD)):
        plans = _plans(s, 3)
        c = s.chunks_per_rank
        sends = Counter((n.chunk, p.rank, n.peer) for p in plans for n in p.sends())
        recvs = Counter((n.chunk, n.peer, p.rank) for p in plans for n in p.recvs())
        assert sends == recvs
        have = [set(range(p.rank * c, (p.rank + 1) * c)) for p in plans]
        pending = [(p.rank, n) for p in plans for n in p.sends()]
        while pending:
            ready = [(r, n) for r, n in pending if all(g in have[r] for g in n.after)]
            assert ready, f"deadlock with {len(pending)} sends pending"
            for r, n in ready:
                have[n.peer].add(n.chunk)
                pending.remove((r, n))
        assert all(h == set(range(3 * c)) for h in have)


def test_landing_a_chunk_raises_the_flags_of_all_its_units():
    s = load_schedule(EXAMPLE)
    ctx = Context(all_gather(s, 0, 3, 21), (21, 4), torch.float32, torch.device("cpu"), 0)
    assert ctx.n_chunks == 6 and ctx.n_flags == 15 and int(ctx.ctx[3]) == 5  # the kernel counts units
    epoch = ctx.begin(100)
    ctx.land(4)  # chunk (2, 0) = units 2..4 of rank 2's shard
    flags = ctx.signals[SIG_HEADER:SIG_HEADER + 15].tolist()
    assert [f for f, v in enumerate(flags) if v == epoch] == [12, 13, 14]
    assert int(ctx.signals[SIG_HEADER + 15]) == 1  # one chunk arrived
    assert ctx.chunk_view(4).shape[0] == 13


# --- named orders written out ------------------------------------------------------------------

RING_W3 = textwrap.dedent(
    """\
    version: 1
    pattern: all_gather
    kernel: mm
    tensor: A
    dim: 0
    chunks_per_rank: 2
    order: explicit
    world: 3
    transfers:
      - {chunk: [0, 0], from: 0, to: 1, step: 1}
      - {chunk: [0, 1], from: 0, to: 1, step: 1}
      - {chunk: [1, 0], from: 1, to: 2, step: 1}
      - {chunk: [1, 1], from: 1, to: 2, step: 1}
      - {chunk: [2, 0], from: 2, to: 0, step: 1}
      - {chunk: [2, 1], from: 2, to: 0, step: 1}
      - {chunk: [2, 0], from: 0, to: 1, step: 2}
      - {chunk: [2, 1], from: 0, to: 1, step: 2}
      - {chunk: [0, 0], from: 1, to: 2, step: 2}
      - {chunk: [0, 1], from: 1, to: 2, step: 2}
      - {chunk: [1, 0], from: 2, to: 0, step: 2}
      - {chunk: [1, 1], from: 2, to: 0, step: 2}
    """
)


def _named(order, chunks=2):
    return Schedule(pattern="all_gather", kernel="mm", tensor="A", chunks_per_rank=chunks, order=order)


def test_golden_expansion_of_a_ring_of_three():
    assert to_yaml(expand(_named("ring"), 3)) == RING_W3
    assert loads(RING_W3) == expand(_named("ring"), 3)


def _expansion_cases():
    for world in range(1, 6):
        orders = ["ring", "local_first", "bidirectional_ring"] + [list(p) for p in itertools.permutations(range(1, world))][1:3]
        for order in orders:
            for chunks in (1, 3):
                yield pytest.param(order, world, chunks, id=f"W{world}-{order if isinstance(order, str) else 'x' + ''.join(map(str, order))}-C{chunks}")


@pytest.mark.parametrize(("order", "world", "chunks"), list(_expansion_cases()))
def test_an_expanded_order_lowers_to_the_named_orders_plan(order, world, chunks):
    named = _named(order, chunks)
    written = expand(named, world)
    assert loads(to_yaml(written)) == written
    for a, b in zip(_plans(named, world, rows=7), _plans(written, world, rows=7)):
        assert b.arrival == a.arrival, f"rank {a.rank}"
        if order in ("ring", "local_first") or isinstance(order, list):
            assert b.nodes == a.nodes, f"rank {a.rank}"  # node for node
        else:
            # The bidirectional ring lists its two directions one after the other; what the backend
            # sees is the same: the receives, and the sends to each peer in order.
            assert sorted(map(repr, b.recvs())) == sorted(map(repr, a.recvs())), f"rank {a.rank}"
            for peer in range(world):
                assert [n for n in b.sends() if n.peer == peer] == [n for n in a.sends() if n.peer == peer], f"rank {a.rank}"


def test_expand_keeps_explicit_slices_and_refuses_another_world():
    s = Schedule(pattern="all_gather", tensor="A", order="local_first", units_per_rank=3, chunks=[[1, 3], [0, 1]])
    e = expand(s, 2)
    assert (e.chunks, e.units_per_rank, e.transfers[0].chunk) == ([(1, 3), (0, 1)], 3, (0, 0))
    assert expand(e, 2) is e
    with pytest.raises(ScheduleError, match="the transfers are written for 2 ranks, not 3; expand a named order instead"):
        expand(e, 3)


# --- CLI ---------------------------------------------------------------------------------------

def test_cli_expand_prints_the_full_form(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("pattern: all_gather\nkernel: mm\ntensor: A\nchunks_per_rank: 2\norder: ring\n")
    assert main(["expand", str(path), "--world", "3"]) == 0
    assert capsys.readouterr().out == RING_W3


def test_cli_check_reports_the_explicit_plan_and_rejects_with_file_and_line(tmp_path, capsys):
    assert main(["check", str(EXAMPLE)]) == 0
    assert capsys.readouterr().out == (
        f"{EXAMPLE}: ok (all_gather of a along dim 0, 2 chunks per rank, order explicit: 12 transfers for 3 ranks)\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(_edit(*A_CYCLE))
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{bad}:9: transfers[0]: transfers form a cycle, a deadlock: 'a' (0->1 chunk (0, 0)) -> ")
    assert err.count("\n") == 1


def test_cli_expand_of_an_explicit_plan_for_another_world_names_the_file(capsys):
    assert main(["expand", str(EXAMPLE), "--world", "4"]) == 2
    assert capsys.readouterr().err == (
        f"{EXAMPLE}: world: the transfers are written for 3 ranks, not 4; expand a named order instead\n")
