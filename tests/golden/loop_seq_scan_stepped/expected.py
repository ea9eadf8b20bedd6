"""Mamba-2's state-passing scan (ssd_state_passing.py style) over states [B, C, H, D]
gathered along the chunks (dim 1): its pointer is stepped each iteration; the scan stores every
chunk, so it keeps its order and waits per iteration."""
import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def state_passing(states_ptr, out_ptr, final_states_ptr, dA_cs_ptr, dim, nchunks, stride_states_batch,
                  stride_states_chunk, stride_states_head, stride_states_dim, stride_out_batch, stride_out_chunk,
                  stride_out_head, stride_out_dim, stride_final_states_batch, stride_final_states_head,
                  stride_final_states_dim, stride_dA_cs_batch, stride_dA_cs_chunk, stride_dA_cs_head,
                  BLOCK_SIZE: tl.constexpr,
                  syncopy_ctx,
                  syncopy_signals,
                  syncopy_order,
                  syncopy_trace,
                  SYNCOPY_TRACE: tl.constexpr,
                  SYNCOPY_TABLE: tl.constexpr):
    syncopy_base = states_ptr
    pid_b = tl.program_id(axis=1)
    pid_h = tl.program_id(axis=2)
    pid_m = tl.program_id(axis=0)
    states_ptr += pid_b * stride_states_batch + pid_h * stride_states_head
    dA_cs_ptr += pid_b * stride_dA_cs_batch + pid_h * stride_dA_cs_head
    out_ptr += pid_b * stride_out_batch + pid_h * stride_out_head
    final_states_ptr += pid_b * stride_final_states_batch + pid_h * stride_final_states_head
    offs_m = pid_m * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    states_ptrs = states_ptr + offs_m * stride_states_dim
    out_ptrs = out_ptr + offs_m * stride_out_dim
    final_states_ptrs = final_states_ptr + offs_m * stride_final_states_dim
    states = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    tl.store(out_ptrs, states, mask=offs_m < dim)
    out_ptrs += stride_out_chunk
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    # syncopy: this loop keeps its written order (each iteration waits for its own chunks): it calls tl.store (a side effect whose order may matter)
    for c in range(nchunks):
        # syncopy: no bound before the loop (each iteration reads other rows of 'states_ptr', so each waits for its own chunks): wait before each read, from its own pointers
        # syncopy: wait for the chunks of states_ptr this read needs
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(states_ptrs, offs_m < dim, syncopy_base, syncopy_ctx, False)
        syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
        new_states = tl.load(states_ptrs, mask=offs_m < dim, other=0.0).to(tl.float32)
        dA_cs = tl.load(dA_cs_ptr).to(tl.float32)
        scale = tl.exp(dA_cs)
        states = scale * states + new_states
        if c < nchunks - 1:
            tl.store(out_ptrs, states, mask=offs_m < dim)
        else:
            tl.store(final_states_ptrs, states, mask=offs_m < dim)
        states_ptrs += stride_states_chunk
        dA_cs_ptr += stride_dA_cs_chunk
        out_ptrs += stride_out_chunk
