"""Errors. Every user-facing failure is a `SyncopyError` that knows *where* and *what to change*.

Rendered on one line, the way compilers do it:

    kernel.py:12:5: tensor 'A' is read, but ... ; add `binding.rows: <expr>` to the schedule
    schedule.yaml:6: chunks_per_rank: must be a positive integer or auto (got 0); ...
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLocation:
    """A position in a kernel file (1-based line and column)."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True)
class ScheduleLocation:
    """A key of a schedule, with the line it stands on when the schedule came from a file."""

    file: str | None
    key: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.file or "schedule"
        if self.line is not None:
            where = f"{where}:{self.line}"
        return f"{where}: {self.key}" if self.key else where


class SyncopyError(Exception):
    """Base of every error syncopy raises on purpose. `str(err)` is the one-line rendering."""

    def __init__(self, message: str, location: SourceLocation | ScheduleLocation | None = None):
        self.message = message
        self.location = location
        super().__init__(self.render())

    def render(self) -> str:
        return f"{self.location}: {self.message}" if self.location is not None else self.message


class ScheduleError(SyncopyError):
    """The schedule is malformed or contradicts itself."""


class KernelError(SyncopyError):
    """The kernel file or function cannot be used as given (syntax, unknown names)."""


class InferenceError(KernelError):
    """The frontend could not infer how programs map to chunks; the message names the key to add."""


class LaunchError(SyncopyError):
    """A launch contradicts the schedule (world size, shard shape, arguments)."""


class FaultError(LaunchError):
    """An injected fault (`faults=`, `syncopy run --inject`) names a send that no rank makes: it would do nothing."""


class SyncopyTimeout(SyncopyError):
    """A chunk did not arrive in time. Names the rank that waited, the chunk and the epoch."""

    ADVICE = "check that every rank launched the kernel with the same shapes, or raise timeout_s"

    def __init__(self, rank: int, chunk: tuple[int, int], epoch: int, timeout_s: float, detail: str = "", advice: str = ADVICE,
                 stopped: bool = False):
        self.rank, self.chunk, self.epoch, self.timeout_s, self.stopped = rank, chunk, epoch, timeout_s, stopped
        src, index = chunk
        # stopped: the wait ended before timeout_s, the chunk could never come (`detail` says why: a peer's connection closed)
        waited = "stopped waiting" if stopped else f"waited {timeout_s:g}s"
        message = (
            f"rank {rank} {waited} for chunk {index} of rank {src} (epoch {epoch}) and it never "
            f"arrived{'; ' + detail if detail else ''}; {advice}"
        )
        super().__init__(message)


class SyncopyCorruptChunk(SyncopyError):
    """verify_chunks: a chunk landed whose bytes do not match the checksum its sender computed.
    Names the rank that received it, the chunk (source rank, index), the epoch and the peer it came from."""

    def __init__(self, rank: int, chunk: tuple[int, int], epoch: int, peer: int, upstream: bool = False):
        self.rank, self.chunk, self.epoch, self.peer, self.upstream = rank, chunk, epoch, peer, upstream
        src, index = chunk
        if upstream:  # the peer passed on a value it had built from a corrupt part (a partial sum)
            what = f"was built by rank {peer} from a part that reached rank {peer} corrupt"
        else:
            what = f"arrived from rank {peer} with bytes that do not match its checksum"
        super().__init__(f"rank {rank}: chunk {index} of rank {src} (epoch {epoch}) {what}; the data changed in flight "
                         "(check the link and the hosts' memory, or the injected faults), then relaunch")


class SyncopyReadError(SyncopyError):
    """Checked mode: a read of the communicated tensor touched a chunk before it arrived, or a
    producer stored into a chunk after it was announced. Names the kernel's line, rank, chunk, epoch."""

    def __init__(self, file: str, line: int, rank: int, chunk: tuple[int, int], epoch: int, tensor: str, store: bool = False):
        self.file, self.line, self.rank, self.chunk, self.epoch, self.store = file, line, rank, chunk, epoch, store
        src, index = chunk
        if store:
            what = f"wrote chunk ({src}, {index}) of {tensor} after it was announced (epoch {epoch})"
        else:
            what = f"read chunk ({src}, {index}) of {tensor} before it arrived (epoch {epoch})"
        fix = ("if the schedule gives binding.rows, make it cover every row this line touches; otherwise report the "
               "kernel and schedule (syncopy's wait or count missed this access)")
        super().__init__(f"rank {rank} {what}; {fix}", SourceLocation(file, line, 0))

    def render(self) -> str:
        return f"{self.location.file}:{self.location.line}: {self.message}"


__all__ = [
    "SourceLocation",
    "ScheduleLocation",
    "SyncopyError",
    "ScheduleError",
    "KernelError",
    "InferenceError",
    "LaunchError",
    "SyncopyTimeout",
    "SyncopyCorruptChunk",
    "SyncopyReadError",
]


class SyncopyUncheckedWarning(UserWarning):
    """Checked mode (`checked=True`) cannot check some of the kernel's accesses of a communicated
    tensor (a helper it cannot copy, a tensor descriptor handed to a helper): said once per build with
    the kernel's location and the helper, so that no warning means every access is checked."""


class SyncopyFallbackWarning(UserWarning):
    """A rewrite that overlap needs was not proven, and the kernel fell back to what costs overlap: a
    tile waits for every chunk, tiles keep their launch order, or a loop whose pointer steps by constexprs
    only waits before it for every iteration's rows. Said once per operator, at its first
    launch, with the kernel's line and why; `strict=True` (`syncopy transform --strict`) refuses it instead."""
