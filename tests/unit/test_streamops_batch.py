"""CudaOps.write_batch without a GPU: the driver entry points are replaced by callbacks that read
the parameter array at cuda.h's offsets (CUstreamBatchMemOpParams: a 48-byte union; writeValue =
{operation @0, address @8, value @16, flags @24, alias @32}) and do the writes into host memory."""
from __future__ import annotations

import ctypes
import struct

import torch

from syncopy.runtime.streams import streamops

WRITE_VALUE_32 = 2  # CU_STREAM_MEM_OP_WRITE_VALUE_32


def _ops(batch_rc: int = 0):
    ops = streamops.CudaOps.__new__(streamops.CudaOps)  # no libcuda here: only the entry points this test drives
    calls = {"batch": 0, "write": 0}

    def batch(stream, count, params, flags):
        calls["batch"] += 1
        if batch_rc:
            return batch_rc
        raw = ctypes.string_at(params, 48 * count)
        for i in range(count):
            op, addr, value, op_flags, _alias = struct.unpack_from("<I4xQQI4xQ", raw, 48 * i)
            assert op == WRITE_VALUE_32 and op_flags == 0 and flags == 0  # flags 0: a memory barrier before each write
            ctypes.c_uint32.from_address(addr).value = value & 0xFFFFFFFF
        return 0

    def write(stream, addr, value, flags):
        calls["write"] += 1
        ctypes.c_uint32.from_address(addr).value = value
        return 0

    ops._batch, ops._write = batch, write
    return ops, calls


def test_one_batch_writes_constants_and_the_launch_value_in_order():
    words = torch.full((6,), 7, dtype=torch.int32)
    addr = [words.data_ptr() + 4 * i for i in range(6)]
    ops, calls = _ops()
    batch = ops.batch([(addr[0], 0), (addr[1], 0), (addr[2], None), (addr[4], None), (addr[5], -1)])
    for epoch in (1, 2, 2**31):  # the last one wraps, as the device's words do
        ops.write_batch(batch, epoch, stream=0)
        e = streamops.wrap32(epoch)
        assert words.tolist() == [0, 0, e, 7, e, -1]
    assert calls == {"batch": 3, "write": 0}


def test_a_driver_without_batches_gets_one_write_each():
    words = torch.zeros(3, dtype=torch.int32)
    ops, calls = _ops(batch_rc=streamops.CUDA_ERROR_NOT_SUPPORTED)
    batch = ops.batch([(words.data_ptr() + 4 * i, None if i else 5) for i in range(3)])
    ops.write_batch(batch, 9, stream=0)
    ops.write_batch(batch, 10, stream=0)
    assert words.tolist() == [5, 10, 10]
    assert calls == {"batch": 1, "write": 6}  # asked once, then one write-value each
