"""Two interpreted kernels at once in one process, one per thread (CPU ranks, under TRITON_INTERPRET=1).

Triton's interpreter keeps two things per process: the program index it is running (on one
`InterpreterBuilder`) and its patches of triton.language (applied when a grid starts, undone when
it ends). So a second kernel started on another thread would read the first one's program ids, and
the first one to end would undo the patches under the other. `enable()` makes the index a property
of the thread and keeps the patches while any grid runs (applied by the first, undone by the last),
so that a pipeline's reader can run on a side thread beside its writer (runtime/pipeline/__init__.py,
"Streams"), its tiles waiting on flags the writer's tiles raise, as two streams do on a GPU.

Python threads take turns under the GIL, so the two kernels interleave rather than run in
parallel; what is real is the order: a reader's tile starts as soon as its chunks' flags are up,
not after the writer's last tile.

`supported()` is False where the interpreter's internals differ from what this expects (another
Triton version); the pipeline then runs its operators in order, as before.

Limits: while any grid runs, triton.language stays patched for every thread of the process (as it
is for the thread running a grid without this), so a `triton.compile` on a third thread in that
window would see the interpreter's builtins; and `enable()` is meant to be called while no grid
runs (the pipeline calls it before its first side-by-side launch).
"""
from __future__ import annotations

import threading

_state = threading.local()
_lock = threading.Lock()
_enabled = False
_active = 0  # grids running, over all threads
_scopes: list = []  # the patch scopes of the grids that started since no grid ran, in order; undone when the last ends


def _interpreter():
    from triton.runtime import interpreter

    return interpreter


def supported() -> bool:
    try:
        interp = _interpreter()
    except Exception:
        return False
    builder = getattr(interp, "interpreter_builder", None)
    return (builder is not None and hasattr(interp, "_patch_lang") and hasattr(interp, "GridExecutor")
            and hasattr(type(builder), "set_grid_idx") and hasattr(type(builder), "set_grid_dim"))


class _PerThread:
    """`grid_idx` / `grid_dim` of the interpreter's builder, one value per thread."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        return getattr(_state, self.name, None)

    def __set__(self, obj, value):
        setattr(_state, self.name, value)


class _HeldScope:
    """What GridExecutor gets back from `_patch_lang`: nothing to undo now; the grid's patches are
    undone with every other grid's once no grid runs (`_grid` below)."""

    def restore(self) -> None:
        pass


def enable() -> bool:
    """Make the interpreter safe for one kernel per thread (once per process); False if unsupported.

    Two call sites patch triton.language: a grid (GridExecutor.__call__, which undoes its patches
    when it ends) and a device-function call inside a program (which patches again and keeps nothing
    to undo). The grid's patches are kept in the order they were made and undone, last first, once
    no grid of any thread runs; a device-function call patches as before."""
    global _enabled
    with _lock:
        if _enabled:
            return True
        if not supported():
            return False
        interp = _interpreter()
        builder = interp.interpreter_builder
        cls = type(builder)
        threaded = type(f"{cls.__name__}PerThread", (cls,), {"grid_idx": _PerThread("grid_idx"), "grid_dim": _PerThread("grid_dim")})
        builder.__class__ = threaded
        patch = interp._patch_lang
        run_grid = interp.GridExecutor.__call__

        def patch_lang(fn):
            if not getattr(_state, "grid_starting", False):
                return patch(fn)  # a device function's call: patched again, nothing kept
            _state.grid_starting = False
            with _lock:
                _scopes.append(patch(fn))
            return _HeldScope()

        def grid(self, *args, **kwargs):
            global _active
            with _lock:
                _active += 1
            _state.grid_starting = True
            try:
                return run_grid(self, *args, **kwargs)
            finally:
                _state.grid_starting = False
                with _lock:
                    _active -= 1
                    if _active == 0:
                        while _scopes:
                            _scopes.pop().restore()

        interp._patch_lang = patch_lang
        interp.GridExecutor.__call__ = grid
        _enabled = True
        return True
