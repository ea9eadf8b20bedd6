"""The templates as PyTorch custom operators, for models that torch.compile or trace.

    import syncopy.templates.ops                      # registers torch.ops.syncopy.<template>
    c = torch.ops.syncopy.ag_gemm(a_shard, b, group.group_name)
    c = syncopy.templates.ops.ag_gemm(a_shard, b, group=group)   # the same, naming the group itself

Every template takes its two operands (ag_attention three: q, k, v, and `causal` after the group;
tp_mlp three: x, w1, w2), the process group's name (a string: what torch's own
functional collectives pass, so a compiled graph holds no ProcessGroup object), and optionally a
chunk count (0: the template's schedule) and an order ("": the schedule's). Shapes and dtypes come
from the template's own launch run against a no-op kernel, so fake tensors (torch.compile's shape
inference) get exactly what the fused launch allocates (tp_mlp's output is x's shape). A compiled module calls the operator as one
node, without a graph break; the launch inside it is the template's fused launch. ag_gemm,
ag_gemm_persistent and gemm_rs are differentiable, each one's backward running the other fused, and
tp_mlp, whose backward runs both (see the autograd section below); the other templates are not (yet).
"""
from __future__ import annotations

import torch
from torch.distributed.distributed_c10d import _resolve_process_group

from syncopy import templates


class _NoKernel:
    """Stands in for the fused operator in a fake launch: the template allocates, nothing runs."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


# -- autograd: Megatron's sequence parallelism, fused both ways ------------------------------------
# Y = all_gather(X) @ W (W this rank's columns): dX = reduce_scatter(dY @ W^T), a GEMM-RS, and
# dW = all_gather(X)^T @ dY. Y = reduce_scatter(H @ W) (H this rank's columns, W its rows):
# dH = all_gather(dY) @ W^T, an AG-GEMM, and dW = H^T @ all_gather(dY). The backward GEMMs that carry
# the communication are the fused templates; the weight gradients gather with torch's functional
# all_gather (traceable, so a compiled backward has no graph break either).


def _save_inputs(ctx, inputs, output) -> None:
    x, w, group_name, chunks_per_rank, order = inputs
    ctx.save_for_backward(x, w)
    ctx.group_name, ctx.chunks_per_rank, ctx.order = group_name, chunks_per_rank, order


def _gathered(t, group_name):
    from torch.distributed import _functional_collectives as fc

    return fc.wait_tensor(fc.all_gather_tensor(t.contiguous(), 0, group_name))


def _ag_gemm_backward(ctx, grad):
    x, w = ctx.saved_tensors
    grad = grad.contiguous()
    dx = torch.ops.syncopy.gemm_rs(grad, w.t().contiguous(), ctx.group_name, ctx.chunks_per_rank, ctx.order)
    dw = _gathered(x, ctx.group_name).t() @ grad
    return dx, dw, None, None, None


def _gemm_rs_backward(ctx, grad):
    h, w = ctx.saved_tensors
    grad = grad.contiguous()
    dh = torch.ops.syncopy.ag_gemm(grad, w.t().contiguous(), ctx.group_name, ctx.chunks_per_rank, ctx.order)
    dw = h.t() @ _gathered(grad, ctx.group_name)
    return dh, dw, None, None, None


_BACKWARD = {"ag_gemm": _ag_gemm_backward, "ag_gemm_persistent": _ag_gemm_backward, "gemm_rs": _gemm_rs_backward}


# tp_mlp: Y = reduce_scatter(H @ W2), H = gelu(Z), Z = all_gather(X) @ W1. Backward, the two
# communicating GEMMs fused: dH = all_gather(dY) @ W2^T (ag_gemm), dZ = gelu'(Z) dH, dX =
# reduce_scatter(dZ @ W1^T) (gemm_rs); dW2 = H^T all_gather(dY), dW1 = all_gather(X)^T dZ. Z is
# recomputed from the gathered X (the forward keeps neither: its H lives in the operator's buffer).
def _save_mlp_inputs(ctx, inputs, output) -> None:
    x, w1, w2, group_name, chunks_per_rank, order = inputs
    ctx.save_for_backward(x, w1, w2)
    ctx.group_name, ctx.chunks_per_rank, ctx.order = group_name, chunks_per_rank, order


def _tp_mlp_backward(ctx, grad):
    x, w1, w2 = ctx.saved_tensors
    grad = grad.contiguous()
    gathered = _gathered(x, ctx.group_name)
    z = (gathered.float() @ w1.float())
    h = torch.nn.functional.gelu(z, approximate="tanh").to(x.dtype)  # as the forward stores H
    dh = torch.ops.syncopy.ag_gemm(grad, w2.t().contiguous(), ctx.group_name, ctx.chunks_per_rank, ctx.order)
    dw2 = h.t() @ _gathered(grad, ctx.group_name)
    dz = torch.ops.aten.gelu_backward(dh.float(), z, approximate="tanh").to(x.dtype)
    dx = torch.ops.syncopy.gemm_rs(dz, w1.t().contiguous(), ctx.group_name, ctx.chunks_per_rank, ctx.order)
    return dx, gathered.t() @ dz, dw2, None, None, None


def _register(name: str):
    module = templates.get(name).module

    @torch.library.custom_op(f"syncopy::{name}", mutates_args=())
    def op(x: torch.Tensor, w: torch.Tensor, group_name: str, chunks_per_rank: int = 0, order: str = "") -> torch.Tensor:
        group = _resolve_process_group(group_name)
        fused = templates._fused(name, chunks_per_rank or None, order or None)
        with torch.no_grad():  # autograd is the operator's (register_autograd below), not the launch's
            return module.launch(fused, x, w, group=group)

    @op.register_fake
    def _(x, w, group_name, chunks_per_rank=0, order=""):
        return module.launch(_NoKernel(), x, w, group=_resolve_process_group(group_name))

    def call(x, w, group=None, chunks_per_rank: int | None = None, order: str | None = None):
        import torch.distributed as dist

        group = group if group is not None else dist.group.WORLD
        return op(x, w, group.group_name, chunks_per_rank or 0, order or "")

    if name in _BACKWARD:
        op.register_autograd(_BACKWARD[name], setup_context=_save_inputs)
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


def _register_mlp(name: str):
    """tp_mlp takes the MLP's input shard and both weights (x, w1, w2): one node for the whole pipeline
    (its two fused operators and the device-side link between them), differentiable (_tp_mlp_backward)."""
    module = templates.get(name).module

    @torch.library.custom_op(f"syncopy::{name}", mutates_args=())
    def op(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, group_name: str, chunks_per_rank: int = 0,
           order: str = "") -> torch.Tensor:
        fused = templates._fused(name, chunks_per_rank or None, order or None)
        with torch.no_grad():  # autograd is the operator's (register_autograd below), not the launch's
            return module.launch(fused, x, w1, w2, group=_resolve_process_group(group_name))

    @op.register_fake
    def _(x, w1, w2, group_name, chunks_per_rank=0, order=""):
        return x.new_empty(x.shape)  # Y: this rank's rows of the reduce-scatter, x's shape (w2 maps back to x's width)

    def call(x, w1, w2, group=None, chunks_per_rank: int | None = None, order: str | None = None):
        import torch.distributed as dist

        group = group if group is not None else dist.group.WORLD
        return op(x, w1, w2, group.group_name, chunks_per_rank or 0, order or "")

    op.register_autograd(_tp_mlp_backward, setup_context=_save_mlp_inputs)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"torch.ops.syncopy.{name}(x, w1, w2, group.group_name, ...): {templates.get(name).description}"
    return call


#: Templates whose launch takes other operands than (x, w).
_OWN_SIGNATURE = {"ag_attention": _register_attention, "tp_mlp": _register_mlp}

for _name in templates.available():
    globals()[_name] = _OWN_SIGNATURE.get(_name, _register)(_name)
del _name
