"""Occupancy shaping: how many programs a fused kernel may launch so that a spinning tile can never
starve the transfer it waits for.

A tile that waits holds its SM while it spins. The copy-engine backends (p2p, the loopback world)
need no SM to deliver a chunk, so any grid is safe there. NCCL moves data with kernels: if waiting
tiles sat on every SM, NCCL's kernel for the chunk they wait for could not be scheduled, and the
launch would stall until the bounded waits expire (SyncopyTimeout, never a hang, but no result).

    SMs    | 0 1 2 ...                         S-R-1 | S-R ... S-1 |
    nccl   | fused kernel: at most S-R programs       | NCCL's CTAs |   (R = reserved_sms("nccl"))

The rule on nccl:
- the fused kernel launches at most S - R programs (`programs()`): a program lives on one SM, so R
  SMs never hold one; the persistent template sizes its grid this way;
- NCCL's communicator is created with at most R CTAs per kernel (`ncclConfig_t.maxCTAs`, see
  backends/nccl.py), so a whole NCCL kernel fits in the SMs left free;
- a grid with more programs is refused (`check_grid`) with the fix: a persistent kernel, or p2p.

Padding shared memory per block (the other classic lever) limits how many blocks share an SM, not
how many SMs a grid touches: the block scheduler would still put a spinning block on every SM. A
non-persistent grid larger than S - R could only be made safe by knowing that NCCL's blocks fit
beside the kernel's on some SM, which depends on registers and shared memory that Triton and NCCL
choose; we refuse it instead of guessing.
"""
from __future__ import annotations

import os

from syncopy.errors import LaunchError

#: SMs left to NCCL when neither SYNCOPY_NCCL_SMS nor NCCL_MAX_NCHANNELS says otherwise: enough
#: channels for a send and a receive at NVLink speed, 6% of an H100's 132 SMs.
DEFAULT_NCCL_SMS = 8


def reserved_sms(backend: str) -> int:
    """SMs a fused kernel leaves free for `backend`'s transfers (0 for the copy-engine backends).

    nccl: $SYNCOPY_NCCL_SMS, else $NCCL_MAX_NCHANNELS (NCCL runs one CTA per channel), else
    DEFAULT_NCCL_SMS.
    """
    if backend != "nccl":
        return 0
    for var in ("SYNCOPY_NCCL_SMS", "NCCL_MAX_NCHANNELS"):
        value = os.environ.get(var, "").strip()
        if value:
            try:
                n = int(value)
            except ValueError:
                raise LaunchError(f"${var} is '{value}'; set it to a number of SMs (a positive integer)") from None
            if n < 1:
                raise LaunchError(f"${var} is {n}; NCCL needs at least one SM, set it to 1 or more")
            return n
    return DEFAULT_NCCL_SMS


def sm_count(device) -> int:
    """Streaming multiprocessors of a CUDA device."""
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count


def programs_for(sms: int, backend: str, n_tiles: int | None = None, ranks_per_device: int = 1) -> int:
    """Programs a persistent kernel launches on a device with `sms` SMs: one per SM the backend leaves
    to the kernel, never more than there are tiles, at least one. Ranks whose kernels run at once on
    one device (the thread world: `ranks_per_device` of them) share its SMs. (Processes that share one
    GPU need no share of their own: p2p delivers their chunks before either kernel starts, see
    backends/p2p.py.)"""
    p = (sms - reserved_sms(backend)) // max(1, ranks_per_device)
    if p < 1:
        raise LaunchError(f"the {backend} backend reserves {reserved_sms(backend)} SMs but the device has only {sms}; "
                          "lower $SYNCOPY_NCCL_SMS")
    return max(1, min(p, n_tiles) if n_tiles else p)


def programs(device, backend: str, n_tiles: int | None = None, ranks_per_device: int = 1) -> int:
    """`programs_for` the SM count of CUDA `device`. Use it as a persistent kernel's NUM_SMS:

        p = occupancy.programs(a.device, fused.backend_for(a.device, group), n_tiles)
        fused[(p,)](..., NUM_SMS=p, group=group)
    """
    return programs_for(sm_count(device), backend, n_tiles, ranks_per_device)


def check_grid(n_programs: int, sms: int, backend: str, persistent: bool, kernel: str, ctas_per_program: int = 1) -> None:
    """Refuse a launch whose waiting programs could occupy the SMs `backend` needs (see module doc).
    A program of `ctas_per_program` CTAs (the `num_ctas` launch option) holds that many SMs."""
    reserved = reserved_sms(backend)
    limit = sms - reserved
    if reserved == 0 or n_programs * ctas_per_program <= limit:
        return  # nothing else needs an SM, or the grid leaves the reserved ones free
    if ctas_per_program > 1:
        raise LaunchError(
            f"kernel '{kernel}' launches {n_programs} programs of num_ctas={ctas_per_program} CTAs ({n_programs * ctas_per_program} "
            f"CTAs) on a GPU with {sms} SMs; on the {backend} backend its waiting tiles could occupy every SM and starve the "
            f"{backend} kernels that deliver their chunks ({reserved} SMs are kept for them); launch at most {limit} CTAs in all "
            f"(programs x num_ctas), or use backend='p2p' on one node (copy engines, no SM)")
    what = "persistent kernel" if persistent else "kernel"
    fix = (f"launch at most {limit} programs (NUM_SMS = syncopy.runtime.streams.occupancy.programs(device, '{backend}'))"
           if persistent else
           f"make it a persistent kernel of at most {limit} programs (see the ag_gemm_persistent template; "
           f"syncopy.runtime.streams.occupancy.programs(device, '{backend}') gives the count)")
    raise LaunchError(
        f"{what} '{kernel}' launches {n_programs} programs on a GPU with {sms} SMs; on the {backend} backend its waiting "
        f"tiles could occupy every SM and starve the {backend} kernels that deliver their chunks ({reserved} "
        f"SMs are kept for them); {fix}, or use backend='p2p' on one node (copy engines, no SM)"
    )
