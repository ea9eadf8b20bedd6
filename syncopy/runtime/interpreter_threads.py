"""Two interpreted kernels at once in one process, one per thread (CPU ranks, under TRITON_INTERPRET=1).

Triton's interpreter keeps two things per process: the program index it is running (on one
`InterpreterBuilder`) and its patches of triton.language (applied when a grid starts, undone when
it ends). So a second kernel started on another thread would read the first one's program ids, and
the first one to end would undo the patches under the other. `enable()` makes the index a property
of the thread and keeps the patches while any grid runs (applied by the first, undone by the last),
so that a pipeline's reader can run on a side thread beside its writer (runtime/pipeline.py,
"Streams"), its tiles waiting on flags the writer's tiles raise, as two streams do on a GPU.

Python threads take turns under the GIL, so the two kernels interleave rather than run in
parallel; what is real is the order: a reader's tile starts as soon as its chunks' flags are up,
not after the writer's last tile.

`supported()` is False where the interpreter's internals differ from what this expects (another
Triton version); the pipeline then runs its operators in order, as before.
"""
from __future__ import annotations

import threading

_state = threading.local()
_lock = threading.Lock()
_enabled = False
_active = 0  # grids running, over all threads
_scopes: list = []  # the patch scopes of the grids that ran since no grid ran, undone when the last grid ends


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


class _SharedScope:
    """What GridExecutor gets back from `_patch_lang`: its restore() ends this grid's hold on the patches."""

    def restore(self) -> None:
        global _active
        with _lock:
            _active -= 1
            if _active == 0:
                while _scopes:
                    _scopes.pop().restore()


def enable() -> bool:
    """Make the interpreter safe for one kernel per thread (once per process); False if unsupported."""
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

        def shared_patch(fn):
            global _active
            with _lock:
                # Patched again by every grid (another kernel may see other modules of triton.language);
                # every scope is undone together, last first, once no grid runs.
                _scopes.append(patch(fn))
                _active += 1
            return _SharedScope()

        interp._patch_lang = shared_patch
        _enabled = True
        return True
