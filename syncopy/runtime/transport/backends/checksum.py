"""Chunk checksums (`verify_chunks=True`): the sender sends a chunk's bytes with a CRC-32 of them, the
receiver recomputes it as the chunk lands. One message per chunk, as without checksums:

    message = the chunk's bytes | trailer, 8 bytes little endian: CRC-32 (bits 0-31), TAINTED (bit 32)

A relay passes on the word it received, so a chunk corrupted on the first hop fails every later check
too. A value a rank computes from received parts (a partial sum passed on, a reduced chunk) gets a
new CRC, with TAINTED set when one of its parts failed its check: its receivers fail too, instead
of taking a wrong sum with a valid checksum.
"""
from __future__ import annotations

import zlib

import torch

TRAILER = 8
TAINTED = 1 << 32
_CRC = 0xFFFFFFFF


def crc(data: torch.Tensor) -> int:
    """CRC-32 of a contiguous tensor's bytes (zlib's: a GB/s or more on one core, no copy)."""
    return zlib.crc32(data.reshape(-1).view(torch.uint8).numpy())


def pack(data: torch.Tensor, word: int) -> torch.Tensor:
    """The message for a contiguous chunk `data` and its checksum word."""
    raw = data.reshape(-1).view(torch.uint8)
    message = torch.empty(raw.numel() + TRAILER, dtype=torch.uint8)
    message[: raw.numel()] = raw
    message[raw.numel():] = torch.tensor([word], dtype=torch.int64).view(torch.uint8)
    return message


def receive_buffer(view: torch.Tensor) -> torch.Tensor:
    """Where a message for chunk `view` lands."""
    return torch.empty(view.numel() * view.element_size() + TRAILER, dtype=torch.uint8)


def payload(message: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The chunk's bytes of a message, as a contiguous tensor of `like`'s dtype and shape."""
    return message[:-TRAILER].view(like.dtype).view(like.shape)


def check(message: torch.Tensor) -> tuple[int, bool]:
    """(the word the sender sent, whether the bytes match its CRC)."""
    word = int.from_bytes(message[-TRAILER:].numpy().tobytes(), "little")
    return word, zlib.crc32(message[:-TRAILER].numpy()) == word & _CRC
