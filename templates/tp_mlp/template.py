"""tp_mlp: Y_r = rows r of reduce_scatter(gelu(all_gather(X) @ W1_r) @ W2_r), the Megatron sequence-parallel
MLP as two fused operators linked by per-chunk signals on H (syncopy.pipeline); shape M,N,F with M the
tokens per rank, N the model width and F the FFN width per rank."""
import copy
import types
from importlib import resources

import torch
import torch.distributed as dist
import triton

from syncopy.templates import all_gather_rows, world_size

DEFAULT_SHAPE = (48, 32, 64)
TOLERANCE = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 6e-2}
UP_META = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, GROUP_M=4)
DOWN_META = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32)


class TpMlp:
    """The up and down operators and the pipeline that links them; H (the activations between them)
    is kept per shape and reused, like the operators' own buffers. `pipeline.trace` / `trace=`: one
    trace of both operators."""

    def __init__(self, up, down, pipeline, max_rows=None):
        from syncopy.runtime.state.context import Arena

        self.up, self.down, self.pipeline = up, down, pipeline
        self.faults = up.faults  # injected faults, as given (both operators hold them until routed)
        self._routed_world: int | None = None
        self.schedule = up.schedule  # what `syncopy run` reads of an operator: the communicated input's
        self.last_resolution = None
        self._hidden: dict[tuple, torch.Tensor] = {}
        # max_rows=: H of every token count shares one allocation, as the operators' buffers do.
        self.arena = Arena(max_rows) if max_rows is not None else None

    def hidden(self, rows: int, width: int, like: torch.Tensor, world: int) -> torch.Tensor:
        key = (rows, width, like.dtype, like.device)
        if key not in self._hidden:
            if self.arena is not None:
                self._hidden[key] = self.arena.take((rows, width), like.dtype, like.device, rows // world)
            else:
                self._hidden[key] = torch.empty(rows, width, dtype=like.dtype, device=like.device)
        return self._hidden[key]

    def rank_view(self):
        """This operator as one rank of a thread world sees it (runtime/worlds/thread_pipeline.py): the same
        up and down operators, activations of its own (ranks share one process)."""
        from syncopy.runtime.state.context import Arena

        if self.faults is not None:
            from syncopy.errors import LaunchError

            raise LaunchError("injected faults act on the gloo backend's transfers; the thread world moves chunks by stream "
                              "copies: drop the faults, or run on CPU ranks (syncopy run)")
        view = copy.copy(self)
        view._hidden = {}
        view.arena = Arena(self.arena.announced_rows) if self.arena is not None else None
        return view

    def route_faults(self, world: int) -> None:
        """Give each operator the injected faults that name its sends (see `route_faults`), once, at
        the first launch (before the pipeline copies the operators into its linked variants)."""
        if self.faults is None or self._routed_world is not None:
            return
        self.up.faults, self.down.faults = route_faults(self.faults, self.up.schedule, self.down.schedule, world)
        self._routed_world = world

    def synchronize(self) -> None:
        """Wait for the launches so far and raise the first error among them (the pipeline's)."""
        self.pipeline.synchronize()

    @property
    def contexts(self):
        """Every linked operator's contexts, as an operator's `contexts` holds them (its `table`: what
        `syncopy run` counts)."""
        table = {}
        for plan in self.pipeline.plans.values():
            for v in plan.variants:
                table.update({(id(v), k): c for k, c in v.contexts.table.items()})
        return types.SimpleNamespace(table=table)


def make_operator(chunks_per_rank=None, order=None, trace=False, link_chunks=None, **options):
    """The template's operator (what `syncopy.templates.get("tp_mlp").fused(...)` returns)."""
    import importlib

    import syncopy
    from syncopy.templates import get

    module = importlib.import_module("syncopy.templates.tp_mlp.kernel")
    up_schedule = get("tp_mlp").schedule(chunks_per_rank=chunks_per_rank, order=order)
    down_schedule = _down_schedule(chunks_per_rank, order)
    up = syncopy.overlap(up_schedule, **options)(module.mlp_up_kernel)
    down = syncopy.overlap(down_schedule, **options)(module.mlp_down_kernel)
    return TpMlp(up, down, syncopy.pipeline(trace=trace, link_chunks=link_chunks), options.get("max_rows"))


def route_faults(faults, up_schedule, down_schedule, world: int):
    """(the up projection's faults, the down projection's): a fault `kind=SRC:CHUNK` names a send of
    either operator, in that operator's numbering (the up projection's CHUNK is a chunk of rank SRC's
    shard of X, the down projection's a global chunk id of Y), and goes to each operator that makes
    that send: a send both make (rank 1's chunk 0 at world 2) is faulted in both, the up projection's
    first. A fault naming a send of neither is one FaultError, the same on every rank."""
    from syncopy.errors import FaultError
    from syncopy.runtime.transport import link as links
    from syncopy.runtime.state import plan as planning

    if world < 2 or not all(isinstance(s.chunks_per_rank, int) for s in (up_schedule, down_schedule)):
        return faults, faults  # nothing is sent, or the planner picks the chunks: each operator's own check says
    c = up_schedule.chunks_per_rank
    ups = set().union(*(links.sends(planning.all_gather(up_schedule, r, world, c)) for r in range(world)))
    downs = set().union(*(links.sends(planning.reduce(down_schedule, r, world, down_schedule.chunks_per_rank))
                          for r in range(world)))
    for kind, (src, chunk) in faults.named():
        if not 0 <= src < world:
            raise FaultError(f"injected fault {kind}={src}:{chunk} names rank {src}, but the group has {world} rank(s); "
                             f"name a rank 0..{world - 1}")
        if (src, chunk) not in ups | downs:
            raise FaultError(f"injected fault {kind}={src}:{chunk} names a send no operator of tp_mlp makes: CHUNK is a chunk of "
                             f"rank {src}'s shard of X (the up projection sends {_listed(ups, src)}) or a global chunk id of Y "
                             f"(the down projection sends {_listed(downs, src)}); name one of those")
    return _only(faults, ups), _only(faults, downs)


def check_faults(faults, world: int, chunks_per_rank=None, order=None) -> None:
    """`syncopy run`'s check of --inject before any rank starts (route_faults' FaultError): said once,
    not by whichever rank reports first."""
    from syncopy.templates import get

    route_faults(faults, get("tp_mlp").schedule(chunks_per_rank=chunks_per_rank, order=order),
                 _down_schedule(chunks_per_rank, order), world)


def _listed(sends: set, src: int) -> str:
    return ", ".join(str(i) for r, i in sorted(sends) if r == src) or "none"


def _only(faults, sends: set):
    """The faults that name one of `sends` (None if no fault does)."""
    from syncopy.runtime.transport.link import Faults

    kept = Faults.of(drop=[k for k in faults.drop if k in sends], delay={k: v for k, v in faults.delay_s if k in sends},
                     kill=faults.kill if faults.kill in sends else None, corrupt=[k for k in faults.corrupt if k in sends])
    return kept if kept.named() else None


def _down_schedule(chunks_per_rank, order):
    from syncopy.schedule import from_dict, load_schedule

    s = load_schedule(str(resources.files("syncopy.templates") / "tp_mlp" / "down.yaml"))
    update = {k: v for k, v in (("chunks_per_rank", chunks_per_rank), ("order", order)) if v is not None}
    return from_dict({**s.model_dump(exclude_none=True), **update}) if update else s


def inputs(rank, world, shape, dtype, seed=0):
    m, n, f = shape
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    x = torch.randn(m, n, generator=g).to(dtype)
    w1 = (torch.randn(n, f, generator=g) / n ** 0.5).to(dtype)
    w2 = (torch.randn(f, n, generator=g) / f ** 0.5).to(dtype)
    return {"x": x, "w1": w1, "w2": w2}


def launch(fused, x, w1, w2, group=None):
    """Y = this rank's rows of reduce_scatter(gelu(all_gather(x) @ w1) @ w2), the two GEMMs fused with
    their communication and linked: the down projection's tiles wait on the device for the rows of H
    the up projection's tiles announce."""
    world = world_size(group)
    fused.route_faults(world)
    m, n = x.shape[0] * world, x.shape[1]
    f = w1.shape[1]
    h = fused.hidden(m, f, x, world)
    y = torch.empty(x.shape[0], n, dtype=x.dtype, device=x.device)
    up_grid = (triton.cdiv(m, UP_META["BLOCK_M"]) * triton.cdiv(f, UP_META["BLOCK_N"]),)
    down_grid = (triton.cdiv(m, DOWN_META["BLOCK_M"]), triton.cdiv(n, DOWN_META["BLOCK_N"]))
    with fused.pipeline:
        fused.up[up_grid](x, w1, h, m, f, n, x.stride(0), x.stride(1), w1.stride(0), w1.stride(1), h.stride(0), h.stride(1),
                          **UP_META, group=group)
        fused.down[down_grid](h, w2, y, m, n, f, h.stride(0), h.stride(1), w2.stride(0), w2.stride(1), n, 1, **DOWN_META,
                              group=group)
    return y


def reference(x, w1, w2, group=None):
    """all_gather, mm, gelu (stored in x's dtype, as the fused H is), mm, then reduce_scatter (all_reduce
    and this rank's rows: gloo has no reduce_scatter)."""
    h = torch.nn.functional.gelu(all_gather_rows(x, group).float() @ w1.float(), approximate="tanh").to(x.dtype)
    full = h.float() @ w2.float()
    dist.all_reduce(full, group=group)
    rows = x.shape[0]
    rank = dist.get_rank(group)
    return full[rank * rows:(rank + 1) * rows].to(x.dtype)
