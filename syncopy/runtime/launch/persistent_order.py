"""Tile order of a persistent kernel, indexed by tile id (the grid is only the number of programs).

The probe runs the kernel's loop up to each tile's wait and records, per tile id t:
(first chunk, last chunk, program that ran it, iteration of that program's loop). If every id in
0..n-1 was visited exactly once the loop is a bijection on tiles, and we can remap: slot v of the
loop (the id the kernel computes) runs tile order[v]. Tiles sorted by chunk arrival fill the slots
in the order the device runs them:

    GPU (all programs resident, in step):    slots by (iteration, program)   v = 0, 1, .., P-1, P, ..
    interpreter (programs one after another): slots by (program, iteration)   v = 0, P, 2P, .., 1, P+1, ..

Table: [n | tile per slot (n) | slot per tile (n) | (first, last) chunk per tile (2n)]; n = 0 turns
every remap into the identity (no probe, or a probe that saw no tiles).
"""
from __future__ import annotations

import torch

from syncopy import device as dev
from syncopy.runtime.state import plan as planning

MAX_TILES = 1 << 24
_FIRST_CAPACITY = 4096


def probe_tiles(run, device, capacity: int = _FIRST_CAPACITY) -> list[list[int]] | None:
    """Run the probe (`run(out)`) with room for `capacity` tiles, again with more if it saw more.
    Returns one record [lo, hi, program, iteration, visits] per tile id, or None if ids were
    negative or too many to tabulate."""
    while True:
        out = torch.zeros(dev.PROBE_HEADER + dev.PROBE_FIELDS * capacity, dtype=torch.int32, device=device)
        out[2] = capacity
        run(out)
        flat = out.tolist()
        count, negative = flat[0], flat[1]
        if negative or count > MAX_TILES:
            return None
        if count <= capacity:
            break
        capacity = count
    at = dev.PROBE_HEADER
    return [flat[at + dev.PROBE_FIELDS * t : at + dev.PROBE_FIELDS * (t + 1)] for t in range(count)]


def build_table(records: list[list[int]] | None, position: dict[int, int], n_chunks: int, *, remap: bool,
                sequential: bool) -> tuple[list[int], list[tuple[int, int]], list[int]]:
    """(table, chunk range per tile, tile run by each execution slot) from the probe's records."""
    if not records:
        return [0, 0, 0], [], []
    n = len(records)
    ranges = [(r[0], r[1]) if r[4] else (0, n_chunks - 1) for r in records]

    def run_order(v: int) -> tuple[int, int]:
        program, iteration = records[v][2], records[v][3]
        return (program, iteration) if sequential else (iteration, program)

    slots = sorted(range(n), key=run_order)
    forward = list(range(n))
    if remap and all(r[4] == 1 for r in records):
        for slot, tile in zip(slots, planning.tile_order(ranges, position)):
            forward[slot] = tile
    inverse = [0] * n
    for slot, tile in enumerate(forward):
        inverse[tile] = slot
    table = [n, *forward, *inverse, *(x for r in ranges for x in r)]
    return table, ranges, [forward[s] for s in slots]
