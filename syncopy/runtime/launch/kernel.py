"""An operator's fused kernel: the passes run once (at the first launch, or never for a kernel from
syncopy.load), the syncopy_* arguments each launch adds to the user's, and the launch of the kernel
itself beside the launch's transfers."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import torch

from syncopy.passes.names import ASYNC_PROXY_FLAG
from syncopy.runtime.launch.interpreter_limits import raise_interpreter_limit
from syncopy.runtime.state.context import Context
from syncopy.runtime.where import has_async_proxy

if TYPE_CHECKING:
    from syncopy.passes.transformed import Transformed


class Built(NamedTuple):
    """What the passes made of the user's kernel: what they found and wrote (`transformed`), the fused
    kernel and its probe (None: tiles keep their launch order) imported from the generated file at `path`."""

    transformed: Transformed
    fused: object  # a triton JITFunction
    probe: object | None
    path: Path


class Kernel:
    """The fused kernel of `op` (api.FusedKernel): its local kernel and schedule, a pipeline variant's
    link roles, checked mode and dump_dir decide what the passes make of it."""

    def __init__(self, op, built: Built | None = None):
        self.op = op
        self._built = built
        self._lock = threading.Lock()  # threads may share an operator: the compile step runs once
        self._link_probe = None
        self._written: list[str] | None = None
        self._extent_probes: dict = {}

    @property
    def built(self) -> Built | None:
        """What `build` made, or None before the first build."""
        return self._built

    def build(self) -> Built:
        """Run the passes (once) and import the generated module."""
        with self._lock:
            if self._built is None:
                # The frontend (libcst) only here: a kernel from syncopy.load never builds.
                from syncopy.emit import source as emit
                from syncopy.frontend.source import from_jit
                from syncopy.passes import read_check, transform

                op = self.op
                ks = from_jit(op.local)
                if op.link_roles:  # a pipeline's variant: its links' waits and notifies first (passes/link.py)
                    from syncopy.passes import link

                    ks = link.apply(ks, **op.link_roles)
                t = transform(ks, op.schedule)
                from syncopy.passes import notes

                notes.report_fallbacks(t, getattr(op, "strict", False))  # once per operator: this build
                if op.checked if op.checked is not None else read_check.enabled_by_env():
                    t = read_check.apply(t)
                    read_check.report_unchecked(t)
                fused, probe, path = emit.load(t, op.local.fn.__globals__)
                if op.dump_dir is not None:
                    emit.dump(t, op.dump_dir)
                self._built = Built(t, fused, probe, path)
        return self._built

    def link_probe(self):
        """The probe that counts a pipeline variant's tiles per chunk of the tensor it announces: the
        reduce_scatter probe of the user's kernel on that tensor (its store-address slice, built once)."""
        with self._lock:
            if self._link_probe is None:
                from syncopy.emit import source as emit
                from syncopy.frontend.source import from_jit
                from syncopy.passes import transform
                from syncopy.schedule import from_dict

                op = self.op
                writes = from_dict({"pattern": "reduce_scatter", "kernel": op.local.fn.__name__, "tensor": op.link_roles["notify"],
                                    "dim": 0, "chunks_per_rank": 1, "order": "ring"})
                t = transform(from_jit(op.local), writes)
                self._link_probe = emit.load(t, op.local.fn.__globals__)[1]
        return self._link_probe

    def written(self) -> list[str]:
        """The kernel's parameters it stores into through pointers computed from them (frontend/infer.py,
        written_pointers), found once; none for a kernel from syncopy.load (no local kernel to read)."""
        with self._lock:
            if self._written is None and self.op.loaded:  # no frontend (libcst) where a transformed file is loaded:
                self._written = list(self._built.transformed.written)  # what `transform --loadable` found
            elif self._written is None:
                from syncopy.frontend import infer
                from syncopy.frontend.source import from_jit

                self._written = infer.written_pointers(from_jit(self.op.local))
        return self._written

    def extent_probe(self, output: str):
        """(the store-address probe of `output`, whether it goes through tensor descriptors), or None:
        the reduce_scatter probe of the user's kernel on that output, which reports the rows each
        program writes (TileOrders.check_extents). Built once per output; None where inference cannot
        bound its stores (its extent then goes unchecked)."""
        with self._lock:
            if output not in self._extent_probes and self.op.loaded:  # written into the file by `transform --loadable`
                self._extent_probes[output] = self._built.transformed.extents.get(output)
            if output not in self._extent_probes:
                self._extent_probes[output] = self._build_extent_probe(output)
        return self._extent_probes[output]

    def _build_extent_probe(self, output: str):
        from syncopy.emit import source as emit
        from syncopy.errors import InferenceError, KernelError
        from syncopy.frontend.source import from_jit
        from syncopy.passes import transform
        from syncopy.schedule import from_dict

        op = self.op
        writes = from_dict({"pattern": "reduce_scatter", "kernel": op.local.fn.__name__, "tensor": output, "dim": 0,
                            "chunks_per_rank": 1, "order": "ring"})
        try:
            t = transform(from_jit(op.local), writes)
        except (InferenceError, KernelError):
            return None
        # Only a probe that reports exactly the rows written may refuse a launch: one whose bound left
        # out a mask (clamped to the tensor, which has no end here) or counts every chunk (a helper it
        # cannot follow) would report rows the kernel never writes.
        if any(a.clamped or a.every for g in t.binding.groups for a in g.accesses):
            return None
        probe = emit.load(t, op.local.fn.__globals__)[1]
        return (probe, t.binding.descriptors) if probe is not None else None

    def syncopy_args(self, ctx: Context, order: torch.Tensor, trace_buf: torch.Tensor, table: bool | None = None) -> dict:
        """The arguments the passes added to the kernel: the context and signal pad, the tile order
        table (`table`: whether the kernel reads it; default, where a probe made one), the trace buffer,
        and a pipeline variant's link contexts and signal pads."""
        built = self.build()
        if table is None:
            table = built.probe is not None
        extra = {"syncopy_ctx": ctx.ctx, "syncopy_signals": ctx.signals, "syncopy_order": order,
                 "syncopy_trace": trace_buf, "SYNCOPY_TRACE": self.op.trace, "SYNCOPY_TABLE": table}
        if built.transformed.binding.descriptors:
            extra[ASYNC_PROXY_FLAG] = has_async_proxy(ctx.ctx.device)
        extra.update(self.op.link_args)  # a pipeline's variant: its links' contexts and signal pads
        return extra

    def run(self, grid, call_args: dict, ctx: Context, order: torch.Tensor, trace_buf: torch.Tensor, options: dict,
            transfer) -> tuple[float, float]:
        """The fused kernel, then the transfer's join (whatever the kernel raised); (start, end) in
        seconds from the launch's start, for the trace."""
        fused = self.build().fused
        k0 = time.perf_counter() - ctx.t0
        try:
            fused[grid](**call_args, **self.syncopy_args(ctx, order, trace_buf), **options)
        except Exception as exc:
            raise_interpreter_limit(exc, self.build().transformed.source)
            raise
        finally:
            k1 = time.perf_counter() - ctx.t0
            if transfer is not None:
                transfer.join()
        return k0, k1
