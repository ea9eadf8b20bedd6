"""The full form beyond all_gather: all_to_all, reduce_scatter and all_reduce plans are either
lowered faithfully or refused by validation (hence by `syncopy check` and the decorator) with one
line naming the key, the line and the fix; `expand` writes each pattern's own algorithm, which
lowers to the named order's per-rank plan."""
from __future__ import annotations

import itertools
import textwrap

import pytest

from syncopy.cli import main
from syncopy.errors import ScheduleError, ScheduleLocation
from syncopy.runtime.state.plan import Node, all_to_all, reduce
from syncopy.schedule import Schedule, loads, to_yaml
from syncopy.schedule.expand import expand

# Direct all_to_all of 3 ranks, one chunk per rank: rank r's block for d lands in d's block r.
A2A = textwrap.dedent(
    """\
    pattern: all_to_all
    tensor: X
    world: 3
    transfers:
      - {chunk: [0, 0], from: 0, to: 1}
      - {chunk: [0, 0], from: 0, to: 2}
      - {chunk: [1, 0], from: 1, to: 0}
      - {chunk: [1, 0], from: 1, to: 2}
      - {chunk: [2, 0], from: 2, to: 0}
      - {chunk: [2, 0], from: 2, to: 1}
    """
)
# The natural direct reduce-scatter of 3 ranks: every partial straight to its owner, no steps.
RS = textwrap.dedent(
    """\
    pattern: reduce_scatter
    tensor: C
    world: 3
    transfers:
      - {chunk: [1, 0], from: 0, to: 1, reduce: sum}
      - {chunk: [2, 0], from: 0, to: 2, reduce: sum}
      - {chunk: [0, 0], from: 1, to: 0, reduce: sum}
      - {chunk: [2, 0], from: 1, to: 2, reduce: sum}
      - {chunk: [0, 0], from: 2, to: 0, reduce: sum}
      - {chunk: [1, 0], from: 2, to: 1, reduce: sum}
    """
)
# That reduce-scatter, then every owner copies its sum to the other two (lines 11-16).
AR = RS.replace("reduce_scatter", "all_reduce") + (
    "  - {chunk: [0, 0], from: 0, to: 1}\n"
    "  - {chunk: [0, 0], from: 0, to: 2}\n"
    "  - {chunk: [1, 0], from: 1, to: 0}\n"
    "  - {chunk: [1, 0], from: 1, to: 2}\n"
    "  - {chunk: [2, 0], from: 2, to: 0}\n"
    "  - {chunk: [2, 0], from: 2, to: 1}\n"
)


def _error(text: str) -> ScheduleError:
    with pytest.raises(ScheduleError) as info:
        loads(text, file="s.yaml")
    return info.value


def _edit(text: str, *pairs: tuple[str, str]) -> str:
    for old, new in pairs:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


ERRORS = [
    # -- all_to_all --
    pytest.param(
        A2A, [("{chunk: [0, 0], from: 0, to: 2}", "{chunk: [0, 0], from: 1, to: 2, after: [0]}")], ("transfers[1].from", 6),
        "chunk (0, 0) is rank 0's block, but this transfer sends it from rank 1; all_to_all blocks go straight from their owner "
        "(relays are not lowered for all_to_all): send it from rank 0",
        id="a2a-relay"),
    pytest.param(
        A2A, [("{chunk: [2, 0], from: 2, to: 1}", "{chunk: [2, 0], from: 0, to: 1}")], ("transfers[5].from", 10),
        "chunk (2, 0) is rank 2's block, but this transfer sends it from rank 0; all_to_all blocks go straight from their owner "
        "(relays are not lowered for all_to_all): send it from rank 2",
        id="a2a-block-from-a-non-owner"),
    pytest.param(
        A2A, [("  - {chunk: [0, 0], from: 0, to: 2}\n", "")], ("transfers", 4),
        "rank 2 never receives chunk (0, 0), so its kernel would wait on a signal nobody produces; add a transfer of chunk "
        "[0, 0] to rank 2",
        id="a2a-missing-delivery"),
    pytest.param(
        A2A, [("{chunk: [0, 0], from: 0, to: 2}", "{chunk: [0, 0], from: 0, to: 1}")], ("transfers[1]", 6),
        "chunk (0, 0) reaches rank 1 twice (also transfers[0] (0->1 chunk (0, 0))), so its signal would be produced twice "
        "in one epoch; remove one of the two",
        id="a2a-duplicate-delivery"),
    pytest.param(
        A2A, [("{chunk: [0, 0], from: 0, to: 2}", "{chunk: [1, 0], from: 0, to: 2, into: [0, 0]}")], ("transfers[1].chunk", 6),
        "with `into`, `chunk` names the block of rank 0's input that goes to rank 2, [2, 0], not [1, 0]; write chunk: [2, 0]",
        id="a2a-into-with-the-wrong-source-block"),
    pytest.param(
        A2A, [("{chunk: [0, 0], from: 0, to: 2}", "{chunk: [2, 0], from: 0, to: 2, into: [1, 0]}")], ("transfers[1].into", 6),
        "rank 2 keeps what rank 0 sends in its block 0, so chunk 0 lands at [0, 0], not [1, 0]; write into: [0, 0]",
        id="a2a-into-elsewhere"),
    pytest.param(
        A2A, [("{chunk: [0, 0], from: 0, to: 2}", "{chunk: [0, 0], from: 0, to: 2, signal: false}")], ("transfers[1].signal", 6),
        "the kernel on rank 2 reads chunk (0, 0), so its landing must raise the signal; drop `signal: false`",
        id="a2a-unsignalled"),
    pytest.param(
        A2A, [("{chunk: [0, 0], from: 0, to: 2}", "{chunk: [0, 0], from: 0, to: 2, reduce: sum}")], ("transfers[1].reduce", 6),
        "an all_to_all transfer copies; `reduce` is for reduce_scatter and all_reduce plans, drop it",
        id="a2a-reduce"),
    # -- reduce_scatter --
    pytest.param(
        RS, [("{chunk: [1, 0], from: 0, to: 1, reduce: sum}", "{chunk: [1, 0], from: 0, to: 1}")], ("transfers[0]", 5),
        "a reduce_scatter transfer adds the sender's partial (or partial sum) into the receiver's; add `reduce: sum`",
        id="rs-copy"),
    pytest.param(
        RS, [("{chunk: [1, 0], from: 0, to: 1, reduce: sum}", "{chunk: [1, 0], from: 0, to: 1, reduce: max}")],
        ("transfers[0].reduce", 5),
        "reduce 'max' is not lowered: the kernel's partials are added; write reduce: sum",
        id="rs-max"),
    pytest.param(
        RS, [("{chunk: [1, 0], from: 0, to: 1, reduce: sum}", "{chunk: [1, 0], from: 0, to: 1, reduce: sum, into: [2, 0]}")],
        ("transfers[0].into", 5),
        "a reduce_scatter transfer adds into the same chunk of the receiver's partial; drop `into`",
        id="rs-into"),
    pytest.param(
        RS, [("{chunk: [1, 0], from: 0, to: 1, reduce: sum}", "{chunk: [1, 0], from: 0, to: 1, reduce: sum, after: [2]}")],
        ("transfers[0].after", 5),
        "`after` is not lowered for reduce_scatter plans: a partial sum leaves once every partial of its chunk has reached its "
        "rank, and the sum once it is complete; drop `after`",
        id="rs-after"),
    pytest.param(
        RS, [("{chunk: [1, 0], from: 0, to: 1, reduce: sum}", "{chunk: [1, 0], from: 0, to: 1, reduce: sum, signal: false}")],
        ("transfers[0].signal", 5),
        "the reduce_scatter kernel waits on no landing (it writes the chunks the runtime sends), so `signal` says nothing here; "
        "drop `signal: false`",
        id="rs-signal"),
    pytest.param(
        RS, [("world: 3\n", "world: 3\nunits_per_rank: 2\nchunks: [[0, 2]]\n")], ("chunks", 5),
        "explicit slices are lowered for all_gather and all_to_all only: a reduce_scatter kernel announces chunks_per_rank "
        "equal chunks; drop `units_per_rank` and `chunks` and give chunks_per_rank",
        id="rs-slices"),
    pytest.param(
        RS, [("  - {chunk: [1, 0], from: 2, to: 1, reduce: sum}\n", "")], ("transfers", 4),
        "rank 1 sums chunk (1, 0) of its part without the partials of rank 2, so its result would be wrong; add transfers of "
        "chunk [1, 0] with reduce: sum that bring them to rank 1",
        id="rs-missing-partial"),
    pytest.param(
        RS, [("{chunk: [2, 0], from: 0, to: 2, reduce: sum}", "{chunk: [2, 0], from: 0, to: 1, reduce: sum}"),
             ("{chunk: [1, 0], from: 2, to: 1, reduce: sum}", "{chunk: [2, 0], from: 1, to: 2, reduce: sum}\n"
                                                             "  - {chunk: [1, 0], from: 2, to: 1, reduce: sum}")],
        ("transfers[5]", 10),
        "transfers[5] (1->2 chunk (2, 0)) brings rank 0's partial of chunk (2, 0) to rank 2, which already adds it (brought by "
        "transfers[3]), so it would be added twice; send each rank's partial to a chunk's sum once",
        id="rs-duplicate-partial"),
    pytest.param(
        RS, [("{chunk: [2, 0], from: 1, to: 2, reduce: sum}", "{chunk: [2, 0], from: 1, to: 2, reduce: sum}\n"
                                                             "  - {chunk: [2, 0], from: 2, to: 1, reduce: sum}")],
        ("transfers[3]", 8),
        "transfers form a cycle, a deadlock: transfers[3] (1->2 chunk (2, 0)) -> transfers[4] (2->1 chunk (2, 0)) -> "
        "transfers[3] (each passes on a partial sum that includes what the next brings); to send a rank's own partial alone, "
        "give that transfer a step no later than the steps of every transfer adding its chunk on its rank",
        id="rs-partial-sums-in-a-cycle"),
    # -- all_reduce --
    pytest.param(
        AR, [("  - {chunk: [2, 0], from: 2, to: 1}\n", "")], ("transfers", 4),
        "rank 1 never gets the sum of chunk (2, 0): it adds no partials of ranks 0, 2 and no transfer copies the sum to it; "
        "add a transfer of chunk [2, 0] to rank 1 (reduce: sum for the missing partials, or a copy of the sum)",
        id="ar-missing-sum"),
    pytest.param(
        AR, [("{chunk: [2, 0], from: 2, to: 1}", "{chunk: [2, 0], from: 2, to: 1}\n  - {chunk: [2, 0], from: 0, to: 1}")],
        ("transfers[12]", 17),
        "the sum of chunk (2, 0) reaches rank 1 twice (also transfers[11] (2->1 chunk (2, 0))); remove one of the two",
        id="ar-duplicate-sum"),
    pytest.param(
        AR, [("{chunk: [2, 0], from: 2, to: 1}", "{chunk: [2, 0], from: 2, to: 1}\n  - {chunk: [1, 0], from: 0, to: 1}")],
        ("transfers[12]", 17),
        "rank 1 adds every partial of chunk (1, 0) itself, so this copy would land its sum there a second time; remove this transfer",
        id="ar-copy-to-the-rank-that-sums"),
    pytest.param(
        AR, [("{chunk: [2, 0], from: 2, to: 0}", "{chunk: [2, 0], from: 0, to: 1}")], ("transfers[10]", 15),
        "rank 0 copies on the sum of chunk (2, 0), but it never has it (it adds no partials of ranks 1, 2 and no transfer "
        "copies the sum to it), so this send would wait on a signal nobody produces; add `reduce: sum` to pass on a partial "
        "sum, or send the sum from a rank that has it",
        id="ar-copy-from-a-rank-without-the-sum"),
    pytest.param(
        AR, [("{chunk: [2, 0], from: 2, to: 0}", "{chunk: [2, 0], from: 2, to: 0, step: 9}"),
             ("{chunk: [2, 0], from: 2, to: 1}", "{chunk: [2, 0], from: 0, to: 1, step: 9}")], ("transfers[11].step", 16),
        "step 9 is not after step 9 of transfers[10], which this transfer waits for (it copies on the sum of chunk (2, 0), "
        "which needs what transfers[10] brings to rank 0); give it a step of at least 10",
        id="ar-relayed-sum-stepped-too-early"),
    pytest.param(
        AR, [("{chunk: [1, 0], from: 1, to: 0}", "{chunk: [1, 0], from: 1, to: 0, step: 1}")], ("transfers[8].step", 13),
        "step 1 is not after step 1 of transfers[0], which this transfer waits for (it copies on the sum of chunk (1, 0), "
        "which needs what transfers[0] brings to rank 1); give it a step of at least 2",
        id="ar-sum-copied-before-it-is-complete"),
]


@pytest.mark.parametrize(("text", "edits", "where", "message"), ERRORS)
def test_plan_error_names_key_line_and_fix(text, edits, where, message):
    err = _error(_edit(text, *edits))
    key, line = where
    assert (err.message, err.location) == (message, ScheduleLocation("s.yaml", key, line))
    assert str(err) == f"s.yaml:{line}: {key}: {message}"


# --- all_to_all: what lands where --------------------------------------------------------------

def _a2a_plans(s, world=3, rows=4):
    return [all_to_all(s, r, world, rows) for r in range(world)]


def test_a_direct_all_to_all_plan_lowers_to_the_named_direct_order():
    named = Schedule(pattern="all_to_all", tensor="X", chunks_per_rank=1, order="local_first")
    for a, b in zip(_a2a_plans(named), _a2a_plans(loads(A2A))):
        assert sorted(map(repr, a.nodes)) == sorted(map(repr, b.nodes))


def test_into_names_where_the_senders_block_lands():
    # Written as a plan descriptor would: rank 0 sends its block for rank 2 (chunk [2, 0]), which
    # rank 2 keeps in its block 0: the kernel's chunk (0, 0) on rank 2.
    text = _edit(A2A, ("{chunk: [0, 0], from: 0, to: 2}", "{chunk: [2, 0], from: 0, to: 2, into: [0, 0]}"))
    plans = _a2a_plans(loads(text))
    assert Node("send", 0, 2) in plans[0].sends() and Node("recv", 0, 0) in plans[2].recvs()
    assert plans[2].arrival == [0, 1]


def test_steps_order_all_to_all_arrivals():
    text = _edit(A2A, ("{chunk: [0, 0], from: 0, to: 2}", "{chunk: [0, 0], from: 0, to: 2, step: 2}"))
    assert _a2a_plans(loads(text))[2].arrival == [1, 0]


# --- reduce patterns: lowering ----------------------------------------------------------------

def _sends(plan):
    return {peer: [(s.chunk, s.value) for s in plan.steps if s.kind == "send" and s.peer == peer] for peer in range(plan.world)}


def _receipts(plan):
    return [(s.kind, s.chunk, s.peer, s.value) for s in plan.steps if s.kind != "send"]


def test_the_natural_direct_reduce_scatter_runs_as_the_named_direct_order():
    named = Schedule(pattern="reduce_scatter", tensor="C", chunks_per_rank=1, order="local_first")
    for r in range(3):
        a, b = reduce(named, r, 3, 4), reduce(loads(RS), r, 3, 4)
        assert b.algorithm == "explicit"
        assert (_sends(b), sorted(_receipts(b)), b.reduced_here) == (_sends(a), sorted(_receipts(a)), a.reduced_here)
        assert b.finish == [t.chunk[0] for t in loads(RS).transfers if t.src == r] + [r]  # as the plan sends them


def test_a_one_shot_all_reduce_sends_own_partials_when_stepped_with_the_partials_it_receives():
    transfers = [{"chunk": [b, 0], "from": r, "to": d, "reduce": "sum", "step": 1}
                 for b in range(3) for r in range(3) for d in range(3) if r != d]
    s = Schedule(pattern="all_reduce", tensor="C", world=3, transfers=transfers)
    for r in range(3):
        p = reduce(s, r, 3, 4)
        assert {v for sends in _sends(p).values() for _, v in sends} == {"partial"}
        assert p.reduced_here == [0, 1, 2] and len(_receipts(p)) == 6
    # Without the steps each transfer would pass on its rank's whole sum, which waits for the others'.
    unstepped = [{k: v for k, v in t.items() if k != "step"} for t in transfers]
    with pytest.raises(ScheduleError, match=r"^schedule: transfers\[0\]: transfers form a cycle, a deadlock: .* \(each passes on a partial sum"):
        Schedule(pattern="all_reduce", tensor="C", world=3, transfers=unstepped)


def test_a_ring_all_reduce_passes_partial_sums_then_copies_sums():
    p = reduce(expand(Schedule(pattern="all_reduce", tensor="C", order="ring"), 3), 0, 3, 4)
    assert _sends(p)[1] == [(2, "partial"), (1, "sum"), (0, "final"), (2, "final")]
    assert _receipts(p) == [("reduce", 1, 2, "partial"), ("reduce", 0, 2, "partial"), ("recv", 2, 2, "final"), ("recv", 1, 2, "final")]
    assert p.reduced_here == [0]


# --- expand: every pattern's own algorithm, lowered like the named order ----------------------

RS_RING_W3 = textwrap.dedent(
    """\
    version: 1
    pattern: reduce_scatter
    kernel: mm
    tensor: C
    dim: 0
    chunks_per_rank: 1
    order: explicit
    world: 3
    transfers:
      - {chunk: [2, 0], from: 0, to: 1, step: 1, reduce: sum}
      - {chunk: [0, 0], from: 1, to: 2, step: 1, reduce: sum}
      - {chunk: [1, 0], from: 2, to: 0, step: 1, reduce: sum}
      - {chunk: [1, 0], from: 0, to: 1, step: 2, reduce: sum}
      - {chunk: [2, 0], from: 1, to: 2, step: 2, reduce: sum}
      - {chunk: [0, 0], from: 2, to: 0, step: 2, reduce: sum}
    """
)


def _named(pattern, order, chunks=1):
    return Schedule(pattern=pattern, kernel="mm", tensor="C" if pattern != "all_to_all" else "X", chunks_per_rank=chunks, order=order)


def test_golden_expansion_of_a_reduce_scatter_ring_of_three():
    assert to_yaml(expand(_named("reduce_scatter", "ring"), 3)) == RS_RING_W3


def test_an_all_to_all_ring_expands_to_direct_sends():
    e = expand(_named("all_to_all", "ring"), 3)
    assert all(t.src == t.chunk[0] for t in e.transfers)  # nothing relayed: each block from its owner
    assert e == expand(_named("all_to_all", "local_first"), 3)


def _cases():
    for pattern in ("all_to_all", "reduce_scatter", "all_reduce"):
        for world in range(1, 6):
            orders = ["ring", "local_first", "bidirectional_ring"] + [list(p) for p in itertools.permutations(range(1, world))][1:3]
            for order, chunks in itertools.product(orders, (1, 3)):
                label = order if isinstance(order, str) else "x" + "".join(map(str, order))
                yield pytest.param(pattern, order, world, chunks, id=f"{pattern}-W{world}-{label}-C{chunks}")


@pytest.mark.parametrize(("pattern", "order", "world", "chunks"), list(_cases()))
def test_an_expanded_order_lowers_to_the_named_orders_plan(pattern, order, world, chunks):
    named = _named(pattern, order, chunks)
    written = expand(named, world)
    assert loads(to_yaml(written)) == written
    for r in range(world):
        if pattern == "all_to_all":
            a, b = all_to_all(named, r, world, 5), all_to_all(written, r, world, 5)
            assert (b.nodes, b.arrival) == (a.nodes, a.arrival), f"rank {r}"
            continue
        # rows 5 and a short all_reduce output (size 5W-2): the last part's empty chunks drop out alike
        size = 5 * world - 2 if pattern == "all_reduce" else 0
        a, b = (reduce(s, r, world, 5, nbytes=1 << 40, size=size) for s in (named, written))
        assert _sends(b) == _sends(a) and sorted(b.reduced_here) == sorted(a.reduced_here), f"rank {r}"
        if order == "bidirectional_ring":  # the two directions interleave by step instead of one after the other
            assert sorted(_receipts(b)) == sorted(_receipts(a)), f"rank {r}"
        else:
            assert (_receipts(b), b.finish) == (_receipts(a), a.finish), f"rank {r}"


# --- CLI: check and expand ---------------------------------------------------------------------

@pytest.mark.parametrize("text", [A2A, RS, AR], ids=["all_to_all", "reduce_scatter", "all_reduce"])
def test_cli_check_accepts_a_plan_of_every_pattern(tmp_path, capsys, text):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert main(["check", str(path)]) == 0
    pattern = text.split("\n")[0].split(": ")[1]
    assert capsys.readouterr().out == (
        f"{path}: ok ({pattern} of {'X' if pattern == 'all_to_all' else 'C'} along dim 0, 1 chunks per rank, "
        f"order explicit: {text.count('from:')} transfers for 3 ranks)\n")


def test_cli_check_refuses_an_all_to_all_relay_in_one_line(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(A2A + "  - {chunk: [0, 0], from: 1, to: 2}\n")
    assert main(["check", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"{path}:11: transfers[6].from: chunk (0, 0) is rank 0's block, but this transfer sends it from rank 1; all_to_all "
        "blocks go straight from their owner (relays are not lowered for all_to_all): send it from rank 0\n")


@pytest.mark.parametrize("pattern", ["all_to_all", "reduce_scatter", "all_reduce"])
def test_cli_expand_writes_what_check_accepts(tmp_path, capsys, pattern):
    path = tmp_path / "s.yaml"
    path.write_text(f"pattern: {pattern}\nkernel: mm\ntensor: T\nchunks_per_rank: 2\norder: bidirectional_ring\n")
    assert main(["expand", str(path), "--world", "3"]) == 0
    written = tmp_path / "full.yaml"
    written.write_text(capsys.readouterr().out)
    assert main(["check", str(written)]) == 0
    assert loads(written.read_text()) == expand(loads(path.read_text()), 3)


def test_the_decorator_refuses_what_check_refuses():
    import syncopy

    relay = loads(A2A).model_dump(by_alias=True, exclude_none=True)
    relay["transfers"].append({"chunk": [0, 0], "from": 1, "to": 2})
    with pytest.raises(ScheduleError) as info:
        syncopy.overlap(relay)
    assert str(info.value) == (
        "schedule: transfers[6].from: chunk (0, 0) is rank 0's block, but this transfer sends it from rank 1; all_to_all "
        "blocks go straight from their owner (relays are not lowered for all_to_all): send it from rank 0")


def test_a_reduce_scatter_rank_keeps_only_its_own_sums():
    # Rank 2 also gathers every partial of rank 1's chunk (own partials, stepped with what comes in):
    # its sum is rank 1's to keep, so rank 2 must not write it into its own part.
    text = RS + ("  - {chunk: [1, 0], from: 0, to: 2, reduce: sum, step: 1}\n"
                 "  - {chunk: [1, 0], from: 1, to: 2, reduce: sum, step: 1}\n")
    text = _edit(text, ("{chunk: [1, 0], from: 2, to: 1, reduce: sum}", "{chunk: [1, 0], from: 2, to: 1, reduce: sum, step: 1}"),
                 ("{chunk: [1, 0], from: 0, to: 1, reduce: sum}", "{chunk: [1, 0], from: 0, to: 1, reduce: sum, step: 1}"))
    assert [reduce(loads(text), r, 3, 4).reduced_here for r in range(3)] == [[0], [1], [2]]
