"""The templates as PyTorch custom operators, for models that torch.compile or trace.

    import syncopy.templates.ops                      # registers torch.ops.syncopy.<template>
    c = torch.ops.syncopy.ag_gemm(a_shard, b, group.group_name)
    c = syncopy.templates.ops.ag_gemm(a_shard, b, group=group)   # the same, naming the group itself

Every template takes its two operands (ag_attention three: q, k, v, and `causal` after the group), the process group's name (a string: what torch's own
functional collectives pass, so a compiled graph holds no ProcessGroup object), and optionally a
chunk count (0: the template's schedule) and an order ("": the schedule's). Shapes and dtypes come
from the template's own launch run against a no-op kernel, so fake tensors (torch.compile's shape
inference) get exactly what the fused launch allocates. A compiled module calls the operator as one
node, without a graph break; the launch inside it is the template's fused launch.
"""
from __future__ import annotations

import torch
from torch.distributed.distributed_c10d import _resolve_process_group

from syncopy import templates


class _NoKernel:
    """Stands in for the fused operator in a fake launch: the template allocates, nothing runs."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def _register(name: str):
    module = templates.get(name).module

    @torch.library.custom_op(f"syncopy::{name}", mutates_args=())
    def op(x: torch.Tensor, w: torch.Tensor, group_name: str, chunks_per_rank: int = 0, order: str = "") -> torch.Tensor:
        group = _resolve_process_group(group_name)
        fused = templates._fused(name, chunks_per_rank or None, order or None)
        return module.launch(fused, x, w, group=group)

    @op.register_fake
    def _(x, w, group_name, chunks_per_rank=0, order=""):
        return module.launch(_NoKernel(), x, w, group=_resolve_process_group(group_name))

    def call(x, w, group=None, chunks_per_rank: int | None = None, order: str | None = None):
        import torch.distributed as dist

        group = group if group is not None else dist.group.WORLD
        return op(x, w, group.group_name, chunks_per_rank or 0, order or "")

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"torch.ops.syncopy.{name}(x, w, group.group_name, ...): {templates.get(name).description}"
    return call


def _register_attention(name: str):
    """ag_attention takes three operands (q, k, v) and `causal`: the same scheme, one operand more."""
    module = templates.get(name).module

    @torch.library.custom_op(f"syncopy::{name}", mutates_args=())
    def op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group_name: str, causal: bool = False,
           chunks_per_rank: int = 0, order: str = "") -> torch.Tensor:
        fused = templates._fused(name, chunks_per_rank or None, order or None)
        return module.launch(fused, q, k, v, causal=causal, group=_resolve_process_group(group_name))

    @op.register_fake
    def _(q, k, v, group_name, causal=False, chunks_per_rank=0, order=""):
        return module.launch(_NoKernel(), q, k, v, causal=causal, group=_resolve_process_group(group_name))

    def call(q, k, v, causal: bool = False, group=None, chunks_per_rank: int | None = None, order: str | None = None):
        import torch.distributed as dist

        group = group if group is not None else dist.group.WORLD
        return op(q, k, v, group.group_name, causal, chunks_per_rank or 0, order or "")

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"torch.ops.syncopy.{name}(q, k, v, group.group_name, causal, ...): {templates.get(name).description}"
    return call


#: Templates whose launch takes other operands than (x, w).
_OWN_SIGNATURE = {"ag_attention": _register_attention}

for _name in templates.available():
    globals()[_name] = _OWN_SIGNATURE.get(_name, _register)(_name)
del _name
