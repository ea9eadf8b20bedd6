"""`syncopy run NAME --world N`: a template end to end on a CPU world, verified against torch.

Ranks are started with torch's own launcher (`torch.distributed.launcher.elastic_launch`, the
machinery behind torchrun); inside an existing torchrun world (RANK/WORLD_SIZE set) that world is used.

User mistakes are found in the parent before any rank starts where they can be (`check_arguments`).
What only a launch can find (a chunk count larger than a shard, say) is a SyncopyError in the ranks:
each writes its one line to a report folder and exits with USER_ERROR_EXIT, the launcher stops the
others, and the parent raises one SyncopyError naming the rank, instead of the launcher's traceback.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from syncopy.errors import SyncopyError

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
#: `syncopy run` moves CPU tensors: gloo is the only backend that does (auto picks it).
BACKENDS = ("auto", "gloo")
#: The exit status of a rank that stopped on a SyncopyError (its message is in the report folder).
USER_ERROR_EXIT = 3


def _rank_main(name, shape, dtype_name, chunks, order, iters, backend, report_dir=None):
    os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        return _rank_body(name, shape, dtype_name, chunks, order, iters, backend)
    except SyncopyError as exc:
        rank = os.environ.get("RANK", "?")
        if report_dir is None:  # a torchrun world: each process's own CLI prints its line
            raise SyncopyError(f"rank {rank}: {exc}") from None
        Path(report_dir, f"{rank}.txt").write_text(str(exc))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(USER_ERROR_EXIT)  # no traceback, no process-group teardown: the launcher stops the peers


def _rank_body(name, shape, dtype_name, chunks, order, iters, backend) -> dict:
    import torch
    import torch.distributed as dist

    from syncopy import templates

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, DTYPES[dtype_name])
    t = templates.get(name)
    mod = t.module
    fused = t.fused(chunks_per_rank=chunks, order=order, backend=backend, poison_receive=True)
    shape = tuple(shape) if shape else mod.DEFAULT_SHAPE
    worst, times, out, inp = 0.0, [], None, {}
    for it in range(iters):
        inp = mod.inputs(rank, world, shape, dtype, seed=it)
        start = time.perf_counter()
        out = mod.launch(fused, **inp)
        times.append(time.perf_counter() - start)
        ref = mod.reference(**inp)
        scale = max(1.0, ref.float().abs().max().item())
        err = (out.float() - ref.float()).abs().max().item() / scale
        worst = max(worst, err if err == err else float("inf"))
    resolution = fused.last_resolution
    return {"rank": rank, "max_err": worst, "ok": worst <= mod.TOLERANCE[dtype], "median_s": sorted(times)[len(times) // 2],
            "inputs": {k: tuple(v.shape) for k, v in inp.items() if isinstance(v, torch.Tensor)},
            "output": tuple(out.shape) if isinstance(out, torch.Tensor) else None,
            "planner": resolution.describe() if resolution is not None else None}


def check_arguments(name: str, world: int, shape, dtype: str, chunks, order, iters: int, backend: str) -> None:
    """Raise a one-line SyncopyError, naming the `syncopy run` option, for what is wrong before launch."""
    from syncopy import templates

    t = templates.get(name)  # unknown names fail here, before any process starts
    if world < 1:
        raise SyncopyError(f"--world {world}: a world has at least one rank; pass --world N with N >= 1")
    if iters < 1:
        raise SyncopyError(f"--iters {iters}: run the kernel at least once; pass --iters N with N >= 1")
    if dtype not in DTYPES:
        raise SyncopyError(f"--dtype {dtype}: unknown element type; use one of {', '.join(DTYPES)}")
    if backend not in BACKENDS:
        what = "moves CUDA tensors, but `syncopy run` uses CPU ranks" if backend in ("p2p", "nccl") else "unknown backend"
        raise SyncopyError(f"--backend {backend}: {what}; use {' or '.join(BACKENDS)}")
    if chunks is not None and chunks != "auto" and (isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1):
        raise SyncopyError(f"--chunks {chunks}: give a positive chunk count per rank, or auto")
    if isinstance(order, list) and sorted(order) != list(range(1, world)):
        example = ",".join(str(o) for o in range(1, world)) or "(none: a world of one rank has no peers)"
        raise SyncopyError(f"--order {','.join(map(str, order))}: list each peer offset 1..{world - 1} exactly once "
                           f"for --world {world} (e.g. {example}), or use a named order")
    if shape is not None:
        _check_shape(name, shape, t.module.DEFAULT_SHAPE)


def _check_shape(name: str, shape, default) -> None:
    # A template that ignores K says so with K = 0 in its default shape (ag_rmsnorm); there K may be 0.
    k_unused = default[2] == 0
    if len(shape) != 3 or min(shape[:2]) < 1 or shape[2] < (0 if k_unused else 1):
        text = ",".join(map(str, shape))
        if k_unused:
            raise SyncopyError(f"--shape {text}: give M and N of at least 1 (K is unused by {name}: 0 or more)")
        raise SyncopyError(f"--shape {text}: every dimension must be at least 1 (a zero-size problem checks nothing); give positive M,N,K")


def run(name: str, world: int, shape=None, dtype="fp32", chunks=None, order=None, iters=2, backend="auto") -> list[dict]:
    """Run template `name` on `world` CPU ranks (or the current torchrun world); per-rank results.

    Raises SyncopyError (one line) for bad arguments, before any rank starts, and for a rank that
    stopped on a SyncopyError (`rank R: message`).
    """
    check_arguments(name, world, shape, dtype, chunks, order, iters, backend)
    args = (name, shape, dtype, chunks, order, iters, backend)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return [_rank_main(*args)]
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    os.environ["TRITON_INTERPRET"] = "1"
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=world, run_id=f"syncopy-{os.getpid()}",
                          rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0, monitor_interval=0.1,
                          start_method="spawn")
    with tempfile.TemporaryDirectory(prefix="syncopy-run-") as report_dir, _launcher_log() as log:
        try:
            results = elastic_launch(config, _rank_main)(*args, report_dir)
        except ChildFailedError:
            reports = sorted(Path(report_dir).glob("*.txt"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1)
            if not reports:  # not a user mistake: show what the launcher saw
                log.replay()
                raise
            rank = reports[0].stem
            raise SyncopyError(f"rank {rank}: {reports[0].read_text()}") from None
    return [results[r] for r in sorted(results)]


class _Held(logging.Handler):
    """Keeps the launcher's log records; they are shown only when a rank failed for a reason of its own."""

    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)

    def replay(self):
        """Hand the records to the handlers above the held loggers (torch's own), as if never held."""
        for record in self.records:
            held = next(name for name in _LAUNCHER_LOGGERS if record.name == name or record.name.startswith(name + "."))
            logging.getLogger(held).parent.handle(record)


# torch's elastic agent logs a failed rank's exit (with the launcher's own traceback) at ERROR, and
# torch.multiprocessing warns as it stops the other ranks: for a user mistake that is noise around
# the one line we print, so their records are held back.
_LAUNCHER_LOGGERS = ("torch.distributed.elastic", "torch.multiprocessing")


@contextlib.contextmanager
def _launcher_log():
    held = _Held()
    loggers = [logging.getLogger(name) for name in _LAUNCHER_LOGGERS]
    saved = [(lg.handlers[:], lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.handlers[:] = [held]
        lg.propagate = False
    try:
        yield held
    finally:
        for lg, (handlers, propagate) in zip(loggers, saved):
            lg.handlers[:], lg.propagate = handlers, propagate
