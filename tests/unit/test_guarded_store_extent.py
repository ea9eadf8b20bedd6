"""The launch's output-extent check (TileOrders.check_extents) bounds a store under `if c < E` inside
`for c in range(..., N)` at min(N - 1, E - 1) where that is proven: a test of the loop counter itself
against a bound the same in every iteration (infer._guard_last_iteration). Mamba's state passing then
launches with its real output layout; any other test keeps the loop's last iteration (wider refuses
more, never writes past), and a grid that really writes past its output is still refused."""
from __future__ import annotations

import math

import pytest
import torch

import syncopy
from syncopy.errors import LaunchError
from tests.kernels import guarded_stores, sequence_loops

R, N, BLOCK = 3, 4, 8


def _shifted(kernel):
    fused = syncopy.overlap({"pattern": "all_gather", "tensor": "x_ptr", "dim": 0, "chunks_per_rank": 1})(kernel)
    out = torch.empty(R, N * BLOCK)
    fused.orders.check_extents((R,), dict(x_ptr=torch.randn(R, N * BLOCK), out_ptr=out, n=N, stride_row=out.stride(0),
                                          BLOCK=BLOCK))


def test_a_store_under_a_counter_guard_is_bounded_at_the_guards_last_iteration():
    _shifted(guarded_stores.shifted_store)


@pytest.mark.parametrize("kernel", [guarded_stores.shifted_store_moving_bound, guarded_stores.shifted_store_past],
                         ids=["bound-moves-in-the-loop", "guard-lets-every-iteration-through"])
def test_an_unproven_guard_or_a_real_overflow_is_refused(kernel):
    with pytest.raises(LaunchError) as info:
        _shifted(kernel)
    # the last row's block N (one past its last, N - 1) is row R's first
    assert str(info.value) == (f"launch of '{kernel.fn.__name__}': the grid writes rows up to {R} of 'out_ptr', which has {R} "
                               f"rows; give 'out_ptr' at least {R + 1} rows, or a grid and bounds that write {R}")


B, H, DIM, CHUNKS, BLOCK_SIZE = 2, 3, 16, 4, 8


def _scan_extents(out):
    fused = syncopy.overlap({"pattern": "all_gather", "tensor": "states_ptr", "dim": 1,
                             "chunks_per_rank": 1})(sequence_loops.state_passing)
    states, final, dA_cs = torch.randn(B, CHUNKS, H, DIM), torch.empty(B, H, DIM), torch.randn(B, H, CHUNKS)
    s = states.stride()
    args = dict(states_ptr=states, out_ptr=out, final_states_ptr=final, dA_cs_ptr=dA_cs, dim=DIM, nchunks=CHUNKS,
                stride_states_batch=s[0], stride_states_chunk=s[1], stride_states_head=s[2], stride_states_dim=s[3],
                stride_out_batch=out.stride(0), stride_out_chunk=out.stride(1), stride_out_head=out.stride(2),
                stride_out_dim=out.stride(3), stride_final_states_batch=final.stride(0),
                stride_final_states_head=final.stride(1), stride_final_states_dim=final.stride(2),
                stride_dA_cs_batch=dA_cs.stride(0), stride_dA_cs_chunk=dA_cs.stride(2), stride_dA_cs_head=dA_cs.stride(1),
                BLOCK_SIZE=BLOCK_SIZE)
    fused.orders.check_extents((math.ceil(DIM / BLOCK_SIZE), B, H), args)


def test_mambas_state_passing_launches_with_its_real_output_layout():
    _scan_extents(torch.empty(B, CHUNKS, H, DIM))


def test_mambas_state_passing_with_one_chunk_too_few_is_refused():
    """out[:, c + 1] for c < nchunks - 1 needs nchunks slots: with nchunks - 1 the last is past the end."""
    out = torch.empty(B, CHUNKS - 1, H, DIM)
    with pytest.raises(LaunchError) as info:
        _scan_extents(out)
    # the last batch writes slot nchunks - 1 (one past its nchunks - 1 slots), every head and dim
    last = (B - 1) * out.stride(0) + (CHUNKS - 1) * out.stride(1) + (H - 1) * out.stride(2) + (DIM - 1)
    assert str(info.value) == (f"launch of 'state_passing': the grid writes rows up to {last // out.stride(0)} of 'out_ptr', "
                               f"which has {B} rows; give 'out_ptr' at least {last // out.stride(0) + 1} rows, or a grid and "
                               f"bounds that write {B}")
