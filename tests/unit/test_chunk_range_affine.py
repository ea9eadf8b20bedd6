"""device.chunk_range_affine against brute force: the chunks a loop's reads touch, every iteration
enumerated, for masks that end anywhere in the loop (issue 10 case 1) and ragged column masks."""
from __future__ import annotations

import itertools
import os

import pytest
import torch
import triton
import triton.language as tl

from syncopy import device

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="runs under the Triton interpreter")

ROWS_PER_RANK, CHUNKS, WORLD, NC = 6, 3, 2, 4  # 12 rows, 6 chunks of 2 rows, rows of NC floats


def _chunk(row: int) -> int:
    src, local = divmod(row, ROWS_PER_RANK)
    return src * CHUNKS + ((local + 1) * CHUNKS - 1) // ROWS_PER_RANK


@triton.jit
def probe(X, out, ctx, r0, dr, c0, dc, bound, n, BR: tl.constexpr, BC: tl.constexpr, ON_ROWS: tl.constexpr):
    # Iteration k reads rows r0 + k dr + [0, BR) and columns c0 + k dc + [0, BC); the mask
    # bounds the rows (ON_ROWS) or the columns by `bound`.
    rows0 = r0 + tl.arange(0, BR)
    cols0 = c0 + tl.arange(0, BC)
    rows1 = r0 + n * dr + tl.arange(0, BR)
    cols1 = c0 + n * dc + tl.arange(0, BC)
    p0 = X + rows0[:, None] * NC + cols0[None, :]
    p1 = X + rows1[:, None] * NC + cols1[None, :]
    if ON_ROWS:
        v0 = (rows0 - bound)[:, None]
        v1 = (rows1 - bound)[:, None]
    else:
        v0 = (cols0 - bound)[None, :]
        v1 = (cols1 - bound)[None, :]
    lo, hi = device.chunk_range_affine(p0, p1, True, v0, v1, n, X, ctx, True)
    tl.store(out, lo)
    tl.store(out + 1, hi)


@pytest.mark.parametrize(("r0", "dr", "c0", "dc", "bound", "n", "on_rows"), [
    (0, 2, 0, 0, 7, 3, True),      # rows 0..7 in 4 steps of 2, the mask ends inside step 3
    (4, 2, 0, 0, 7, 3, True),      # the last two steps masked off entirely
    (6, 2, 0, 0, 5, 2, True),      # every step masked off: nothing read
    (8, -2, 0, 0, 5, 3, True),     # a negative step
    (3, 0, 0, 2, 3, 1, False),     # one row block, a ragged column tail: no spill into the next row
    (2, 0, 0, 2, 4, 1, False),     # columns end exactly at the row's end
    (0, 2, 0, 0, 12, 0, True),     # a single iteration
])
def test_affine_range_is_the_brute_force_range(r0, dr, c0, dc, bound, n, on_rows):

    x = torch.zeros(WORLD * ROWS_PER_RANK * NC + 64)
    ctx = torch.tensor([1, 0, ROWS_PER_RANK, CHUNKS, NC * 4, WORLD * ROWS_PER_RANK, 100, WORLD], dtype=torch.int64)
    out = torch.zeros(2, dtype=torch.int32)
    br, bc = 2, 4
    probe[(1,)](x, out, ctx, r0, dr, c0, dc, bound, n, BR=br, BC=bc, ON_ROWS=on_rows)
    chunks = set()
    for k in range(n + 1):
        for i, j in itertools.product(range(br), range(bc)):
            r, c = r0 + k * dr + i, c0 + k * dc + j
            if (r if on_rows else c) < bound:
                chunks.add(_chunk(min((r * NC + c) // NC, WORLD * ROWS_PER_RANK - 1)))
    got = out.tolist()
    if not chunks:
        assert got[1] < got[0]
    else:
        assert got == [min(chunks), max(chunks)]
