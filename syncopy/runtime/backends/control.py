"""The control plane every backend shares: a gloo group with the ranks of the user's group (shape
checks, IPC handle exchange, barriers: small host messages, whatever moves the data), and where
those ranks run."""
from __future__ import annotations

import re
import socket
import time
from datetime import timedelta

import torch.distributed as dist

from syncopy.errors import LaunchError

_groups: dict[tuple, object] = {}
_hosts: dict[tuple, list[str]] = {}
_devices: dict[tuple, list] = {}  # (group, device) -> every rank's (host, GPU id)
_broken: dict[int, str] = {}  # id(control group) -> why its transport broke


def _key(group) -> tuple:
    # Keyed by the user's group object (kept alive in the value so its id is not reused): a group
    # re-created after a timeout gets a fresh transport on every rank, not the broken one.
    return (id(group), tuple(dist.get_process_group_ranks(group)))


def wait_bound(timeout_s: float | None) -> float:
    """How long a host-side wait on the other ranks may take (group creation, the first launch's
    handshake, the launch barriers, joining the transfers): about as long as a launch's transfers
    may take, and never forever."""
    return max(5.0, 2 * timeout_s + 5) if timeout_s is not None else 60.0


def control_group(group, timeout_s: float | None = None) -> object:
    """A dedicated gloo group with the ranks of `group`, so our messages never interleave with the
    user's collectives (and a CUDA world needs no CPU backend of its own). Created on first use
    (collectively, like every launch), bounded by `wait_bound(timeout_s)`. Refuses a group whose
    transport broke (`mark_broken`): gloo closes the connections of an operation that timed out."""
    key = _key(group)
    if key not in _groups:
        bound = timedelta(seconds=wait_bound(timeout_s))
        _groups[key] = (group, dist.new_group(ranks=list(key[1]), backend="gloo", timeout=bound))
    control = _groups[key][1]
    if id(control) in _broken:
        raise LaunchError(f"the transport of this process group broke in an earlier launch ({_broken[id(control)]}); "
                          "create a new process group (dist.new_group) and launch on it")
    return control


def mark_broken(control, why: str) -> None:
    """Every later use of `control` refuses at once, saying `why` (the first reason is kept)."""
    _broken.setdefault(id(control), why)


JOIN_FIX = "every rank of the group must launch this operator, with the same shapes, in the same order"


def join(group, timeout_s: float | None, what: str) -> None:
    """Every rank of `group` reaches this point within `wait_bound(timeout_s)`, or each raises a
    LaunchError naming the ranks that did not come (gloo's monitored barrier knows them)."""
    control = control_group(group, timeout_s)
    bound = wait_bound(timeout_s)
    try:
        dist.monitored_barrier(group=control, timeout=timedelta(seconds=bound), wait_all_ranks=True)
    except RuntimeError as exc:
        mark_broken(control, f"rank(s) missing from {what}")
        raise LaunchError(f"rank {dist.get_rank(group)}: {missing(exc)} did not reach {what} within {bound:g}s; {JOIN_FIX}") from None


def missing(exc: BaseException) -> str:
    """Which ranks a failed monitored barrier names, in words: rank 0 (its coordinator) knows them;
    the others only know whether rank 0 itself never answered."""
    text = str(exc)
    found = re.search(r"Ranks? ([\d, ]+) failed to pass", text)
    if found:
        return f"rank(s) {found.group(1).strip().rstrip(',')}"
    if "from rank 0" in text and "imed out" in text:
        return "rank 0"
    return "some rank (rank 0's error names it)"


def hosts(group) -> list[str]:
    """The host name of every rank of `group`, in group rank order (collective the first time)."""
    key = _key(group)
    if key not in _hosts:
        names: list = [None] * dist.get_world_size(group)
        if len(names) == 1:
            names = [socket.gethostname()]
        else:
            dist.all_gather_object(names, socket.gethostname(), group=control_group(group))
        _hosts[key] = names
    return _hosts[key]


def on_one_node(group) -> bool:
    """Do all ranks of `group` run on one host (so CUDA IPC can map their buffers)?"""
    return len(set(hosts(group))) == 1


def ranks_on_device(group, device) -> int:
    """How many ranks of `group` (this one included) run on this very GPU (collective the first
    time). One GPU may host several ranks (tests, emulation); p2p then delivers before launching."""
    ids, mine = _device_ids(group, device)
    return ids.count(mine)


def any_device_shared(group, device) -> bool:
    """Do two ranks of `group` run on one GPU, anywhere in the group (collective the first time)? The
    same answer on every rank, so that every rank takes the same handshake: with ranks 1 and 2 on
    one GPU and rank 0 alone, rank 0 must meet the others' barriers too."""
    ids, _ = _device_ids(group, device)
    return len(set(ids)) < len(ids)


def _device_ids(group, device) -> tuple[list, tuple]:
    """Every rank's (host, GPU id), gathered once per group and device; and this rank's."""
    import torch

    key = (*_key(group), str(device))
    props = torch.cuda.get_device_properties(device)
    mine = (socket.gethostname(), str(getattr(props, "uuid", "")) or f"cuda:{torch.device(device).index}")
    if key not in _devices:
        ids: list = [None] * dist.get_world_size(group)
        if len(ids) == 1:
            ids = [mine]
        else:
            dist.all_gather_object(ids, mine, group=control_group(group))
        _devices[key] = ids
    return _devices[key], mine


class NodeBarrier:
    """A barrier between the ranks of one group on one host, through a small file that every rank
    maps: each rank writes how many barriers it has reached into its own slot and polls the others'.
    A gloo barrier takes a TCP round trip through every rank; this one is a store and a few loads
    (`benchmarks/barrier_cpu.py` compares them). It also has a deadline: a peer that stopped or is
    stuck makes the waiting ranks raise, naming it, where a gloo barrier would wait for the process
    group's own timeout.

    Created collectively (`node_barrier`); returns None from there when the ranks cannot map one file
    (different hosts, or hosts whose temporary folders differ), and callers keep gloo's barrier.

    What it orders: on a GPU, device work that each rank synchronised before it arrived (the CUDA
    calls carry their own ordering). The CPU emulation's host writes before it are seen by the peers
    after it on x86 (stores are not reordered there); on a weakly ordered CPU that would take a fence.
    """

    SLOT = 64  # bytes per rank: one cache line each
    SPIN = 200  # polls before the waiting rank starts to yield its CPU

    def __init__(self, words: memoryview, keep: object, rank: int, world: int, timeout_s: float, path: str):
        self.words, self._keep = words, keep  # _keep: the mmap the view points into
        self.path = path  # the file's former name (removed once every rank had mapped it)
        self.rank, self.world, self.timeout_s = rank, world, timeout_s
        self.step = self.SLOT // 8
        self.count = words[rank * self.step]

    def behind(self, count: int) -> list[int]:
        """Ranks that have not reached barrier number `count`."""
        return [r for r in range(self.world) if self.words[r * self.step] < count]

    def wait(self, what: str) -> None:
        """Block until every rank has reached this barrier; `what` names it in the error."""
        self.count += 1
        count = self.count
        self.words[self.rank * self.step] = count
        polls, deadline = 0, None
        while self.behind(count):
            polls += 1
            if polls < self.SPIN:
                continue
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.timeout_s
            elif now > deadline:
                late = ", ".join(str(r) for r in self.behind(count))
                raise LaunchError(f"rank {self.rank}: rank(s) {late} did not reach {what} within {self.timeout_s:g}s "
                                  f"(stopped or stuck); re-create the process group")
            time.sleep(0 if polls < 10 * self.SPIN else 1e-4)


def node_barrier(group, timeout_s: float) -> NodeBarrier | None:
    """A NodeBarrier for the ranks of `group` (collective), or None where they cannot share one."""
    import mmap
    import os
    import tempfile

    control = control_group(group)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    size = world * NodeBarrier.SLOT
    token = int.from_bytes(os.urandom(7), "little") | 1
    path = None
    if rank == 0:
        folder = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # memory-backed where there is one
        fd, path = tempfile.mkstemp(prefix="syncopy-barrier-", dir=folder)
        os.ftruncate(fd, size + 8)
        os.pwrite(fd, token.to_bytes(8, "little"), size)  # after the slots: proves a mapping reaches this file
        os.close(fd)
    first: list = [None] * world
    dist.all_gather_object(first, (path, token) if rank == 0 else None, group=control)
    path, token = first[0]
    mapped = None
    try:
        with open(path, "r+b") as f:
            mapped = mmap.mmap(f.fileno(), size + 8)
        ok = int.from_bytes(mapped[size:size + 8], "little") == token
    except OSError:  # another host, or another temporary folder
        ok = False
    oks: list = [None] * world
    dist.all_gather_object(oks, ok, group=control)
    ok = all(oks)  # and every rank has mapped it (or failed to)
    if rank == 0:
        os.unlink(path)  # the mappings outlive the name: nothing is left behind
    if not ok:
        return None
    return NodeBarrier(memoryview(mapped).cast("q"), mapped, rank, world, timeout_s, path)
