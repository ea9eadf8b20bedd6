"""The process group of one rank of a thread world, as much of it as a template asks for."""
from __future__ import annotations


class RankGroup:
    """What a template asks of its process group, for rank `rank` of a thread world."""

    def __init__(self, rank: int, world: int):
        self._rank, self._world = rank, world

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._world

    def __repr__(self) -> str:
        return f"RankGroup(rank={self._rank}, world={self._world})"
