"""Pass: link a kernel to its neighbours in a pipeline (syncopy.pipeline), before its own schedule's passes.

Two fused operators that share a tensor (the up projection writes H, the down projection reads it)
meet on per-chunk signals of that tensor instead of at a host barrier. The writer is a producer of
H's rows, the reader a consumer, with the protocol of reduce_scatter's notifies and all_gather's
waits (device.notify_chunks / wait_chunks), on a context and signal pad of their own:

    writer:  tl.store(h_ptrs, h, mask=...)
             # syncopy: announce the finished chunks of H (pipeline link)
             syncopy_out_lo, syncopy_out_hi = syncopy_device.chunk_range_masked(h_ptrs, mask, H, syncopy_out_ctx, True)
             syncopy_device.notify_chunks(syncopy_out_signals, syncopy_out_ctx, syncopy_out_lo, syncopy_out_hi)
    reader:  # syncopy: wait for the chunks of H this program reads (pipeline link)
             syncopy_in_lo, syncopy_in_hi = syncopy_device.chunk_range_affine(...)
             syncopy_device.wait_chunks(syncopy_in_signals, syncopy_in_ctx, syncopy_in_lo, syncopy_in_hi)

The statements are those the producer and consumer passes write, with their names moved to the
link's (`syncopy_out_*` for the tensor this kernel announces, `syncopy_in_*` for the one it waits
on), and no tile table: the rows come from the pointers at run time. The result is a kernel the
schedule's own passes then transform as usual (they leave the link's names alone).
"""
from __future__ import annotations

import libcst as cst

from syncopy.errors import KernelError
from syncopy.frontend import cstutil as cu
from syncopy.frontend import infer as inference
from syncopy.frontend.source import KernelSource, find_kernel
from syncopy.passes import consumer_wait, names, producer_notify, signature

IN, OUT = "in", "out"
#: The prefixes of the names this pass adds; the schedule's passes accept them in a linked kernel.
PREFIXES = ("syncopy_in_", "syncopy_out_")


def ctx_param(direction: str) -> str:
    return f"syncopy_{direction}_ctx"


def signals_param(direction: str) -> str:
    return f"syncopy_{direction}_signals"


def params(direction: str) -> tuple[str, str]:
    """The parameters a linked kernel takes for one direction: its link's context and signal pad."""
    return ctx_param(direction), signals_param(direction)


class _Rename(cst.CSTTransformer):
    """The generic pass names (syncopy_ctx, syncopy_signals, syncopy_lo*, syncopy_hi*) to one link's."""

    def __init__(self, direction: str):
        super().__init__()
        self.exact = {names.CTX: ctx_param(direction), names.SIGNALS: signals_param(direction)}
        self.prefixes = {names.LO: f"syncopy_{direction}_lo", names.HI: f"syncopy_{direction}_hi"}

    def leave_Name(self, original, updated):
        value = updated.value
        if value in self.exact:
            return updated.with_changes(value=self.exact[value])
        for old, new in self.prefixes.items():
            if value == old or value.startswith(old + "_"):
                return updated.with_changes(value=new + value[len(old):])
        return updated


class _TileStartOnOwnPad(cst.CSTTransformer):
    """The tile starts once its link wait is over: its trace record (device.trace_tile_start) goes to
    the operator's own signal pad and trace, not the link's. A schedule whose tiles start earlier (a
    producer's head) records again here, and the later record is the one kept."""

    TILE_START = cst.parse_statement(
        f"{names.DEVICE}.trace_tile_start({names.SIGNALS}, {names.TRACE}, {names.CTX}, {names.TRACE_FLAG})\n")

    def leave_SimpleStatementLine(self, original, updated):
        if any((cu.call_name(c) or "").endswith("trace_tile_start") for c in cu.calls_in(updated)):
            return self.TILE_START.with_changes(leading_lines=updated.leading_lines)
        return updated


def _note(stmt: cst.BaseStatement, text: str) -> cst.BaseStatement:
    """`stmt` with its syncopy comment (the last leading line) replaced by `text`."""
    line = cst.EmptyLine(comment=cst.Comment(f"# syncopy: {text}"))
    return stmt.with_changes(leading_lines=[*stmt.leading_lines[:-1], line])


def _returns_before(body: list[cst.BaseStatement], last: int) -> bool:
    """Whether a `return` comes before (or inside) the last store: a tile that ends there would
    never count itself, and the tile table that covers that case in reduce_scatter has no link."""
    class Find(cst.CSTVisitor):
        found = False

        def visit_Return(self, node):
            Find.found = True

    for stmt in body[: last + 1]:
        stmt.visit(Find())
    return Find.found


def _binding(ks: KernelSource, tensor: str, writes: bool) -> inference.TensorBinding:
    b = inference.infer(ks, tensor, 0, writes=writes)
    role = "writes" if writes else "reads"
    refused = ("it loops over its tiles (a persistent kernel)" if b.persistent is not None
               else "it reassigns the argument" if b.copy_base
               else "it reaches it through tensor descriptors" if b.descriptors else "")
    if refused:
        raise KernelError(f"kernel '{ks.name}' {role} '{tensor}', which a pipeline links to another operator, but {refused}; "
                          "pipelines link kernels with one program per tile that index the tensor with pointers: "
                          f"pass a fresh tensor for '{tensor}' to break the link", ks.location(ks.func))
    return b


def _reparsed(ks: KernelSource, func: cst.FunctionDef) -> KernelSource:
    """`ks` with its kernel replaced by `func`, parsed again (fresh positions for inference)."""
    module = ks.module.deep_replace(ks.func, func)
    out = find_kernel(module.code, ks.path, ks.name, line_offset=ks.line_offset)
    out.linked = True
    return out


def _notify(ks: KernelSource, tensor: str) -> KernelSource:
    b = _binding(ks, tensor, writes=True)
    body = list(ks.func.body.body)
    last = b.groups[-1].stmt_index
    if _returns_before(body, last):
        raise KernelError(f"kernel '{ks.name}' may return before its last store into '{tensor}', which a pipeline links to "
                          "the next operator; a linked kernel must reach its stores on every path (mask them instead of "
                          "returning)", ks.location(ks.func))
    out = producer_notify.insert_notifies(body, b, table=False)
    out = [s.visit(_Rename(OUT)) for s in out]
    at = next(i for i, s in enumerate(out) if "notify_chunks" in ks.module.code_for_node(s))
    out[at] = _note(out[at], f"'{tensor}' feeds the next operator of the pipeline: announce its finished chunks")
    func = ks.func.with_changes(body=ks.func.body.with_changes(body=out))
    return _reparsed(ks, signature.add_params(func, extra=params(OUT), flags=()))


def _wait(ks: KernelSource, tensor: str) -> KernelSource:
    b = _binding(ks, tensor, writes=False)
    body = list(ks.func.body.body)
    out = consumer_wait.insert_waits(body, b, table=False,
                                     notes=(f"# syncopy: '{tensor}' comes from the operator before it in the pipeline",))
    out = [s.visit(_Rename(IN)).visit(_TileStartOnOwnPad()) for s in out]
    func = ks.func.with_changes(body=ks.func.body.with_changes(body=out))
    return _reparsed(ks, signature.add_params(func, extra=params(IN), flags=()))


def apply(ks: KernelSource, wait: str | None = None, notify: str | None = None) -> KernelSource:
    """The kernel of `ks` with a link's waits before its reads of `wait` and a link's notifies after
    its stores into `notify` (either may be None); rows along dim 0."""
    signature.check_reserved(ks)
    if notify is not None:
        ks = _notify(ks, notify)
    if wait is not None:
        ks = _wait(ks, wait)
    return ks
