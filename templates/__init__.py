"""Templates: ready kernel + schedule pairs. A template is a folder (kernel.py, schedule.yaml,
README.txt, template.py); adding one never means editing a list here.

    syncopy.templates.ag_gemm(a_shard, b, group=pg)      # C = all_gather(a_shard) @ b
    syncopy.templates.ag_rmsnorm(x_shard, w, group=pg)   # Y = rmsnorm(all_gather(x_shard)) * w
"""
from __future__ import annotations

import importlib
import sys
import threading
import types
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from syncopy.errors import SyncopyError


def __getattr__(name):
    # The collective the templates' references run: imported when a template asks for it, so that
    # listing the templates loads no torch.
    if name == "all_gather_rows":
        from syncopy.runtime.launch.reference import all_gather_rows

        return all_gather_rows
    raise AttributeError(f"module 'syncopy.templates' has no attribute {name!r}")


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

    @property
    def pipeline(self) -> bool:
        """Whether the template is several operators linked by a pipeline (its module makes them: `make_operator`).
        Read from template.py's source, not by importing it: listing the templates imports no torch or triton."""
        return "make_operator" in _top_level_names(self.name)

    def fused(self, **options):
        import syncopy

        if self.pipeline:
            return self.module.make_operator(**options)

        sched = self.schedule(chunks_per_rank=options.pop("chunks_per_rank", None), order=options.pop("order", None))
        return syncopy.overlap(sched, **options)(self.kernel())


@lru_cache(maxsize=None)
def _top_level_names(name: str) -> frozenset[str]:
    """The names template.py of template `name` defines at its top level (functions, classes, assignments, imports)."""
    import ast

    tree = ast.parse((resources.files("syncopy.templates") / name / "template.py").read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def world_size(group=None) -> int:
    """The number of ranks of a template launch's `group`: a torch.distributed group (None: the
    default one), or a thread world's RankGroup (syncopy.runtime.worlds.threads), which is not a process group."""
    import torch.distributed as dist

    if group is not None and not isinstance(group, dist.ProcessGroup) and hasattr(group, "size"):
        return group.size()
    return dist.get_world_size(group)


def rank_of(group=None) -> int:
    """This rank in a template launch's `group`: a torch.distributed group (None: the default one;
    0 where no process group is initialised), or a thread world's RankGroup (as `world_size`)."""
    import torch.distributed as dist

    if group is not None and not isinstance(group, dist.ProcessGroup) and hasattr(group, "rank"):
        return group.rank()
    return dist.get_rank(group) if dist.is_initialized() else 0


def refuse(template: str, message: str):
    """A template's launch refuses its arguments in one line naming them as the template calls them
    (`a`, `b`), not as its kernel does (`C`, the output the template allocates)."""
    from syncopy.errors import LaunchError

    raise LaunchError(f"syncopy.templates.{template}: {message}")


def matmul_operands(template: str, a, b, a_name: str = "a", b_name: str = "b") -> None:
    """`a @ b` can be taken: two matrices of one dtype whose inner sizes agree (a kernel would read past `b` otherwise)."""
    for name, t in ((a_name, a), (b_name, b)):
        if t.dim() != 2:
            refuse(template, f"{name} has {t.dim()} dimensions {list(t.shape)}; pass a matrix (2 dimensions)")
    if a.shape[1] != b.shape[0]:
        refuse(template, f"{a_name} has {a.shape[1]} columns but {b_name} has {b.shape[0]} rows; {a_name} @ {b_name} needs "
                         f"them equal: give {b_name} {a.shape[1]} rows or {a_name} {b.shape[0]} columns")
    if a.dtype != b.dtype:
        refuse(template, f"{a_name} is {_dtype(a)} but {b_name} is {_dtype(b)}; cast both to one dtype")


def _dtype(t) -> str:
    return str(t.dtype).removeprefix("torch.")


def refusals_told(launch):
    """A template's `launch(fused, ..., group=None, ...)` whose own checks' refusals (arguments that
    are no matrices, rows a world cannot share) are said to the peers as this rank's refusal of the
    launch (runtime/launch/agreement.py, guarded): they name this rank and its error, and the group's
    launches stay in step."""
    import functools

    @functools.wraps(launch)
    def told(fused, *args, group=None, **kwargs):
        from syncopy.runtime.launch import agreement

        with agreement.guarded(fused, group):
            return launch(fused, *args, group=group, **kwargs)

    return told


def same_on_every_rank(template: str, facts: dict, why: str):
    """A `with` block around a template's fused launch: its `facts` (each key a phrase with {} for its
    value, "a with {} rows") travel with what the launch says to its peers (runtime/launch/agreement.py),
    and a launch whose facts differ between the ranks is refused on every rank, in one line naming the
    template's own arguments. No collective of its own: the launch's exchange carries them."""
    from syncopy.runtime.launch import agreement

    return agreement.facts(f"syncopy.templates.{template}", facts, why)


def available() -> dict[str, Template]:
    """Every folder of the template library (templates/ in the repository) with a schedule.yaml, by name."""
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


_made = threading.Lock()


def _fused(name: str, chunks_per_rank, order):
    # One operator per (template, options) in the process, even when threads ask for it at once
    # (lru_cache alone may build two, which would pair their launches as they come).
    with _made:
        return _cached_fused(name, chunks_per_rank, order)


@lru_cache(maxsize=None)
def _cached_fused(name: str, chunks_per_rank, order):
    return get(name).fused(chunks_per_rank=chunks_per_rank, order=order)


class TemplateOp:
    """`syncopy.templates.<name>(*args, group=None, chunks_per_rank=None, order=None, **meta)`: the
    template's fused launch. Other attributes are those of the template's folder, so that
    `syncopy.templates.ag_gemm.kernel` still reaches its module once imported."""

    def __init__(self, name: str):
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args, group=None, chunks_per_rank=None, order=None, **kwargs):
        from syncopy.runtime.launch.contexts import checked_group

        checked_group(group)  # the template sizes its output with the group before the launch's own check
        return get(self.__name__).module.launch(_fused(self.__name__, chunks_per_rank, order), *args, group=group, **kwargs)

    @property
    def __doc__(self):
        return get(self.__name__).module.launch.__doc__

    def __repr__(self) -> str:
        return f"<syncopy template op '{self.__name__}'>"

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        folder = importlib.import_module(f"{__name__}.{self.__name__}")
        if not hasattr(folder, attr) and (resources.files(__name__) / self.__name__ / f"{attr}.py").is_file():
            importlib.import_module(f"{folder.__name__}.{attr}")
        return getattr(folder, attr)


class _Package(types.ModuleType):
    def __setattr__(self, name, value):
        # Importing `syncopy.templates.<name>.kernel` makes the import system bind the folder's
        # module to `<name>` here, which would hide the op: keep the op (the folder stays in sys.modules).
        if isinstance(value, types.ModuleType) and isinstance(self.__dict__.get(name), TemplateOp):
            return
        super().__setattr__(name, value)


# One op per template folder, defined here rather than in a module __getattr__: a name the module
# defines is never looked up there, and _Package keeps a folder import from rebinding it.
for _name in available():
    globals()[_name] = TemplateOp(_name)
del _name
sys.modules[__name__].__class__ = _Package
