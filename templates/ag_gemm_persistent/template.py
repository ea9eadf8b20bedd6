"""ag_gemm_persistent: C = all_gather(A) @ B with a persistent tensor-descriptor GEMM; shape M,N,K
with M the rows of A per rank. One program per SM on a GPU (each loops over tiles), a few on CPU."""
import torch
import triton

from syncopy.templates import all_gather_rows, matmul_operands, refusals_told, world_size

DEFAULT_SHAPE = (96, 64, 64)
TOLERANCE = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 6e-2}
META = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=4)
CPU_PROGRAMS = 3  # under the interpreter: fewer programs than tiles, so each one loops


def programs(device: torch.device, n_tiles: int, backend: str = "p2p", ranks_per_device: int = 1) -> int:
    """Persistent grid: one program per SM the backend leaves to the kernel (all of them with the copy
    engines; nccl keeps some for its own kernels, see syncopy.runtime.streams.occupancy), capped by the tiles;
    on a thread world its ranks share the GPU's SMs."""
    if device.type == "cuda":
        from syncopy.runtime.streams import occupancy

        return occupancy.programs(device, backend, n_tiles, ranks_per_device)
    return max(1, min(n_tiles, CPU_PROGRAMS))


def inputs(rank, world, shape, dtype, seed=0):
    rows, n, k = shape
    a = torch.randn(rows, k, generator=torch.Generator().manual_seed(seed * 1000 + rank)).to(dtype)
    b = torch.randn(k, n, generator=torch.Generator().manual_seed(seed)).to(dtype)
    return {"a": a, "b": b}


@refusals_told
def launch(fused, a, b, group=None, **meta):
    """C = all_gather(a) @ b, fused (a persistent launch: the grid is the number of programs)."""
    meta = {**META, **meta}
    world = world_size(group)
    matmul_operands("ag_gemm_persistent", a, b)
    m, k = a.shape[0] * world, a.shape[1]
    n = b.shape[1]
    c = torch.empty(m, n, dtype=a.dtype, device=a.device)
    backend = fused.backend_for(a.device, group) if world > 1 else "p2p"
    p = programs(a.device, triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]), backend,
                 world if backend == "threads" else 1)
    fused[(p,)](a, b, c, m, n, k, **meta, NUM_SMS=p, group=group)
    return c


def reference(a, b, group=None):
    return (all_gather_rows(a, group).float() @ b.float()).to(a.dtype)


# Types for `syncopy compile ag_gemm_persistent` (fp16 operands, row-major, an H100's 132 SMs).
SIGNATURE = {"A": "*fp16", "B": "*fp16", "C": "*fp16", "M": "i32", "N": "i32", "K": "i32"}
CONSTEXPRS = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, NUM_SMS=132)
