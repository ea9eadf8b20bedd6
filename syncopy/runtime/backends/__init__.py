"""Backends move chunks and raise their signals. One interface: `start(ctx, epoch) -> Transfer`."""
from __future__ import annotations

from syncopy.errors import LaunchError


def select(name: str, device_type: str):
    """The backend class for `name` ('auto' picks by the tensor's device)."""
    if name == "auto":
        name = "gloo" if device_type == "cpu" else "nccl"
    if name == "gloo":
        if device_type != "cpu":
            raise LaunchError(f"the gloo backend runs on CPU tensors, got {device_type} tensors; use backend='nccl' or 'p2p'")
        from syncopy.runtime.backends.gloo import GlooBackend

        return GlooBackend
    if name in ("nccl", "p2p"):
        raise LaunchError(f"the {name} backend is not available in this version; run on CPU tensors with backend='gloo'")
    raise LaunchError(f"unknown backend '{name}'; use auto, gloo, nccl or p2p")
