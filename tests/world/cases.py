"""The correctness matrix of the CPU-world tests: which (kernel, chunks_per_rank, order, rows, dtype)
combinations run in which world.

A full product (3 kernels x 4 chunk counts x 4 orders x 2 row counts x 2 dtypes x 4 worlds) is far
too slow under the Triton interpreter, so each world runs a covering design instead:

* every (order, chunks_per_rank) pair runs once in world 2 (16 cases), on kernel (order + chunks) % 3,
  which gives every kernel every order and every chunk count; worlds 3 and 4 (more ranks than CI's
  two cores: their launches cost 1.5 and 2 times those of world 2) run half the pairs each, every
  order with two chunk counts and every chunk count with two orders, every kernel on ragged and
  aligned rows, and the two halves are complementary: together they run every pair on more than
  two ranks;
* every case runs two shard shapes on the same operator (one ragged, one aligned; one fp32, one
  fp16), their epochs interleaved (A1 B1 A2 B2) so that two contexts of one operator coexist; each
  kernel's cases cycle through the pairings {ragged fp32, aligned fp16} and {ragged fp16, aligned
  fp32}, so every kernel meets all four (rows, dtype) combinations.

`test_all_gather.py::test_matrix_covers_the_space` checks these claims.
"""
from __future__ import annotations

from tests.world.workers import explicit_order

WORLDS = (1, 2, 3, 4)
KERNELS = ("grouped", "gemm2d", "rms")
CHUNKS = (1, 2, 3, 4)
DTYPES = ("float32", "float16")
# Rows per rank: ragged (no tile size divides it, chunks are uneven) and aligned to the 16-row tile.
# The GEMMs' 23 rows (one tile and 7 rows: every chunk count 2 to 4 splits them unevenly, tiles straddle
# chunk and rank boundaries, the gathered tensor ends in a partial tile on every world) and 16 (one tile)
# hit the paths 37 and 32 did at about half the interpreted tiles; the row kernel runs one program per
# row, so it gets fewer rows (the interpreter runs them one by one).
ROWS = {"grouped": (23, 16), "gemm2d": (23, 16), "rms": (7, 8)}
_VARIANTS = ((0, "float32"), (1, "float16"), (0, "float16"), (1, "float32"))  # (index into ROWS, dtype)


def order_names(world: int) -> list:
    return ["ring", "local_first", "bidirectional_ring", explicit_order(world)]


def order_id(order) -> str:
    return "explicit" + "".join(map(str, order)) if isinstance(order, list) else order


def chunk_counts(world: int, order_index: int) -> tuple:
    """The chunk counts the order `order_names(world)[order_index]` runs with: all of them up to
    world 2; from world 3 two, in a Latin pattern shifted by one between odd and even worlds (world 4:
    orders 0 and 2 get 1 and 3, orders 1 and 3 get 2 and 4; world 3: orders 0 and 2 get 2 and 4,
    orders 1 and 3 get 3 and 1), so that worlds 3 and 4 together run every pair."""
    if world < 3:
        return CHUNKS
    first = order_index + world % 2
    return CHUNKS[first % len(CHUNKS)], CHUNKS[(first + 2) % len(CHUNKS)]


def matrix_cases(world: int) -> list[dict]:
    orders = order_names(world)
    if world == 1:
        # Orders mean nothing without peers: every kernel gets every chunk count instead.
        combos = [(kernel, orders[c % len(orders)], c) for kernel in KERNELS for c in CHUNKS]
    else:
        combos = [(KERNELS[(i + c) % len(KERNELS)], orders[i], c) for i in range(len(orders)) for c in chunk_counts(world, i)]
    cases, seen = [], {k: 0 for k in KERNELS}
    for kernel, order, c in combos:
        n = seen[kernel]
        seen[kernel] += 1
        rows_i, dtype = _VARIANTS[n % len(_VARIANTS)]
        variants = [(ROWS[kernel][rows_i], dtype), (ROWS[kernel][1 - rows_i], DTYPES[1 - DTYPES.index(dtype)])]
        if world >= 3:
            # More ranks than cores: one shard shape per case (the first variant alternates ragged and
            # aligned rows, fp32 and fp16 across a kernel's cases), which halves the two slowest worlds.
            variants = variants[:1]
        cases.append({"id": f"w{world}/{kernel}/c{c}/{order_id(order)}", "kernel": kernel, "chunks": c,
                      "order": order, "variants": variants})
    return cases
