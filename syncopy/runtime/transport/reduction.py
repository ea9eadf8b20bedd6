"""A rank's reduced rows in one pass: `reduce_into(dst, parts)` writes the sum of every rank's partial
of the same rows, in rank order, into `dst`.

The arithmetic is `context.sum_in_rank_order`'s (fp32 accumulation for half types, the parts added
one after another in rank order, rounded once to dst's dtype), so every backend and every rank gets
the same bits. On a GPU it is one Triton kernel that reads each part once and writes dst once: torch's
form (a widening copy, one add per peer, a narrowing copy) made five passes over the rows, 0.31 ms of
a 2.67 ms GEMM-RS launch at 8192x8192 fp16, world 4, on an H100 (benchmarks/gpu_bench.py with
SYNCOPY_BENCH_PROFILE). Elsewhere (CPU tensors, the interpreter, parts that are not contiguous rows of
dst's shape and dtype, more parts than the kernel takes) it is torch's form.
"""
from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from syncopy.runtime.where import interpreting

MAX_PARTS = 8
BLOCK = 2048
_WIDE = {torch.float16: tl.float32, torch.bfloat16: tl.float32, torch.float32: tl.float32, torch.float64: tl.float64}


@triton.jit
def _sum_parts(dst, p0, p1, p2, p3, p4, p5, p6, p7, n, N: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr):
    """dst = ((p0 + p1) + p2) + ... (N parts), accumulated in ACC, rounded once to dst's dtype."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    keep = offs < n
    acc = tl.load(p0 + offs, mask=keep).to(ACC)
    if N > 1:
        acc += tl.load(p1 + offs, mask=keep).to(ACC)
    if N > 2:
        acc += tl.load(p2 + offs, mask=keep).to(ACC)
    if N > 3:
        acc += tl.load(p3 + offs, mask=keep).to(ACC)
    if N > 4:
        acc += tl.load(p4 + offs, mask=keep).to(ACC)
    if N > 5:
        acc += tl.load(p5 + offs, mask=keep).to(ACC)
    if N > 6:
        acc += tl.load(p6 + offs, mask=keep).to(ACC)
    if N > 7:
        acc += tl.load(p7 + offs, mask=keep).to(ACC)
    tl.store(dst + offs, acc.to(dst.dtype.element_ty), mask=keep)


def one_pass(dst: torch.Tensor, parts: list[torch.Tensor]) -> bool:
    """Can `_sum_parts` reduce these (see module doc)?"""
    return (dst.dtype in _WIDE and 0 < len(parts) <= MAX_PARTS and dst.is_contiguous()
            and all(p.dtype == dst.dtype and p.shape == dst.shape and p.device == dst.device and p.is_contiguous() for p in parts))


def reduce_into(dst: torch.Tensor, parts) -> None:
    """dst = the sum of `parts` (an iterable in rank order), as `sum_in_rank_order` computes it."""
    parts = list(parts)
    if dst.numel() == 0:
        return
    if dst.is_cuda and not interpreting() and one_pass(dst, parts):
        launch_sum(dst, parts)
    else:
        dst.copy_(sum_in_rank_order(parts, dst.dtype))


def launch_sum(dst: torch.Tensor, parts: list[torch.Tensor]) -> None:
    """The one-pass kernel on dst's current stream (the interpreter runs it too: tests)."""
    n = dst.numel()
    padded = parts + [parts[0]] * (MAX_PARTS - len(parts))  # unread: N says how many count
    with torch.cuda.device(dst.device) if dst.is_cuda else contextlib.nullcontext():  # Triton launches on the current GPU
        _sum_parts[(triton.cdiv(n, BLOCK),)](dst, *padded, n, N=len(parts), ACC=_WIDE[dst.dtype], BLOCK=BLOCK)


def sum_in_rank_order(parts, dtype: torch.dtype) -> torch.Tensor:
    """The sum of `parts` (every rank's partial of the same rows, an iterable in rank order),
    accumulated in fp32 for half types: whoever adds the same parts in this order gets the same
    bits, so every backend's reduction agrees with every other rank's."""
    parts = iter(parts)
    wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    acc = next(parts).to(wide, copy=True)
    for part in parts:
        acc.add_(part)
    return acc
