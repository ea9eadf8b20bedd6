"""The planner: predict, optimize, adapt (after POAS).

- `hardware`  profiles as data (YAML): peaks, links, topology, backends, overheads
- `workloads` what each template communicates and computes, from M, N, K
- `model`     roofline per tile, waves; alpha-beta per message
- `simulate`  discrete-event simulation of sequential, stream-level and fused execution
- `optimize`  `choose`: the chunk count and order with the best predicted fused time
- `auto`      `resolve`: `chunks_per_rank: auto` / `order: auto` for one launch (shape, hardware)
- `calibrate` fit the efficiency and overhead terms to measured runs
- `command`   `syncopy plan`

Pure Python + pydantic + PyYAML: importing it never loads torch or triton.
"""
from syncopy.planner.auto import Resolution, resolve
from syncopy.planner.hardware import HardwareProfile, load_profile, profile_names, save_profile
from syncopy.planner.optimize import CHUNK_CHOICES, Plan, choose, choose_for
from syncopy.planner.simulate import ORDERS, Execution, Prediction, Simulator, simulate
from syncopy.planner.workloads import TEMPLATES, Workload, make_workload


def __getattr__(name):
    # Imported on use, so that `python -m syncopy.planner.calibrate` runs the module only once.
    if name in ("Measurement", "fit", "load_measurements"):
        from syncopy.planner import calibrate

        return getattr(calibrate, name)
    raise AttributeError(name)


__all__ = [
    "CHUNK_CHOICES",
    "ORDERS",
    "TEMPLATES",
    "Execution",
    "HardwareProfile",
    "Measurement",
    "Plan",
    "Prediction",
    "Resolution",
    "Simulator",
    "Workload",
    "choose",
    "choose_for",
    "fit",
    "load_measurements",
    "load_profile",
    "make_workload",
    "profile_names",
    "resolve",
    "save_profile",
    "simulate",
]
