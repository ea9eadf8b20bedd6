"""Issue 10, part A: consumer waits that missed rows, on CPU worlds with a holding link (each remote
chunk lands only once a program of the kernel was seen waiting for it: runtime/transport/link.py,
Hold) and NaN-poisoned receive buffers, two launches each with new data and new index tensors. Each
kernel of tests/kernels/waits.py returned wrong numbers silently before (the case numbers are the
issue's); every launch must now equal torch on the gathered tensor. The premise, that every remote
chunk a kernel reads arrived while a tile waited for it, is asserted from the link's records
(issue 26), not assumed from a link's latency.
"""
from __future__ import annotations

import pytest

from tests.world import shared
from tests.world import wait_workers as ww

TOL = 1e-4


def _case(kernel, chunks, rows, order="ring"):
    return dict(id=f"{kernel}-c{chunks}-r{rows}", kernel=kernel, chunks=chunks, rows=rows, order=order)


# Kernels whose tiles read chunks in an order drawn from each rank's own data (indices, a permutation)
# take direct sends beyond 2 ranks: the holding link lands a relayed chunk only once the relaying rank's
# tiles waited for it, so rank A waiting for a chunk B relays while B waits for one A relays would hold
# both to the link's bound (and report them unwaited). Two ranks have nothing to relay.
DIRECT = "local_first"


CASES = {
    2: [
        _case("masked_quad", 2, 7),         # 1: the last program's last row block is masked off
        _case("reverse_scan", 2, 6),        # 2: for r in range(M - 1, -1, -1)
        _case("nested_steps", 3, 12),       # 3: p += NC inside an inner loop (6 rows a program, 4-row chunks)
        _case("ring_rows", 2, 8),           # 4: r = (pid + i) % NB
        _case("helper_block", 2, 8),        # 5: a helper does the row arithmetic
        _case("helper_wrapped", 2, 8),      # 5: a helper no bound covers: every chunk
        _case("helper_pid", 2, 8),          # 6: tl.program_id inside a helper
        _case("gather_rows", 2, 6),         # 7: row = tl.load(idx + pid), new indices every launch
        _case("persistent_blocks", 2, 8),   # 7: a persistent loop over blocks taken from a tensor
        _case("while_own_end", 2, 8),       # 8: while tile < end, end per program
        _case("swizzled_tiles", 2, 12),     # 8: for i in range(my_tiles), inline swizzle
        _case("prefetch_next", 2, 8),       # 8: the next tile's block loaded ahead
        _case("stream_k", 2, 6),            # 8: stream-K steps, the accumulator carried across steps
        _case("persistent_wrapped", 2, 8),  # 4 inside 8: wrapped reads in a persistent loop's inner loop
    ],
    3: [
        _case("masked_quad", 1, 6),
        _case("reverse_scan", 1, 4),
        _case("nested_steps", 3, 6),
        _case("ring_rows", 2, 5),
        _case("helper_block", 1, 5),
        _case("helper_pid", 2, 4),
        _case("gather_rows", 2, 4, DIRECT),
        _case("persistent_blocks", 1, 6, DIRECT),
        _case("prefetch_next", 2, 4),
        _case("swizzled_tiles", 1, 8),
        _case("stream_k", 1, 4),
    ],
    4: [
        _case("gather_rows", 1, 3, DIRECT),
    ],
}


for _size in CASES:  # jobs of the shared worlds (tests/world/shared.py: checked mode; the cases bring their holding link)
    shared.register(__name__, _size, {"cases": (f"{ww.__name__}:run_cases", (CASES[_size],))})


def _world(world: int) -> list[dict]:
    return shared.results(__name__, world, "cases")


@pytest.mark.world
@pytest.mark.parametrize("world", [2, 3, 4], ids=["world2", "world3", "world4"])
def test_every_read_is_waited_for_on_every_launch(world):
    results = _world(world)
    problems = [p for r in results for p in r["problems"]]
    assert not problems, "\n".join(problems)
    bad = [f"rank {rank}: {label}: {err:.3g}" for rank, r in enumerate(results) for label, err in r["errors"] if not err <= TOL]
    assert not bad, "\n".join(bad)
    assert len(results[0]["errors"]) == ww.LAUNCHES * len(CASES[world])
    assert all(all(r["checked"]) and r["checked"] for r in results)  # the read checker was on: an unwaited read raises


@pytest.mark.world
@pytest.mark.parametrize("world", [2, 3, 4], ids=["world2", "world3", "world4"])
def test_every_remote_chunk_a_kernel_reads_lands_while_a_tile_waits_for_it(world):
    """The premise of the test above (issue 26): the numbers test the waits only if the rows arrived
    after the tiles that read them started. The holding link releases a chunk once a program of the
    kernel was seen polling its flag (down), or at its bound (3 s) with none polling: on every
    launch of every kernel, each remote chunk the kernel reads was waited for, none was released
    unpolled, so every read of a peer's rows met a flag that was down and a buffer that was poison."""
    for rank, r in enumerate(_world(world)):
        assert [h["label"] for h in r["held"]] == [label for label, _ in r["errors"]], (rank, r["problems"])
        for h in r["held"]:
            where = f"rank {rank} {h['label']}"
            assert h["read"], f"{where}: the kernel reads no remote chunk, nothing to wait for"
            assert h["waited"], f"{where}: no chunk was waited for: {h}"
            assert set(h["read"]) <= set(h["waited"]), f"{where}: chunks read but never waited for: {h}"
            assert not set(h["read"]) & set(h["unwaited"]), f"{where}: no program polled chunks it reads before the bound: {h}"


@pytest.mark.world
def test_the_binding_says_where_a_bound_was_not_possible():
    binding = _world(2)[0]["binding"]
    assert "inside its loop: p changes inside the loop" in binding["nested_steps-c3-r12"]
    assert "not affine in the loop counter" in binding["ring_rows-c2-r8"]
    assert "every chunk" in binding["helper_wrapped-c2-r8"]
    assert "tiles not remapped (the helper _my_rows calls tl.program_id itself)" in binding["helper_pid-c2-r8"]
    assert "depend on loaded data" in binding["gather_rows-c2-r6"]
    assert "tiles not remapped" in binding["persistent_blocks-c2-r8"]
    assert "compares the tile id with a bound of this program's own" in binding["while_own_end-c2-r8"]
    assert "not affine in the loop counter" in binding["swizzled_tiles-c2-r12"]
    assert "tiles not remapped (nxt carried from tile to tile)" in binding["prefetch_next-c2-r8"]
    assert "tiles not remapped (acc carried from tile to tile)" in binding["stream_k-c2-r6"]
