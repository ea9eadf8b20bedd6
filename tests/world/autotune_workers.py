"""Rank functions for tests/world/test_autotune.py: autotuned kernels fused as all_gather consumers.

Each rank launches twice with new data, into a NaN-poisoned receive buffer, over the harness's
slow link, and checks every launch against torch (`all_gather_into_tensor`, then matmul)."""
from __future__ import annotations

import traceback

LAUNCHES = 2


def _gathered(shard):
    import torch
    import torch.distributed as dist

    full = torch.empty((dist.get_world_size() * shard.shape[0], *shard.shape[1:]), dtype=shard.dtype)
    dist.all_gather_into_tensor(full, shard)
    return full


def _error(got, want) -> float:
    return float((got.float() - want.float()).abs().max() / max(1.0, float(want.float().abs().max())))


def run_tutorial_matmul(rank: int, world: int, rows: int, config: str | None) -> dict:
    """Triton's tutorial matmul, `syncopy.overlap(schedule)(matmul_kernel)`, fp16, grid a lambda of META."""
    import os

    import torch
    import triton

    import syncopy
    from tests.kernels import autotuned

    if config is not None:
        os.environ["SYNCOPY_AUTOTUNE_CONFIG"] = config
    try:
        fused = syncopy.overlap({"pattern": "all_gather", "tensor": "a_ptr", "dim": 0, "chunks_per_rank": 2},
                                poison_receive=True)(autotuned.matmul_kernel)
        errors = []
        for launch in range(LAUNCHES):
            torch.manual_seed(100 * launch + rank)
            a = torch.randn(rows, 24, dtype=torch.float16)
            b = torch.randn(24, 20, dtype=torch.float16)
            torch.manual_seed(100 * launch)  # b alike on every rank
            b = torch.randn(24, 20, dtype=torch.float16)
            M, K, N = world * rows, 24, 20
            c = torch.full((M, N), float("nan"), dtype=torch.float16)
            grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)  # noqa: E731
            fused[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                        ACTIVATION="leaky_relu" if launch else "")
            want = _gathered(a).float() @ b.float()
            if launch:
                want = torch.where(want >= 0, want, 0.01 * want)
            errors.append(_error(c, want))
        chosen = {k: v for k, v in autotuned.matmul_kernel.best_config.all_kwargs().items() if k.startswith("BLOCK")}
        return {"errors": errors, "config": chosen}
    except Exception:
        return {"errors": [], "failure": traceback.format_exc()}


def run_split_k(rank: int, world: int, rows: int) -> dict:
    """The split-K kernel: @syncopy.overlap over @triton.autotune (config pre_hook) over @triton.heuristics, fp32."""
    import torch
    import triton

    from tests.kernels import autotuned

    try:
        fused = autotuned.split_k_fused
        errors = []
        for launch, K in enumerate((24, 32)):  # K=24 runs the masked loop, K=32 the EVEN_K one
            torch.manual_seed(100 * launch + rank)
            a = torch.randn(rows, K)
            torch.manual_seed(100 * launch)
            b = torch.randn(K, 12)
            M, N = world * rows, 12
            c = torch.full((M, N), float("nan"))  # the config's pre_hook zeroes it
            grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]), META["SPLIT_K"])  # noqa: E731
            fused[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
            errors.append(_error(c, _gathered(a) @ b))
        return {"errors": errors}
    except Exception:
        return {"errors": [], "failure": traceback.format_exc()}


def run_softmax_num_stages(rank: int, world: int, rows: int) -> dict:
    """The softmax tutorial's kernel, whose `num_stages: tl.constexpr` is passed as num_stages=2 (issue 13, item 10)."""
    import torch

    import syncopy
    from tests.kernels import autotuned

    try:
        fused = syncopy.overlap({"pattern": "all_gather", "tensor": "in_ptr", "dim": 0, "chunks_per_rank": 2},
                                poison_receive=True)(autotuned.softmax_rows)
        errors = []
        for launch in range(LAUNCHES):
            torch.manual_seed(100 * launch + rank)
            x = torch.randn(rows, 12)
            y = torch.full((world * rows, 12), float("nan"))
            fused[(world * rows,)](y, x, x.stride(0), y.stride(0), world * rows, 12, BLOCK_SIZE=16, num_stages=2)
            errors.append(_error(y, torch.softmax(_gathered(x), dim=1)))
        return {"errors": errors}
    except Exception:
        return {"errors": [], "failure": traceback.format_exc()}


def run_pruned_row_sums(rank: int, world: int, rows: int, instant: bool = False) -> dict:
    """An autotuner whose prune_configs_by drops config 0 for K = 24 (tests/kernels/autotuned.py): the
    fused kernel and its reference both run the kept config, three launches of new data, fp32; on the
    harness's slow reordering link with poisoned buffers, or (`instant`) an instant link without."""
    import torch

    import syncopy
    from syncopy.runtime.transport.link import Link
    from tests.kernels import autotuned

    try:
        link = {"link": Link()} if instant else {}
        fused = syncopy.overlap({"pattern": "all_gather", "tensor": "X", "dim": 0, "chunks_per_rank": 2},
                                poison_receive=not instant, **link)(autotuned.row_sums_whole_blocks)
        errors, reference = [], []
        for launch in range(3):
            torch.manual_seed(100 * launch + rank)
            x = torch.randn(rows, 24)
            m = world * rows
            y, ref = torch.full((m,), float("nan")), torch.full((m,), float("nan"))
            fused[(triton_cdiv(m, 4),)](x, y, m, 24, BLOCK_M=4)
            fused.reference[(triton_cdiv(m, 4),)](x, ref, m, 24, BLOCK_M=4)
            want = _gathered(x).sum(1)
            errors.append(_error(y, want))
            reference.append(_error(ref, want))
        return {"errors": errors, "reference": reference, "config": autotuned.row_sums_whole_blocks.best_config.kwargs}
    except Exception:
        return {"errors": [], "failure": traceback.format_exc()}


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def run_split_k_and_softmax(rank: int, world: int, rows: int) -> dict:
    out = {"split_k": run_split_k(rank, world, rows), "softmax": run_softmax_num_stages(rank, world, rows),
           "pruned": run_pruned_row_sums(rank, world, rows)}
    # Last, as it sets $SYNCOPY_AUTOTUNE_CONFIG for the rest of this rank's life: the tutorial with config 1.
    out["tutorial_config1"] = run_tutorial_matmul(rank, world, 11, "1")
    return out


class _NoLibcst:
    """A meta-path finder that makes libcst unimportable: a deployment without the frontend."""

    def find_spec(self, name, path=None, target=None):
        if name == "libcst" or name.startswith("libcst."):
            raise ImportError(f"libcst is not installed here ({name})")


def run_loaded_tutorial(rank: int, world: int, path: str, schedule: str, rows: int) -> dict:
    """`syncopy.load` of the tutorial matmul as `syncopy transform --loadable` wrote it, with libcst unimportable."""
    import sys

    if "libcst" in sys.modules:
        return {"errors": [], "failure": "libcst was imported before the rank started"}
    sys.meta_path.insert(0, _NoLibcst())
    import torch
    import triton

    import syncopy

    try:
        fused = syncopy.load(path, schedule, poison_receive=True)
        errors = []
        for launch in range(LAUNCHES):
            torch.manual_seed(100 * launch + rank)
            a = torch.randn(rows, 24, dtype=torch.float16)
            torch.manual_seed(100 * launch)
            b = torch.randn(24, 20, dtype=torch.float16)
            M, K, N = world * rows, 24, 20
            c = torch.full((M, N), float("nan"), dtype=torch.float16)
            grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)  # noqa: E731
            fused[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                        ACTIVATION="")
            errors.append(_error(c, _gathered(a).float() @ b.float()))
        # An output one row short: refused before anything moves, from the extent probe the file carries.
        short = torch.full((M - 1, N), float("nan"), dtype=torch.float16)
        try:
            fused[grid](a, b, short, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), short.stride(0),
                        short.stride(1), ACTIVATION="")
            refused = None
        except syncopy.LaunchError as exc:
            refused = str(exc)
        return {"errors": errors, "libcst": "libcst" in sys.modules, "short": refused}
    except Exception:
        return {"errors": [], "failure": traceback.format_exc()}
