"""Chunk geometry: which rows of a shard each chunk holds.

A shard of S rows is cut into C chunks with boundaries floor(i*S/C): sizes differ by at most one
row and no chunk is empty while C <= S, whatever S is (ragged shards are normal). The kernel side
finds the chunk of a row with the closed form in `chunk_of_row` (the same formula is in device.py).
"""
from __future__ import annotations


def chunk_bounds(rows: int, chunks: int) -> list[tuple[int, int]]:
    """[(start, stop)] of each chunk of a shard of `rows` rows cut into `chunks` pieces."""
    return [(i * rows // chunks, (i + 1) * rows // chunks) for i in range(chunks)]


def chunk_of_row(row: int, rows: int, chunks: int) -> int:
    """Index of the chunk that holds local row `row` (0 <= row < rows).

    b_i <= r  <=>  i*S < (r+1)*C  <=>  i <= ((r+1)*C - 1) // S, so the chunk is that largest i.
    """
    return ((row + 1) * chunks - 1) // rows
