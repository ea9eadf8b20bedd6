"""CPU worlds shared by several test files: one spawn per world size runs the jobs of every file that
registered one (a spawn costs seconds a rank: process start, torch/triton/libcst imports, a first
compile), in the order the files registered them.

A test file registers its jobs when pytest imports it (`register(__name__, world, {name: (function,
args)})`, the function as `workers.run_jobs` takes it) and reads them with `results(__name__, world,
name)`. The shared world of a size runs the jobs of the files pytest selected (tests/conftest.py
records them after collection), so running one file spawns only that file's jobs.

Only jobs that leave the world as they found it share one: every rank alive, the group's transport
unbroken (no timeout on purpose), no process-wide patch left behind, the harness's defaults (slow
reordering link, checked mode). A job that breaks the world stays in a spawn of its own file. Each
job reports its own error (workers.run_jobs), so a failure still names the case that broke; a job
that raised on one rank only may leave its peers waiting, which the spawn's deadline bounds.
"""
from __future__ import annotations

from tests.world.harness import spawn
from tests.world.workers import job, once, run_jobs

_registered: dict[int, dict[str, tuple]] = {}  # world -> {"module/job": (function, args)}
selected_modules: set[str] | None = None  # the modules of the tests pytest selected (None: every registered one)
SECONDS_PER_JOB = 90  # the spawn's deadline grows with its jobs (a hang still ends, with every job named)


def register(module: str, world: int, jobs: dict) -> None:
    """Jobs of test module `module` for the shared world of `world` ranks."""
    mine = _registered.setdefault(world, {})
    for name, fn_args in jobs.items():
        mine[f"{module}/{name}"] = fn_args


def results(module: str, world: int, name: str) -> list:
    """Each rank's result of job `name` of `module` in the shared world of `world` ranks (spawned at first use)."""
    return job(_world(world), f"{module}/{name}")


def _selected(key: str) -> bool:
    return selected_modules is None or key.split("/")[0] in selected_modules


@once
def _world(world: int) -> list[dict]:
    jobs = {key: fn_args for key, fn_args in _registered[world].items() if _selected(key)}
    return spawn(run_jobs, world, jobs, timeout_s=300 + SECONDS_PER_JOB * len(jobs))
