"""PTX for checks: lower a fused kernel through `triton.compile` for an NVIDIA target. Works on a
machine without a GPU (the compiler does not need one), so tests can inspect waits and notifies.

Must run in a process where TRITON_INTERPRET is not set (the interpreter replaces @jit).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch

_TORCH_TO_TRITON = {
    torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
    torch.int32: "i32", torch.int64: "i64", torch.int8: "i8", torch.uint8: "u8", torch.int16: "i16",
}


def signature_of(jit_fn, args: dict) -> tuple[dict, dict]:
    """(signature, constexprs) for `triton.compile` from example arguments (tensors, ints, floats)."""
    sig, const = {}, {}
    for p in jit_fn.params:
        name = p.name
        if p.is_constexpr:
            sig[name] = "constexpr"
            const[name] = args[name]
            continue
        v = args[name]
        if isinstance(v, torch.Tensor):
            sig[name] = "*" + _TORCH_TO_TRITON[v.dtype]
        elif isinstance(v, bool):
            sig[name] = "i1"
        elif isinstance(v, int):
            sig[name] = "i32" if -(2**31) <= v < 2**31 else "i64"
        elif isinstance(v, float):
            sig[name] = "fp32"
        elif type(v).__name__ == "TensorDescriptor":  # made on the host: typed by its dtype and block, as Triton does
            from triton.runtime.jit import mangle_type

            sig[name] = mangle_type(v)
        else:
            raise TypeError(f"cannot type argument {name}={v!r} for compilation")
    return sig, const


def compile_ptx(jit_fn, signature: dict, constexprs: dict, arch: int = 90, options: dict | None = None) -> str:
    """PTX of `jit_fn` for sm_<arch> (80, 90, ...); `options`: num_warps, num_stages, ... (an autotune config's)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(fn=jit_fn, signature=signature, constexprs=constexprs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options or None).asm["ptx"]


@dataclass(frozen=True)
class Op:
    line: int
    text: str


_LABEL = re.compile(r"^\s*(\$?[\w$]+):")
_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$?[\w$]+);")


def acquire_polls(ptx: str) -> list[Op]:
    """Acquire loads (or acquire atomics) that sit inside a loop: a label before them that a branch
    after them jumps back to. These are the spin-waits on chunk flags."""
    lines = ptx.splitlines()
    labels = {m.group(1): i for i, l in enumerate(lines) if (m := _LABEL.match(l))}
    back_edges = [(labels[m.group(1)], i) for i, l in enumerate(lines) if (m := _BRANCH.search(l)) and m.group(1) in labels and labels[m.group(1)] < i]
    out = []
    for i, l in enumerate(lines):
        if ".acquire" in l and ("ld." in l or "atom." in l):
            if any(head < i < tail for head, tail in back_edges):
                out.append(Op(i + 1, l.strip()))
    return out


def release_ops(ptx: str) -> list[Op]:
    """Release stores/atomics (notifies)."""
    return [Op(i + 1, l.strip()) for i, l in enumerate(ptx.splitlines()) if ".release" in l and ("st." in l or "atom." in l or "red." in l)]


def notifies(ptx: str) -> list[Op]:
    """Producer notifies: release (or acq_rel) atomics at system scope, the tile counters and flags."""
    return [Op(i + 1, l.strip()) for i, l in enumerate(ptx.splitlines())
            if "atom." in l and ".sys" in l and (".release" in l or ".acq_rel" in l)]


def stores_then_barrier_then_notify(ptx: str) -> bool:
    """The producer's ordering: every global store before the first notify, and a block barrier
    between the last store and that notify (so all threads' stores precede the count)."""
    lines = ptx.splitlines()
    found = notifies(ptx)
    if not found:
        return False
    first = found[0].line - 1
    stores = [i for i, l in enumerate(lines) if re.search(r"\bst\.global", l)]
    if not stores or max(stores) > first:
        return False
    return any("bar.sync" in l or "barrier.sync" in l for l in lines[max(stores):first])


# -- the async proxy (TMA) ---------------------------------------------------------------------------
_ACQUIRE = re.compile(r"\b(?:ld|atom)\.[\w.:]*\.acquire\b")
_PROXY_FENCE = re.compile(r"\bfence\.proxy\.async\.global\b")
_TMA_LOAD = re.compile(r"\bcp\.async\.bulk\.tensor\.\w+\.shared::\w+\.global\b")
_TMA_STORE = re.compile(r"\bcp\.async\.bulk\.tensor\.\w+\.global\.shared::\w+\b")
_BULK_WAIT = re.compile(r"\bcp\.async\.bulk\.wait_group(\.read)?\b")


def proxy_fences(ptx: str) -> list[Op]:
    """`fence.proxy.async.global`: what orders TMA copies (the async proxy) against generic acquires and releases."""
    return [Op(i + 1, l.strip()) for i, l in enumerate(ptx.splitlines()) if _PROXY_FENCE.search(l)]


def tma_loads(ptx: str) -> list[Op]:
    return [Op(i + 1, l.strip()) for i, l in enumerate(ptx.splitlines()) if _TMA_LOAD.search(l)]


def tma_stores(ptx: str) -> list[Op]:
    return [Op(i + 1, l.strip()) for i, l in enumerate(ptx.splitlines()) if _TMA_STORE.search(l)]


def _nearest_before(lines: list[str], at: int, kinds: dict[str, re.Pattern]) -> tuple[str, int] | None:
    for i in range(at - 1, -1, -1):
        for kind, pattern in kinds.items():
            if pattern.search(lines[i]):
                return kind, i
    return None


def tma_loads_fenced(ptx: str) -> bool:
    """Consumer order: every TMA load that follows an acquire (in program text) has a proxy fence
    between them (`ld.acquire` ... `fence.proxy.async.global` ... `cp.async.bulk.tensor` load)."""
    lines = ptx.splitlines()
    for op in tma_loads(ptx):
        seen = _nearest_before(lines, op.line - 1, {"acquire": _ACQUIRE, "fence": _PROXY_FENCE})
        if seen is not None and seen[0] == "acquire":
            return False
    return True


def tma_stores_fenced(ptx: str) -> bool:
    """Producer order: between the last TMA store before each notify and that notify, a full
    `cp.async.bulk.wait_group` (the stores complete, not only their reads) and then a proxy fence."""
    lines = ptx.splitlines()
    for op in notifies(ptx):
        seen = _nearest_before(lines, op.line - 1, {"store": _TMA_STORE, "fence": _PROXY_FENCE})
        if seen is None:
            continue
        if seen[0] == "store":
            return False
        wait = _nearest_before(lines, seen[1], {"wait": _BULK_WAIT, "store": _TMA_STORE})
        if wait is None or wait[0] != "wait" or _BULK_WAIT.search(lines[wait[1]]).group(1):
            return False
    return True
