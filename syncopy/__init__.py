"""syncopy: fine-grained overlap of communication and computation inside one fused Triton kernel."""
from pathlib import Path as _Path

from syncopy import _checkout
from syncopy.errors import (
    InferenceError,
    KernelError,
    LaunchError,
    ScheduleError,
    SyncopyCorruptChunk,
    SyncopyError,
    SyncopyFallbackWarning,
    SyncopyUncheckedWarning,
    SyncopyReadError,
    SyncopyTimeout,
)
from syncopy.schedule import Schedule, load_schedule

from syncopy._version import __version__  # noqa: F401 (syncopy.__version__)

_checkout.install(_Path(__file__).parent)  # syncopy.templates from the repository's templates/

from syncopy import _interpret  # noqa: E402

_interpret.choose()  # no GPU and TRITON_INTERPRET unset: Triton's interpreter (one line on stderr)


def __getattr__(name):
    # The decorator pulls in torch and triton; keep `import syncopy` (and the CLI's check/schema) light.
    if name in ("overlap", "FusedKernel", "load"):
        from syncopy import api

        return getattr(api, name)
    if name in ("pipeline", "Pipeline"):
        from syncopy.runtime import pipeline

        return getattr(pipeline, name)
    if name == "verify":
        from syncopy.verifier import verify

        return verify
    if name == "templates":  # `syncopy.templates.ag_gemm(...)` after a plain `import syncopy`
        import importlib

        return importlib.import_module("syncopy.templates")
    raise AttributeError(name)


__all__ = [
    "overlap",
    "pipeline",
    "Pipeline",
    "load",
    "FusedKernel",
    "templates",
    "verify",
    "Schedule",
    "load_schedule",
    "SyncopyError",
    "ScheduleError",
    "KernelError",
    "InferenceError",
    "LaunchError",
    "SyncopyTimeout",
    "SyncopyCorruptChunk",
    "SyncopyReadError",
    "SyncopyFallbackWarning",
    "SyncopyUncheckedWarning",
]
