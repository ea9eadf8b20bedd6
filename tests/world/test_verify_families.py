"""Issue 26, item 2: every kernel family the suite fuses (tests/kernels/) goes through the verifier's
conditions at least once, in the shared world of 2 (tests/world/shared.py), as tests/world/test_verify.py
runs the golden, listed-tensor and template kernels: each kernel against its own unfused kernel under
a slow link landing chunks one at a time in random order, a link that holds each chunk until a program
polls its flag, and checked mode; receive buffers poisoned until their chunk lands; producers' chunks
compared, as taken at their flag, with their final rows. Each condition must also have seen what it is
there for: remote chunks that landed while a program polled them, chunks taken at their flag.

The examples (tests/world/verify_families.py) launch each kernel as its family's world test does, at
the smallest shapes that still give several chunks a rank and more than one program (the loop-order
kernels are written for one program). tests/kernels/listed.py and autotuned.row_sums_whole_blocks are
verified in tests/world/test_verify.py.
"""
from __future__ import annotations

import importlib

import pytest

from tests.world import host_descriptor_workers as hdw
from tests.world import shared
from tests.world import sequence_loop_workers as sw
from tests.world import verify_families as vf
from tests.world.test_verify import _check

BOUNDS = vf.bounds_cases()
SEQUENCE_LOOPS = sw.NAMES
CASES = vf.producer_cases()

shared.register(__name__, 2, {
    "waits": (f"{vf.__name__}:run_waits", (list(vf.WAITS),)),
    "loops": (f"{vf.__name__}:run_loops", (vf.LOOPS,)),
    "producer_bounds": (f"{vf.__name__}:run_producer_bounds", (BOUNDS,)),
    "producer_cases": (f"{vf.__name__}:run_producer_cases", (CASES,)),
    "persistent": (f"{vf.__name__}:run_persistent", (vf.PERSISTENT,)),
    "read_check": (f"{vf.__name__}:run_read_check", (vf.READ_CHECK,)),
    "gemms": (f"{vf.__name__}:run_gemms", (vf.GEMMS,)),
    "autotuned": (f"{vf.__name__}:run_autotuned", (vf.AUTOTUNED,)),
    "all_to_all": (f"{vf.__name__}:run_all_to_all", ()),
    "attention_styles": (f"{vf.__name__}:run_attention_styles", (list(vf.ATTENTION_STYLES),)),
    "sequence_loops": (f"{vf.__name__}:run_sequence_loops", (list(SEQUENCE_LOOPS),)),
    "host_descriptors": (f"{vf.__name__}:run_host_descriptors", (list(hdw.KERNELS),)),
})


def _kernels(module: str, helpers: tuple[str, ...] = ()) -> list[str]:
    """The kernels of tests/kernels/<module>.py: its public @triton.jit, autotuned or fused functions, but the
    helpers they call."""
    mod = importlib.import_module(f"tests.kernels.{module}")
    return sorted(n for n, v in vars(mod).items()
                  if not n.startswith("_") and n not in helpers and (hasattr(v, "fn") or hasattr(v, "local")))


def _producer(name: str) -> bool:
    return name.endswith(vf.PRODUCERS)


def test_every_kernel_of_the_families_is_verified():
    """A kernel added to a family is verified too (or this says which)."""
    assert sorted(vf.WAITS) == _kernels("waits")
    assert sorted(vf.LOOPS) == _kernels("loops")
    assert sorted(n for n, _ in BOUNDS) == _kernels("producer_bounds") and {p for _, p in BOUNDS} == set(vf.PRODUCERS)
    assert sorted(n for n, _ in CASES) == _kernels("producer_cases") and {p for _, p in CASES} == set(vf.PRODUCERS)
    assert sorted(vf.PERSISTENT) == _kernels("persistent", ("cell_of",))
    assert sorted(n for n, _ in vf.READ_CHECK) == _kernels("read_check")
    assert sorted(vf.AUTOTUNED + ["row_sums_whole_blocks"]) == _kernels("autotuned", ("leaky_relu",))
    assert {k for k, _ in vf.GEMMS} == {"grouped", "gemm2d", "rms", "mm_desc_out"}  # tests/world/workers.py's names
    assert sorted(vf.ATTENTION_STYLES) == _kernels("attention_styles")
    assert sorted(SEQUENCE_LOOPS) == _kernels("sequence_loops")
    assert sorted(n for n, m in hdw.KERNELS.items() if m == "attention_host_descriptors") == _kernels("attention_host_descriptors")
    assert [_kernels(m) for m in ("desc_out", "gemm2d", "grouped_gemm", "rownorm")] == [
        ["mm_desc_out"], ["gemm_2d"], ["matmul_grouped"], ["rms_rows"]]


@pytest.mark.world
def test_every_consumer_wait_kernel_agrees_under_every_condition():
    _check(shared.results(__name__, 2, "waits"), list(vf.WAITS))


@pytest.mark.world
def test_every_loop_order_kernel_agrees_under_every_condition():
    _check(shared.results(__name__, 2, "loops"), vf.LOOPS)


@pytest.mark.world
def test_every_producer_bound_kernel_agrees_under_reduce_scatter_or_all_reduce():
    _check(shared.results(__name__, 2, "producer_bounds"), [f"{n} {p}" for n, p in BOUNDS], _producer)


@pytest.mark.world
def test_every_producer_case_kernel_agrees_under_reduce_scatter_or_all_reduce():
    _check(shared.results(__name__, 2, "producer_cases"), [f"{n} {p}" for n, p in CASES], _producer)


@pytest.mark.world
def test_every_persistent_kernel_agrees_under_every_condition():
    _check(shared.results(__name__, 2, "persistent"), vf.PERSISTENT)


@pytest.mark.world
def test_every_read_check_kernel_agrees_with_a_sound_binding():
    _check(shared.results(__name__, 2, "read_check"), [n for n, _ in vf.READ_CHECK], lambda name: name == "double_into")


@pytest.mark.world
def test_the_gemm_row_and_descriptor_kernels_agree_under_every_condition():
    _check(shared.results(__name__, 2, "gemms"), [k if p == "all_gather" else f"{k} {p}" for k, p in vf.GEMMS], _producer)


@pytest.mark.world
def test_every_autotuned_kernel_agrees_under_every_condition():
    _check(shared.results(__name__, 2, "autotuned"), vf.AUTOTUNED)


@pytest.mark.world
def test_the_all_to_all_kernel_agrees_under_every_condition():
    """moe_workers.scale_rows (the MoE test's all_to_all kernel), with the even exchange."""
    _check(shared.results(__name__, 2, "all_to_all"), ["scale_rows"])


@pytest.mark.world
def test_the_attention_kernels_of_public_repositories_agree_under_every_condition():
    """FA2's forward (EVEN_N flipping between launches) and SGLang's split-KV decode (new pages each launch)."""
    _check(shared.results(__name__, 2, "attention_styles"), list(vf.ATTENTION_STYLES))


@pytest.mark.world
def test_every_sequence_loop_kernel_agrees_under_every_condition():
    _check(shared.results(__name__, 2, "sequence_loops"), list(SEQUENCE_LOOPS))


@pytest.mark.world
def test_attention_with_host_descriptors_agrees_under_every_condition():
    """Keys and values passed as host TensorDescriptors; a helper handed both is not run checked (read_check.py)."""
    results = shared.results(__name__, 2, "host_descriptors")
    plain = [n for n in hdw.KERNELS if n not in hdw.HELPER_HANDED]
    _check([{n: r[n] for n in plain} for r in results], plain)
    for rank, r in enumerate(results):
        for name in hdw.HELPER_HANDED:
            assert list(r[name]) == list(hdw.CONDITIONS), (rank, name, list(r[name]))
            for cond, s in r[name].items():
                assert s["differences"] == [] and s["launches"] == vf.LAUNCHES, (rank, name, cond, s)
            assert r[name]["held"]["waited"] > 0, (rank, name)
