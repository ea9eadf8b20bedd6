"""Backends move chunks and raise their signals. One interface, one file each:

    Backend(group, timeout_s, link, faults)
      .group                         gloo group of the same ranks (control plane; control.py)
      .z_fastest                     programs run z fastest (the interpreter) or x fastest (GPUs)
      .local(ctx, shard)             own shard into the gathered buffer, own flags up
      .start(ctx, epoch)             consumer patterns -> Transfer (.join(), .errors, .lost)
      .start_reduce(ctx, out, epoch) producer patterns -> ReduceTransfer (.join(), .errors, .lost, .final)
      .check_grid(programs, persistent, kernel, device)   refuse a grid the backend cannot serve

| backend | tensors        | chunks move by                                 | a flag rises by                          |
| ------- | -------------- | ---------------------------------------------- | ---------------------------------------- |
| gloo    | CPU            | gloo isend/irecv on background threads         | the receive thread's store               |
| p2p     | CUDA, one node | copy-engine puts into peers' buffers (CUDA IPC) | a copy of the epoch after the data, same stream |
| nccl    | CUDA           | NCCL send/recv on a high-priority stream       | a copy of the epoch after the recv, same stream |

`auto` picks gloo for CPU tensors, p2p when every rank of the group runs on one host and every GPU of
the group can reach every other by peer access (p2p.unreachable_peers), nccl otherwise.
"""
from __future__ import annotations

from syncopy.errors import LaunchError

NAMES = ("gloo", "p2p", "nccl")


def _should_use_p2p(device_type: str, single_node: bool | None, peer_access: bool | None = True) -> bool:
    # CUDA tensors only: p2p moves them with the GPUs' copy engines.
    # Every rank on one host: CUDA IPC maps another process's memory only within a node.
    # Every GPU reaches every other (cudaDeviceCanAccessPeer): p2p's copies and stream writes go
    #   straight into the peers' memory; without peer access they would fault.
    # Unknown layout or access (None): nccl, which is correct anywhere.
    return device_type == "cuda" and single_node is True and peer_access is True


def resolve(name: str, device_type: str, single_node: bool | None = None, peer_access: bool | None = True) -> str:
    """The backend name `name` stands for ('auto' picks by the tensors' device and, on CUDA, by
    whether the group's ranks share one node and their GPUs reach each other)."""
    if name != "auto" and name not in NAMES:
        raise LaunchError(f"unknown backend '{name}'; use auto, {', '.join(NAMES)}")
    if name != "auto":
        return name
    if device_type == "cpu":
        return "gloo"
    return "p2p" if _should_use_p2p(device_type, single_node, peer_access) else "nccl"


def select(name: str, device_type: str, single_node: bool | None = None):
    """The backend class for `name` and tensors on `device_type` (see `resolve` for 'auto')."""
    name = resolve(name, device_type, single_node)
    if name == "gloo":
        if device_type != "cpu":
            raise LaunchError(f"the gloo backend runs on CPU tensors, got {device_type} tensors; use backend='nccl', 'p2p' or 'auto'")
        from syncopy.runtime.transport.backends.gloo import GlooBackend

        return GlooBackend
    if device_type != "cuda":
        raise LaunchError(f"the {name} backend moves CUDA tensors, got {device_type} tensors; use backend='gloo' (or 'auto') for CPU tensors")
    if name == "p2p":
        from syncopy.runtime.transport.backends.p2p import P2PBackend

        return P2PBackend
    from syncopy.runtime.transport.backends.nccl import NcclBackend

    return NcclBackend


def verify_chunks(backend, on: bool) -> None:
    """Turn on chunk checksums (verify_chunks=True) for `backend`; refused where the backend has none,
    rather than a check that silently never runs."""
    if not on:
        return
    if not hasattr(type(backend), "verify_chunks"):
        raise LaunchError(f"verify_chunks=True checks chunks on the gloo backend (CPU tensors) only, not {backend.name}; "
                          "drop verify_chunks on GPUs")
    backend.verify_chunks = True


def backend_for(name: str, device_type: str, group, device=None) -> str:
    """`resolve` for a process group: for 'auto' on CUDA, asks where the ranks run and, on one node,
    whether their GPUs reach each other (collective the first time for each group, so every rank
    must call it, as every launch does). `device`: this rank's GPU (default: the current one)."""
    single_node, peer_access = None, None
    if name == "auto" and device_type == "cuda":
        from syncopy.runtime.transport.backends.control import on_one_node

        single_node = on_one_node(group)
        if single_node:
            import torch

            from syncopy.runtime.transport.backends.p2p import peers_reachable

            peer_access = peers_reachable(group, device if device is not None else torch.device("cuda", torch.cuda.current_device()))
    return resolve(name, device_type, single_node, peer_access)


def refuse_listed(schedule, backend: str) -> None:
    """Several communicated tensors (`tensor: [K, V]`) move on the gloo backend and the thread world
    only so far: every other mover copies one buffer, and would hand the kernel the other tensors'
    shards ungathered."""
    if len(schedule.tensors) > 1:
        raise LaunchError(f"several communicated tensors ({', '.join(schedule.tensors)}) move on the gloo backend and the thread "
                          f"world only so far, not {backend}; list one tensor, or run on CPU ranks (gloo)")
