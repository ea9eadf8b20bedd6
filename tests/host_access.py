"""A test hook for "a warm launch reads no device word on the host": while open, the torch.Tensor
methods named are wrapped so that a call on a tensor whose storage is one of `storages` records its
name in `seen` (the kernels' own accesses do not go through them). `accept(name, args)` narrows
what counts (e.g. only `t[i] = v` with an integer index)."""
from __future__ import annotations

import torch

#: Host reads of a tensor's values (on a GPU each one waits for the device).
READS = ("tolist", "item", "__int__", "__float__", "__bool__", "numpy", "__index__")
#: In-place writes from the host.
WRITES = ("__setitem__", "copy_", "fill_", "zero_")


class CountingHostAccess:
    def __init__(self, storages: set, seen: list, names=READS + WRITES, accept=None):
        self.storages, self.seen, self.names, self.saved = storages, seen, tuple(names), {}
        self.accept = accept or (lambda name, args: True)

    def __enter__(self):
        for name in self.names:
            original = self.saved[name] = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name, self._counted(name, original))
        return self

    def _counted(self, name, original):
        storages, seen, accept = self.storages, self.seen, self.accept

        def counted(t, *args, **kwargs):
            if t.untyped_storage().data_ptr() in storages and accept(name, args):
                seen.append(name)
            return original(t, *args, **kwargs)
        return counted

    def __exit__(self, *exc):
        for name, original in self.saved.items():
            setattr(torch.Tensor, name, original)
        return False
