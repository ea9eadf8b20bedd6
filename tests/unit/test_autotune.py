"""Autotuned and heuristic kernels without ranks (issue 13, items 1 and 10): what the decorator makes of
the wrappers, what each launch adds (config, heuristics, hooks), the interpreter's fixed choice and
its errors, and launch options that are kernel parameters. CPU worlds: tests/world/test_autotune.py."""
from __future__ import annotations

import pytest
import torch
import triton

import syncopy
from syncopy.errors import LaunchError
from syncopy.runtime.launch import sequence, tuning
from tests.kernels import autotuned

AG = {"pattern": "all_gather", "tensor": "a_ptr", "dim": 0, "chunks_per_rank": 2}


def _resolve(layers_of, named: dict) -> dict:
    base, layers = tuning.unwrap(layers_of)
    return tuning.Tuning(layers, base.fn.__name__).resolve(named, grid=(1,), group=None, timing=dict, timeout_s=1)


def _tutorial_args(M=8, N=4, K=4) -> dict:
    return dict(a_ptr=torch.zeros(M, K), b_ptr=torch.zeros(K, N), c_ptr=torch.zeros(M, N), M=M, N=N, K=K,
                stride_am=K, stride_ak=1, stride_bk=N, stride_bn=1, stride_cm=N, stride_cn=1, ACTIVATION="")


def test_unwrap_finds_the_jit_function_under_every_wrapper():
    base, layers = tuning.unwrap(autotuned.split_k_fused.local)
    assert base is autotuned.split_k_fused.local and layers == []
    fused = autotuned.split_k_fused
    assert fused.local.fn.__name__ == "split_k_fused" and fused.tuning is not None
    assert [type(x).__name__ for x in fused.tuning.layers] == ["Autotuner", "Heuristics"]
    assert "A" in fused.signature.parameters  # the kernel's own arguments, not the wrapper's (args, kwargs)


def test_decorating_the_tutorial_autotuner_by_a_call():
    fused = syncopy.overlap(AG)(autotuned.matmul_kernel)
    assert fused.local is autotuned.matmul_kernel.fn
    assert fused.tuning.supplied() == {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M"}
    # The configs' arguments are not missing at launch; the kernel's own still are.
    fused.binder.check_arguments(_tutorial_args())
    args = _tutorial_args()
    del args["ACTIVATION"]
    with pytest.raises(LaunchError, match=r"^launch of 'matmul_kernel': missing argument 'ACTIVATION'; pass every argument"):
        fused.binder.check_arguments(args)


def test_interpreter_takes_the_first_config_or_the_one_the_environment_names(monkeypatch):
    monkeypatch.delenv(tuning.CONFIG_ENV, raising=False)
    first = _resolve(autotuned.matmul_kernel, _tutorial_args())
    assert first == {**autotuned.get_autotune_config()[0].all_kwargs()}
    monkeypatch.setenv(tuning.CONFIG_ENV, "1")
    second = _resolve(autotuned.matmul_kernel, _tutorial_args(M=16))  # a new key: chosen afresh
    assert second == autotuned.get_autotune_config()[1].all_kwargs()


@pytest.mark.parametrize("value", ["2", "x", "-1"])
def test_a_config_index_out_of_range_is_one_line(monkeypatch, value):
    monkeypatch.setenv(tuning.CONFIG_ENV, value)
    with pytest.raises(LaunchError) as info:
        _resolve(autotuned.matmul_kernel, _tutorial_args())
    assert str(info.value) == (f"SYNCOPY_AUTOTUNE_CONFIG={value!r} but kernel 'matmul_kernel' has 2 autotune configs; "
                               "set it to an index 0..1")


def test_interpreter_picks_among_the_configs_pruning_leaves(monkeypatch):
    # Issue 30, D: config 0 (BLOCK_K 32) does not divide K = 24 and is pruned; index 0 is the kept one.
    monkeypatch.delenv(tuning.CONFIG_ENV, raising=False)
    named = dict(X=torch.zeros(8, 24), Y=torch.zeros(8), M=8, K=24, BLOCK_M=8)
    assert _resolve(autotuned.row_sums_whole_blocks, named)["BLOCK_K"] == 8
    # Where both are left (K = 32), index 0 is the list's first again.
    assert _resolve(autotuned.row_sums_whole_blocks, dict(named, X=torch.zeros(8, 32), K=32))["BLOCK_K"] == 32
    monkeypatch.setenv(tuning.CONFIG_ENV, "1")
    with pytest.raises(LaunchError) as info:
        _resolve(autotuned.row_sums_whole_blocks, named)
    assert str(info.value) == ("SYNCOPY_AUTOTUNE_CONFIG='1' but kernel 'row_sums_whole_blocks' after its prune_configs_by has 1 "
                               "autotune configs; set it to an index 0..0")


def test_the_choice_is_cached_per_key(monkeypatch):
    monkeypatch.delenv(tuning.CONFIG_ENV, raising=False)
    base, layers = tuning.unwrap(autotuned.matmul_kernel)
    t = tuning.Tuning(layers, "matmul_kernel")
    t.resolve(_tutorial_args(), grid=(1,), group=None, timing=dict, timeout_s=1)
    monkeypatch.setenv(tuning.CONFIG_ENV, "1")  # read for new keys only
    again = t.resolve(_tutorial_args(), grid=(1,), group=None, timing=dict, timeout_s=1)
    assert again["BLOCK_SIZE_M"] == 16
    assert t.resolve(_tutorial_args(K=8), grid=(1,), group=None, timing=dict, timeout_s=1)["BLOCK_SIZE_M"] == 32


def test_heuristics_under_the_autotuner_see_the_config_and_its_pre_hook_runs(monkeypatch):
    monkeypatch.delenv(tuning.CONFIG_ENV, raising=False)
    c = torch.full((4, 4), float("nan"))
    named = dict(A=torch.zeros(4, 24), B=torch.zeros(24, 4), C=c, M=4, N=4, K=24, sam=24, sak=1, sbk=4, sbn=1, scm=4, scn=1)
    added = autotuned.split_k_fused.tuning.resolve(named, grid=(1,), group=None, timing=dict, timeout_s=1)
    assert added["SPLIT_K"] == 2 and added["BLOCK_K"] == 8 and added["EVEN_K"] is False  # 24 % 16
    assert (c == 0).all()  # the config's pre_hook zeroed the output, as before the local kernel's launch


def test_an_argument_the_configs_set_is_refused_at_launch(monkeypatch):
    monkeypatch.delenv(tuning.CONFIG_ENV, raising=False)
    with pytest.raises(LaunchError) as info:
        _resolve(autotuned.matmul_kernel, {**_tutorial_args(), "BLOCK_SIZE_M": 64})
    assert str(info.value) == ("launch of 'matmul_kernel': 'BLOCK_SIZE_M' is set by the autotuner's configs; "
                               "do not pass it at launch (or drop it from the configs)")


def test_heuristics_may_wrap_the_fused_kernel(monkeypatch):
    fused = syncopy.overlap(AG)(autotuned.matmul_kernel)
    outer = triton.heuristics({"ACTIVATION": lambda args: "leaky_relu" if args["K"] > 2 else ""})(fused)
    launched = []
    monkeypatch.setattr(sequence, "launch", lambda op, grid, args, kwargs, group: launched.append((grid, kwargs, group)))
    args = _tutorial_args()
    del args["ACTIVATION"]
    outer[(3,)](*args.values(), group="pg")
    assert len(launched) == 1 and launched[0][1:] == ({"ACTIVATION": "leaky_relu"}, "pg")


def test_a_parameter_named_like_a_launch_option_is_that_parameter():
    # Triton's binder takes the kernel's parameters first: the softmax tutorial's `num_stages: tl.constexpr`.
    fused = syncopy.overlap({**AG, "tensor": "in_ptr"})(autotuned.softmax_rows)
    x, y = torch.zeros(4, 8), torch.zeros(8, 8)
    arguments, shard, options, _ = fused.binder.bind((y, x, 8, 8, 8, 8), {"BLOCK_SIZE": 8, "num_stages": 2, "num_warps": 4})
    assert arguments["num_stages"] == 2 and options == {"num_warps": 4}
