"""Templates: ready kernel + schedule pairs. A template is a folder (kernel.py, schedule.yaml,
README.txt, template.py); adding one never means editing a list here.

    syncopy.templates.ag_gemm(a_shard, b, group=pg)      # C = all_gather(a_shard) @ b
    syncopy.templates.ag_rmsnorm(x_shard, w, group=pg)   # Y = rmsnorm(all_gather(x_shard)) * w
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from syncopy.errors import SyncopyError


@dataclass(frozen=True)
class Template:
    name: str
    description: str

    @property
    def module(self):
        return importlib.import_module(f"syncopy.templates.{self.name}.template")

    def schedule(self, **overrides):
        """The template's schedule, with `overrides` (None: keep) validated like the file's own keys."""
        from syncopy.schedule import from_dict, load_schedule

        s = load_schedule(str(resources.files("syncopy.templates") / self.name / "schedule.yaml"))
        update = {k: v for k, v in overrides.items() if v is not None}
        return from_dict({**s.model_dump(exclude_none=True), **update}) if update else s

    def kernel(self):
        s = self.schedule()
        return getattr(importlib.import_module(f"syncopy.templates.{self.name}.kernel"), s.kernel)

    def fused(self, **options):
        import syncopy

        sched = self.schedule(chunks_per_rank=options.pop("chunks_per_rank", None), order=options.pop("order", None))
        return syncopy.overlap(sched, **options)(self.kernel())


def all_gather_rows(x, group=None):
    """The reference all-gather along dim 0 (`all_gather_into_tensor`, quiet about its rename)."""
    import warnings

    import torch
    import torch.distributed as dist

    full = torch.empty(x.shape[0] * dist.get_world_size(group), *x.shape[1:], dtype=x.dtype, device=x.device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        dist.all_gather_into_tensor(full, x.contiguous(), group=group)
    return full


def available() -> dict[str, Template]:
    """Every folder under syncopy/templates with a schedule.yaml, by name."""
    root = resources.files("syncopy.templates")
    out = {}
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.is_dir() and (entry / "schedule.yaml").is_file():
            readme = entry / "README.txt"
            out[entry.name] = Template(entry.name, readme.read_text().strip() if readme.is_file() else "")
    return out


def get(name: str) -> Template:
    t = available()
    if name not in t:
        raise SyncopyError(f"unknown template '{name}'; the templates are {', '.join(t)}; run `syncopy templates` to list them")
    return t[name]


@lru_cache(maxsize=None)
def _fused(name: str, chunks_per_rank, order):
    return get(name).fused(chunks_per_rank=chunks_per_rank, order=order)


def _op(name: str):
    def op(*args, group=None, chunks_per_rank=None, order=None, **kwargs):
        return get(name).module.launch(_fused(name, chunks_per_rank, order), *args, group=group, **kwargs)

    op.__name__ = name
    op.__doc__ = get(name).module.launch.__doc__
    return op


def __getattr__(name: str):
    if name in available():
        return _op(name)
    raise AttributeError(name)
