"""Frontend: find the kernel (libcst) and infer how its programs map to chunks of the tensor."""
from syncopy.frontend.infer import TensorBinding
from syncopy.frontend.source import KernelSource, find_kernel, from_file, from_jit

__all__ = ["KernelSource", "find_kernel", "from_file", "from_jit", "TensorBinding"]
