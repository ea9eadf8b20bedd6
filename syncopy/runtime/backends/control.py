"""The control plane every backend shares: a gloo group with the ranks of the user's group (shape
checks, IPC handle exchange, barriers: small host messages, whatever moves the data), and where
those ranks run."""
from __future__ import annotations

import socket

import torch.distributed as dist

_groups: dict[tuple, object] = {}
_hosts: dict[tuple, list[str]] = {}
_devices: dict[tuple, int] = {}


def _key(group) -> tuple:
    # Keyed by the user's group object (kept alive in the value so its id is not reused): a group
    # re-created after a timeout gets a fresh transport on every rank, not the broken one.
    return (id(group), tuple(dist.get_process_group_ranks(group)))


def control_group(group) -> object:
    """A dedicated gloo group with the ranks of `group`, so our messages never interleave with the
    user's collectives (and a CUDA world needs no CPU backend of its own). Created on first use
    (collectively, like every launch)."""
    key = _key(group)
    if key not in _groups:
        _groups[key] = (group, dist.new_group(ranks=list(key[1]), backend="gloo"))
    return _groups[key][1]


def hosts(group) -> list[str]:
    """The host name of every rank of `group`, in group rank order (collective the first time)."""
    key = _key(group)
    if key not in _hosts:
        names: list = [None] * dist.get_world_size(group)
        if len(names) == 1:
            names = [socket.gethostname()]
        else:
            dist.all_gather_object(names, socket.gethostname(), group=control_group(group))
        _hosts[key] = names
    return _hosts[key]


def on_one_node(group) -> bool:
    """Do all ranks of `group` run on one host (so CUDA IPC can map their buffers)?"""
    return len(set(hosts(group))) == 1


def ranks_on_device(group, device) -> int:
    """How many ranks of `group` (this one included) run on this very GPU (collective the first
    time). One GPU may host several ranks (tests, emulation); p2p then delivers before launching."""
    import torch

    key = (*_key(group), str(device))
    if key not in _devices:
        props = torch.cuda.get_device_properties(device)
        mine = (socket.gethostname(), str(getattr(props, "uuid", "")) or f"cuda:{torch.device(device).index}")
        ids: list = [None] * dist.get_world_size(group)
        if len(ids) == 1:
            ids = [mine]
        else:
            dist.all_gather_object(ids, mine, group=control_group(group))
        _devices[key] = ids.count(mine)
    return _devices[key]
