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

Other NCCL communicators. R covers more than syncopy's own communicator wherever the process has
another NCCL communicator (`other_nccl_communicators`): DDP's or FSDP's all-reduces on the default
group, or the user's own group, on which rounds run where the default group is bound to a device
(backends/nccl.py, `nccl_group`). syncopy does not cap those: one of their kernels may take up to
NCCL_MAX_CTAS (or NCCL_MAX_NCHANNELS) CTAs where set, else NCCL's compiled maximum of channels
(MAXCHANNELS: 64 in current NCCL, 32 in old releases; the larger is assumed). R is then the larger of
syncopy's share and that cap, not their sum: NCCL runs the kernels of two communicators of one device
one after the other only where NCCL_LAUNCH_ORDER_IMPLICIT=1 (NCCL 2.26+; backends/nccl.py asks for it);
without it NCCL documents that concurrent work on two communicators can deadlock, which no
reservation prevents. Setting NCCL_MAX_CTAS (every communicator of the process) gives the fused
kernel its SMs back.

Padding shared memory per block (the other classic lever) limits how many blocks share an SM, not
how many SMs a grid touches: the block scheduler would still put a spinning block on every SM. A
non-persistent grid larger than S - R could only be made safe by knowing that NCCL's blocks fit
beside the kernel's on some SM, which depends on registers and shared memory that Triton and NCCL
choose; we refuse it instead of guessing.
"""
from __future__ import annotations

import os
import weakref

from syncopy.errors import LaunchError

#: SMs left to NCCL when neither SYNCOPY_NCCL_SMS nor NCCL_MAX_NCHANNELS says otherwise: enough
#: channels for a send and a receive at NVLink speed, 6% of an H100's 132 SMs.
DEFAULT_NCCL_SMS = 8

#: CTAs one kernel of an NCCL communicator nobody capped may take: NCCL's MAXCHANNELS (one CTA per
#: channel; src/include/device.h: 64 in current NCCL, 32 in old releases).
NCCL_MAX_CTAS_DEFAULT = 64

_own = weakref.WeakSet()  # NCCL communicators syncopy made (backends/nccl.py), capped to own_sms()
_others: dict = {"key": None, "groups": []}  # other_nccl_communicators, found again when torch's table changes


def _env_sms(var: str) -> int | None:
    value = os.environ.get(var, "").strip()
    if not value:
        return None
    try:
        n = int(value)
    except ValueError:
        raise LaunchError(f"${var} is '{value}'; set it to a number of SMs (a positive integer)") from None
    if n < 1:
        raise LaunchError(f"${var} is {n}; NCCL needs at least one SM, set it to 1 or more")
    return n


def nccl_env_cap() -> int | None:
    """CTAs per kernel NCCL allows every communicator of the process, by the environment
    ($NCCL_MAX_CTAS, else $NCCL_MAX_NCHANNELS: one CTA per channel); None where neither is set."""
    for var in ("NCCL_MAX_CTAS", "NCCL_MAX_NCHANNELS"):
        n = _env_sms(var)
        if n is not None:
            return n
    return None


def own_sms() -> int:
    """CTAs per kernel of syncopy's own NCCL communicator (its ncclConfig_t.maxCTAs): $SYNCOPY_NCCL_SMS,
    or the environment's cap for every communicator where that is larger (NCCL applies it over the
    config), else DEFAULT_NCCL_SMS."""
    ours, env = _env_sms("SYNCOPY_NCCL_SMS"), nccl_env_cap()
    if ours is None and env is None:
        return DEFAULT_NCCL_SMS
    return max(n for n in (ours, env) if n is not None)


def uncapped_sms() -> int:
    """CTAs per kernel of an NCCL communicator syncopy did not make (module doc, "Other NCCL communicators")."""
    env = nccl_env_cap()
    return env if env is not None else NCCL_MAX_CTAS_DEFAULT


def mark_own(communicator) -> None:
    """`communicator` is syncopy's (created capped to own_sms()): not another communicator."""
    _own.add(communicator)
    _others["key"] = None


def other_nccl_communicators() -> list:
    """This process's NCCL process groups that syncopy did not make (DDP's, FSDP's, the user's), from
    torch's table of groups; found again only when that table changes (it is asked at every launch)."""
    try:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            return []
        table = dist.distributed_c10d._world.pg_map
        key = (tuple(map(id, table)), len(_own))
        if key != _others["key"]:
            groups = []
            for pg in list(table):
                if pg in _own:
                    continue
                try:
                    name = str(dist.get_backend(pg))
                except Exception:  # a group torch is tearing down
                    continue
                if "nccl" in name.lower():
                    groups.append(pg)
            _others.update(key=key, groups=groups)
        return list(_others["groups"])
    except AttributeError:  # another torch's private table: nothing known of other communicators
        return []


def reserved_sms(backend: str) -> int:
    """SMs a fused kernel leaves free for `backend`'s transfers (0 for the copy-engine backends).

    nccl: syncopy's communicator's share (`own_sms`); where the process has another NCCL
    communicator (`other_nccl_communicators`), at least what one of its kernels may take
    (`uncapped_sms`), see the module doc."""
    if backend != "nccl":
        return 0
    if other_nccl_communicators():
        return max(own_sms(), uncapped_sms())
    return own_sms()


def reserved_text(backend: str) -> str:
    """What the SMs `reserved_sms(backend)` keeps free are for, and how to give some back."""
    reserved = reserved_sms(backend)
    if backend == "nccl" and other_nccl_communicators() and uncapped_sms() > own_sms():
        return (f"{reserved} SMs are kept for them: another NCCL communicator of this process (DDP's, FSDP's or the "
                f"process group's own) may take {uncapped_sms()} CTAs per kernel; NCCL_MAX_CTAS set lower caps it")
    return f"{reserved} SMs are kept for them"


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
                          "lower $SYNCOPY_NCCL_SMS (and $NCCL_MAX_CTAS where other NCCL communicators run beside)")
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
            f"{backend} kernels that deliver their chunks ({reserved_text(backend)}); launch at most {limit} CTAs in all "
            f"(programs x num_ctas), or use backend='p2p' on one node (copy engines, no SM)")
    what = "persistent kernel" if persistent else "kernel"
    fix = (f"launch at most {limit} programs (NUM_SMS = syncopy.runtime.streams.occupancy.programs(device, '{backend}'))"
           if persistent else
           f"make it a persistent kernel of at most {limit} programs (see the ag_gemm_persistent template; "
           f"syncopy.runtime.streams.occupancy.programs(device, '{backend}') gives the count)")
    raise LaunchError(
        f"{what} '{kernel}' launches {n_programs} programs on a GPU with {sms} SMs; on the {backend} backend its waiting "
        f"tiles could occupy every SM and starve the {backend} kernels that deliver their chunks "
        f"({reserved_text(backend)}); {fix}, or use backend='p2p' on one node (copy engines, no SM)"
    )
