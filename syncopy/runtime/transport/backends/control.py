"""The control plane every backend shares: a gloo group with the ranks of the user's group (shape
checks, IPC handle exchange, barriers: small host messages, whatever moves the data), and where
those ranks run.

Internal groups are created by the members of the user's group alone (`member_group`), so a group
can launch while the other ranks of the world do something else: several tensor-parallel groups at
once, one group while the others run their own collectives."""
from __future__ import annotations

import itertools
import re
import socket
import threading
import time
import weakref
from datetime import timedelta

import torch.distributed as dist

from syncopy.errors import LaunchError
from syncopy.runtime.streams.error_ring import wait_bound  # also the bound of every host-side wait on the other ranks

# Per user group (weakly: an entry goes with its group, so a later group that Python places at the
# same address starts afresh): a serial number no other group of this process ever gets, and
# what was found out about the group.
_tokens: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_serials = itertools.count(1)
_groups: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # user group -> its control group
_hosts: dict[int, list[str]] = {}  # group token -> host names
_devices: dict[tuple, list] = {}  # (group token, device) -> every rank's (host, GPU id)
# id(control group) -> (that group, why its transport broke); the group is held, so its id stays its own.
_broken: dict[int, tuple[object, str]] = {}
_generations: dict[tuple, int] = {}  # (user group name, purpose) -> internal groups made for it so far
_locks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # user group -> lock of its internal state
# group token -> the internal groups made for it, held by token so that they can be destroyed once
# their user group is (weak keys would lose them with the group).
_internal: dict[int, list] = {}
_table_lock = threading.Lock()  # the tables above, briefly; never held across a wait on other ranks
_naming = threading.local()  # .name: what torch must call the group this thread creates (member_group)
_rounds: dict[str, int] = {}  # control group name -> `prepared` rendezvous so far (store keys of each round)
# Functions of the live tokens that let go of what other layers keep per group (an operator's
# contexts hold its backends, which hold internal groups): run first by `release_destroyed`.
_release_hooks: list = []
_original_destroy = None  # torch's destroy_process_group, before `watch_destroy` wrapped it


def group_token(group) -> int:
    """A number for `group` that no other process group of this process ever gets, even one created
    after `group` was destroyed and collected (`id()` may come back; this does not): what caches of
    per-group state are keyed by."""
    with _table_lock:
        if group not in _tokens:
            _tokens[group] = next(_serials)
        return _tokens[group]


def group_lock(group) -> threading.RLock:
    """The lock under which this process launches on `group` and creates its internal groups (threads
    launch too; see runtime/launch/sequence.py, launch). One per group: a launch waits for the group's
    other ranks, and must not hold up another group's."""
    with _table_lock:
        return _locks.setdefault(group, threading.RLock())


def member_group(group, purpose: str, backend: str, timeout: timedelta | None, **options) -> object:
    """A new process group with the ranks of `group`, created by those ranks alone (the others may be
    anywhere: in their own launches, their own collectives, or idle). Call under `group_lock(group)`.

    `dist.new_group` without local synchronisation must be entered by every rank of the world in
    the same order, which ranks outside `group` never do. With `use_local_synchronization=True` only
    members enter it, but torch names such a group from its ranks and from how many groups this
    process already holds (2.13: sha1(ranks, len(pg_names))), a count that differs between members
    as soon as they belong to different numbers of groups; members with different names rendezvous
    under different store prefixes and never meet. So the name is one the members already agree on
    without a word: `group`'s own name (they rendezvoused under it: torch's counter for groups every
    rank creates, or its hash for local ones), with the purpose and how many such groups this process
    made for that name before. Distinct groups get distinct names, hence distinct store prefixes and
    connections: messages of different groups never meet."""
    ranks = dist.get_process_group_ranks(group)
    watch_destroy()
    with _table_lock:
        key = (_name_of(group), purpose)
        generation = _generations.get(key, 0)
        _generations[key] = generation + 1
    _naming.name = f"syncopy-{purpose}-{key[0]}-{generation}"
    _name_groups_as_told()
    try:
        made = dist.new_group(ranks=ranks, backend=backend, timeout=timeout, use_local_synchronization=True, **options)
    finally:
        _naming.name = None
    token = group_token(group)
    with _table_lock:
        _internal.setdefault(token, []).append(made)
    return made


def _name_of(group) -> str:
    name = getattr(group, "group_name", None) or dist.distributed_c10d._get_process_group_name(group)
    return str(name)


def _name_groups_as_told() -> None:
    """torch has no argument for a group's name: wrap its name maker, `_process_group_name` (same
    name and signature from 2.4 to 2.13), so that a group this thread creates in `member_group` gets
    the name set there; every other group keeps torch's own name. Where a torch lacks it, its own
    naming stays (right wherever the members hold as many groups)."""
    c10d = dist.distributed_c10d
    with _table_lock:
        original = getattr(c10d, "_process_group_name", None)
        if original is None or getattr(original, "syncopy_wrapped", False):
            return

        def process_group_name(ranks, use_hashed_name):
            told = getattr(_naming, "name", None)
            return told if told is not None else original(ranks, use_hashed_name)

        process_group_name.syncopy_wrapped = True
        c10d._process_group_name = process_group_name


def _registered(group) -> bool:
    """Is `group` a live process group (not destroyed by dist.destroy_process_group)?"""
    world = getattr(dist.distributed_c10d, "_world", None)
    if world is None:  # a torch without the registry: assume every group lives (nothing is released)
        return True
    if not isinstance(group, dist.ProcessGroup):  # a thread world's RankGroup, a test's stand-in: not torch's to destroy
        return True
    return dist.is_initialized() and group in world.pg_map


def live_tokens() -> set[int]:
    """The tokens (`group_token`) of the user groups that still live: caches keyed by any other token
    belong to a destroyed group and may go (`release_destroyed`)."""
    with _table_lock:
        groups = list(_tokens.items())
    return {token for group, token in groups if _registered(group)}


def on_release(hook) -> None:
    """Run `hook(live_tokens)` at every `release_destroyed`, before the internal groups go: it drops
    what its layer keeps for any other token (and with it the internal groups it holds)."""
    with _table_lock:
        if hook not in _release_hooks:
            _release_hooks.append(hook)


def watch_destroy() -> None:
    """Make destroying a process group release syncopy's own groups made for it (`release_destroyed`),
    whichever way it was initialised: torch shuts down the internal groups with the default group,
    but syncopy's references would keep them, and through them the old store (rank 0's TCPStore
    server on MASTER_PORT, a file:// store's file) alive, so that the next init_process_group met the
    previous job's store and never returned. torch has no hook for it: wrap destroy_process_group
    (torch.distributed's name and distributed_c10d's), and init_process_group too, which releases
    first what a destroy through a reference taken before the wrap left behind. Idempotent."""
    global _original_destroy
    c10d = dist.distributed_c10d
    with _table_lock:
        destroy = getattr(c10d, "destroy_process_group", None)
        if destroy is None or getattr(destroy, "syncopy_wrapped", False):
            return
        init = c10d.init_process_group
        _original_destroy = destroy

        def destroy_process_group(group=None):
            try:
                return destroy(group)
            finally:
                release_destroyed()

        def init_process_group(*args, **kwargs):
            release_destroyed()
            return init(*args, **kwargs)

        for wrapper, original in ((destroy_process_group, destroy), (init_process_group, init)):
            wrapper.syncopy_wrapped = True
            wrapper.__wrapped__ = original
            wrapper.__name__, wrapper.__qualname__, wrapper.__doc__ = original.__name__, original.__qualname__, original.__doc__
            for module in (c10d, dist):
                if getattr(module, original.__name__, None) is original:
                    setattr(module, original.__name__, wrapper)


def release_destroyed() -> None:
    """Let go of what was made for process groups that were destroyed since (elastic jobs and tests
    destroy and re-create them): their internal groups are destroyed too (torch would otherwise keep
    their threads and connections), and what was learnt of them is dropped. Called at every first
    launch of a shape and whenever a process group is destroyed (`watch_destroy`); local to this
    rank (destroying a gloo group involves no peer)."""
    alive = live_tokens()
    with _table_lock:
        hooks = list(_release_hooks)
    for hook in hooks:
        hook(alive)
    with _table_lock:
        gone = [t for t in _internal if t not in alive]
        internal = [g for t in gone for g in _internal.pop(t)]
        for user in [u for u in list(_groups.keys()) if not _registered(u)]:
            _groups.pop(user, None)
        for t in [t for t in _hosts if t not in alive]:
            del _hosts[t]
        for key in [k for k in _devices if k[0] not in alive]:
            del _devices[key]
        for key in [k for k, (g, _) in _broken.items() if not _registered(g) or any(g is i for i in internal)]:
            del _broken[key]
    for g in internal:
        with _table_lock:
            _rounds.pop(_name_of(g), None)
        if _registered(g):
            try:
                (_original_destroy or dist.destroy_process_group)(g)
            except Exception:  # already shut down with its transport (a timed-out gloo pair): nothing left to free
                pass


def control_group(group, timeout_s: float | None = None) -> object:
    """A dedicated gloo group with the ranks of `group`, so our messages never interleave with the
    user's collectives (and a CUDA world needs no CPU backend of its own). Created on first use by
    the group's ranks alone (`member_group`), bounded by `wait_bound(timeout_s)`. Refuses a group
    whose transport broke (`mark_broken`): gloo closes the connections of an operation that timed out."""
    with group_lock(group):
        if group not in _groups:
            _groups[group] = member_group(group, "control", "gloo", timedelta(seconds=wait_bound(timeout_s)))
        control = _groups[group]
    refuse_broken(control)
    return control


def refuse_broken_group(group) -> None:
    """`refuse_broken` for the control group of the user's `group`, if one was made."""
    with _table_lock:
        control = _groups.get(group)
    if control is not None:
        refuse_broken(control)


def refuse_broken(control) -> None:
    """A LaunchError, saying why, if `control`'s group was marked broken (`mark_broken`)."""
    if id(control) in _broken:
        raise LaunchError(f"the transport of this process group broke in an earlier launch ({_broken[id(control)][1]}); "
                          "create a new process group (dist.new_group) and launch on it")


def transport_text(exc: BaseException) -> str:
    """A transport error's own text (gloo's), without its source path and its advice."""
    text = str(exc).split(". This is typically")[0]
    return re.sub(r"^\[[^\]]*\] ", "", text).strip() or type(exc).__name__


def mark_broken(control, why: str) -> None:
    """Every later use of `control` refuses at once, saying `why` (the first reason is kept)."""
    with _table_lock:  # transfer threads report too
        _broken.setdefault(id(control), (control, why))


def gave_up(control, why: str) -> None:
    """This rank's transfers on `control` timed out: gloo closes the connections of a wait that
    timed out, so its peers find them closed. Say so in the store, so that they report this rank as
    having given up (`gave_up_ranks`), not as dropped out: it is alive, and its own error says why."""
    try:
        _store().set(f"syncopy-gave-up/{_name_of(control)}/{dist.get_rank(control)}", why)
    except Exception:  # no store to tell (it went with rank 0): peers say what they saw
        pass


GAVE_UP_GRACE_S = 1.0  # how long a rank that found a connection closed waits for its peer's word


def gave_up_ranks(control, ranks: list[int], grace_s: float = GAVE_UP_GRACE_S) -> dict[int, str] | None:
    """Of `ranks` (ranks of `control` whose connection to this one closed), those that said they gave
    up (`gave_up`), with their reason; waits up to `grace_s` for a word that may be on its way (a
    peer writes it just after its wait timed out). The others died, or lost their host. None when
    the store does not answer (its host, rank 0 or the launcher, exited): then nobody can tell."""
    found: dict[int, str] = {}
    try:
        keys = {r: f"syncopy-gave-up/{_name_of(control)}/{r}" for r in ranks}
        store = _store()
        deadline = time.monotonic() + grace_s
        while True:
            for r in [r for r in keys if r not in found]:
                if store.check([keys[r]]):
                    found[r] = store.get(keys[r]).decode()
            if len(found) == len(keys) or time.monotonic() > deadline:
                return found
            time.sleep(_READY_POLL_S)
    except Exception:
        return None


def _store():
    """The store every rank of the job reaches (the default group's)."""
    return dist.distributed_c10d._get_default_store()


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


#: How often a rank preparing a first launch (compiling, probing) says it is alive; the longest any
#: rank may prepare while the others wait for it (a compile that takes longer is stuck).
HEARTBEAT_S = 0.5
PREPARE_LIMIT_S = 1800.0
_READY_POLL_S = 0.02


def prepared(group, timeout_s: float | None, what: str, prepare):
    """`prepare()` (compile and probe the first launch of a shape), then wait until every rank of
    `group` has prepared too; returns what `prepare` returned. The transfers' and the kernel's
    waits start after this, so their `timeout_s` never counts a compile.

    A compile may take longer than any timeout (a minute on GPUs), so the wait is not bounded by
    the clock but by signs of life: a preparing rank beats in the process group's store every
    HEARTBEAT_S, and the others wait as long as it does (up to PREPARE_LIMIT_S). A rank that stopped
    beating (it died, or never launched) is named after `wait_bound(timeout_s)` without a sign; one
    whose preparation failed is named at once."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if world == 1:
        return prepare()
    name = _name_of(control_group(group, timeout_s))
    with _table_lock:
        n = _rounds.get(name, 0)
        _rounds[name] = n + 1
    store = _store()
    prefix = f"syncopy-ready/{name}/{n}"
    try:
        with _Heartbeat(store, f"{prefix}/beat/{rank}"):
            result = prepare()
    except BaseException as exc:
        said = (str(exc).splitlines() or [""])[0][:600] or type(exc).__name__  # the peers quote it
        _store_op(lambda: store.set(f"{prefix}/ready/{rank}", f"failed: {said}"), rank, what)
        raise
    _store_op(lambda: store.set(f"{prefix}/ready/{rank}", "ok"), rank, what)
    _await_prepared(store, prefix, rank, world, wait_bound(timeout_s), what)
    if n:  # every rank has left round n - 1 (they all reached round n): its keys may go
        _store_op(lambda: [store.delete_key(f"syncopy-ready/{name}/{n - 1}/{k}/{rank}") for k in ("beat", "ready")], rank, what)
    return result


class _Heartbeat:
    """A thread that adds one to `key` in `store` every HEARTBEAT_S while the `with` block runs."""

    def __init__(self, store, key: str):
        self.store, self.key = store, key
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True, name="syncopy-heartbeat")

    def _beat(self) -> None:
        while True:
            try:
                self.store.add(self.key, 1)
            except Exception:  # the store went away: the waits below say so
                return
            if self.done.wait(HEARTBEAT_S):
                return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()


def _store_op(op, rank: int, what: str):
    try:
        return op()
    except (RuntimeError, dist.DistError) as exc:
        raise LaunchError(f"rank {rank}: the process group's store stopped answering while the ranks prepared {what} "
                          f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); the rank that hosts it (rank 0, "
                          "or the launcher) may have died: look there, then restart the job") from None


def _await_prepared(store, prefix: str, rank: int, world: int, bound: float, what: str) -> None:
    """Wait for every rank's ready word in `store`; see `prepared`."""
    start = time.monotonic()
    waiting = {r: (-1, start) for r in range(world) if r != rank}  # rank -> (its beats, when they last moved)
    while waiting:
        for r in list(waiting):
            key = f"{prefix}/ready/{r}"
            if not _store_op(lambda: store.check([key]), rank, what):
                continue
            status = _store_op(lambda: store.get(key), rank, what).decode()
            if status != "ok":
                raise LaunchError(f"rank {rank}: rank {r} could not prepare {what}: {status.removeprefix('failed: ')}")
            del waiting[r]
        now = time.monotonic()
        for r, (beats, moved) in list(waiting.items()):
            count = _store_op(lambda: store.add(f"{prefix}/beat/{r}", 0), rank, what)
            if count != beats:
                waiting[r] = (count, now)
        silent = sorted(r for r, (_, moved) in waiting.items() if now - moved > bound)
        if silent:
            ranks = ", ".join(map(str, silent))
            raise LaunchError(f"rank {rank}: rank(s) {ranks} stopped before {what} (no sign of life for {bound:g}s while "
                              f"the others had compiled it: it died, or never launched); {JOIN_FIX}")
        if waiting and now - start > PREPARE_LIMIT_S:
            ranks = ", ".join(map(str, sorted(waiting)))
            raise LaunchError(f"rank {rank}: rank(s) {ranks} still compiled {what} after {PREPARE_LIMIT_S:g}s; "
                              "its compilation is stuck: look at that rank's stack")
        if waiting:
            time.sleep(_READY_POLL_S)


def hosts(group) -> list[str]:
    """The host name of every rank of `group`, in group rank order (collective the first time)."""
    key = group_token(group)
    with group_lock(group):  # one collective at a time on the control group
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

    key = (group_token(group), str(device))
    props = torch.cuda.get_device_properties(device)
    mine = (socket.gethostname(), str(getattr(props, "uuid", "")) or f"cuda:{torch.device(device).index}")
    with group_lock(group):  # one collective at a time on the control group
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
