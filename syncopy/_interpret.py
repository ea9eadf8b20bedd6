"""Triton's interpreter where no GPU can run a kernel: a newcomer who runs the README's example
outside `make` (which sets TRITON_INTERPRET=1) on a machine without a GPU would otherwise meet
Triton's "0 active drivers ([]). There should only be one." at the first launch.

At `import syncopy`, with TRITON_INTERPRET unset (any value, "0" included, is the user's choice and
left alone) and no GPU usable, syncopy sets TRITON_INTERPRET=1 and says so on one line of stderr,
when triton is not imported yet. Once it is, too late: triton.language's own @triton.jit helpers
(tl.zeros, ...) were decorated for a GPU and fail under the interpreter, so syncopy raises one line
saying what to set instead.

Deciding must not import torch or triton (`import syncopy` stays light): a loaded torch is asked
(`torch.cuda.is_available()`, Triton's own test), else an installed torch built without CUDA or ROCm
(its version.py, read as text) or a machine without GPU device nodes means no GPU."""
from __future__ import annotations

import os
import re
import sys
from importlib.util import find_spec

NOTE = ("syncopy: no GPU here and TRITON_INTERPRET is unset: set TRITON_INTERPRET=1, so Triton's interpreter runs "
        "the kernels on CPU tensors (set TRITON_INTERPRET=0 to keep Triton's own choice)")
TRITON_FIRST = ("no GPU here and TRITON_INTERPRET is unset, and triton was imported before syncopy without it: set "
                "TRITON_INTERPRET=1 in the environment (or import syncopy before triton) to run the kernels on CPU")
DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")  # NVIDIA, AMD ROCm, WSL


def gpu_usable() -> bool:
    """Could Triton find a GPU driver here? False only on cheap, certain signs that it cannot."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "cuda"):
        try:
            return bool(torch.cuda.is_available())
        except Exception:
            return True
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1") and not os.environ.get("HIP_VISIBLE_DEVICES"):
        return False
    if _torch_without_gpu_build():
        return False  # Triton asks torch, once it is loaded: a CPU build has no driver for it
    return any(os.path.exists(node) for node in DEVICE_NODES)


def _torch_without_gpu_build() -> bool:
    """Is the installed torch (not imported) built without CUDA and ROCm? Reads torch/version.py."""
    try:
        spec = find_spec("torch")
        folder = spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else None
        text = open(os.path.join(folder, "version.py")).read() if folder else ""
    except (OSError, ImportError, ValueError):
        return False
    builds = dict(re.findall(r"^(cuda|hip)\s*(?::[^=]*)?=\s*(.+?)\s*$", text, re.M))
    return set(builds) == {"cuda", "hip"} and builds["cuda"] == "None" and builds["hip"] == "None"


def choose(stderr=None) -> None:
    """Set TRITON_INTERPRET=1 where it is unset and no GPU is usable (see the module's text)."""
    if "TRITON_INTERPRET" in os.environ or gpu_usable():
        return
    if "triton" in sys.modules:
        from syncopy.errors import SyncopyError

        raise SyncopyError(TRITON_FIRST)
    os.environ["TRITON_INTERPRET"] = "1"
    print(NOTE, file=stderr or sys.stderr)
