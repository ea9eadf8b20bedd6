"""p2p's device-facing steps in the order the GPU needs them (issue 28, items 1, 2, 5 and 7), on CPU:
a fake of the memory layer (HostMemory, recording what it is asked) and of the stream operations
(HostOps, recording each call), rank 0 of 3, its peers' buffers and pads local tensors.

- Peer access: every peer's buffer and pad are opened on this rank's device (the mapping, and the
  peer access CUDA enables for it, live in our context), only once every pair was found reachable,
  and before the first write to that peer; the token check reads through that very mapping.
- A dead or absent peer: the kernel's error words are copied into the ring before anything on the
  compute stream waits for a peer, and nothing there waits without a bound: the launch's end is
  always reached and `check(wait=True)` raises a SyncopyTimeout naming the peer, never hangs. The
  same for reduce_scatter's and all_reduce's waits (SendReduce). A failure marks the context broken.
- One hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1): the pushes, whose first step is a wait for
  the peer, are enqueued behind the kernel, starting from where the compute stream was before it.
"""
from __future__ import annotations

import threading
import time

import pytest
import torch

from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.runtime.state.context import Context
from syncopy.runtime.state.plan import all_gather, reduce
from syncopy.runtime.streams import streamops
from syncopy.runtime.transport.backends import p2p
from syncopy.runtime.transport.backends.p2p import HostMemory, P2PBackend
from syncopy.runtime.transport.link import Faults
from syncopy.schedule import Schedule

WORLD, ROWS, BOUND_S = 3, 8, 0.5
HUNG_S = 20.0  # a launch or check that has not returned by then waits for a peer without a bound


class Compute:
    """The compute stream as a GPU has it: `wait_stream` waits, on the device, for everything
    enqueued on the other stream, however long that takes (here: the host thread blocks)."""

    def __init__(self, calls: list):
        self.calls = calls

    def wait_stream(self, other) -> None:
        self.calls.append(("compute waits for a stream",))
        other.synchronize()

    def synchronize(self) -> None:
        pass


class Recording(HostMemory):
    """HostMemory that logs what p2p asks of the device. Device-like (`device_like`): push and send
    streams are worker threads whose waits do not give up within the test (a device wait has no
    deadline), and the compute stream waits for another stream without a bound."""

    def __init__(self, calls: list, device_like: bool = False):
        self.calls, self.device_like = calls, device_like
        self.opened: dict[int, int] = {}  # id of the tensor handed out -> the peer it maps

    def stream(self, device):
        return streamops.HostStream(60.0, name="test-push") if self.device_like else super().stream(device)

    def send_stream(self, device, deadline_s: float):
        return streamops.HostStream(60.0 if self.device_like else deadline_s, name="test-send")

    def compute_stream(self, device):
        return Compute(self.calls)

    def after_compute(self, stream, device) -> None:
        self.calls.append(("push stream follows the compute stream",))

    def mark(self, device):
        self.calls.append(("mark",))
        return "mark"

    def after_mark(self, stream, mark) -> None:
        self.calls.append(("push stream follows", mark))

    def reach(self, group, device) -> list[str]:
        self.calls.append(("reach", str(device)))
        return []

    def share(self, t):
        return t

    def open(self, shared, device=None):
        peer, t = shared
        self.calls.append(("open", peer, None if device is None else str(device)))
        self.opened[id(t)] = peer
        return t

    def read_word(self, pad, index: int) -> int:
        self.calls.append(("read", self.opened.get(id(pad)), index))
        return int(pad[index])

    def bounded_wait(self, words, late, rank, world, epoch, limit, what) -> None:
        self.calls.append(("bounded wait", what))
        super().bounded_wait(words, late, rank, world, epoch, limit, what)


class RecordingOps(streamops.HostOps):
    """HostOps that logs each call with the peer whose memory it writes (None: this rank's)."""

    def __init__(self, calls: list, deadline_s: float):
        super().__init__(deadline_s)
        self.calls, self.ranges = calls, []  # (lo, hi, peer) of every peer tensor

    def peer_of(self, addr: int):
        return next((p for lo, hi, p in self.ranges if lo <= addr < hi), None)

    def write32(self, addr, value, stream):
        self.calls.append(("write32", self.peer_of(addr), addr))
        super().write32(addr, value, stream)

    def copy(self, dst, src, n, stream):
        self.calls.append(("copy", self.peer_of(dst), src))
        super().copy(dst, src, n, stream)

    def wait32(self, addr, value, stream):
        self.calls.append(("wait32", "compute" if stream is None else "side", addr))
        super().wait32(addr, value, stream)

    def wait_event(self, stream, event):
        self.calls.append(("wait_event", "compute" if stream is None else "side"))
        super().wait_event(stream, event)


def _backend(monkeypatch, ctx: Context, device_like: bool = False, peers_ready: tuple = (1, 2)):
    """Rank 0 of 3 connected through the fakes: the exchange hands it peer tensors of its own making
    (each pad with the token its owner wrote), every pair reachable, no GPU shared."""
    calls: list = []
    monkeypatch.setattr(p2p, "wait_bound", lambda timeout_s: BOUND_S)
    monkeypatch.setattr(p2p, "node_barrier", lambda group, timeout_s: None)
    monkeypatch.setattr(p2p.dist, "barrier", lambda group=None: None)
    spare = p2p.dev.SIG_HEADER + ctx.n_flags + 1
    peers = {r: (torch.zeros_like(ctx.buffer), torch.zeros_like(ctx.signals)) for r in range(1, WORLD)}
    for r, (_, sig) in peers.items():
        sig[spare] = 0x1000 + r

    def exchange(out, mine, group=None):
        if isinstance(mine, tuple) and len(mine) == 3:  # buffers and pads
            out[0] = mine
            for r, (buf, sig) in peers.items():
                out[r] = ((r, buf), (r, sig), 0x1000 + r)
        else:  # SendReduce's inboxes
            out[0] = mine
            for r in peers:
                out[r] = (r, torch.zeros_like(mine))

    monkeypatch.setattr(p2p.dist, "all_gather_object", exchange)
    mem = Recording(calls, device_like)
    ops = RecordingOps(calls, BOUND_S)
    for r, (buf, sig) in peers.items():
        ops.ranges += [(buf.data_ptr(), buf.data_ptr() + buf.nbytes, r), (sig.data_ptr(), sig.data_ptr() + sig.nbytes, r)]
    be = object.__new__(P2PBackend)
    be.memory, be.ops, be.faults, be.timeout_s = mem, ops, Faults(), 0.1
    be.rank, be.world, be.group, be.user_group = 0, WORLD, "control", "group"
    be.peers, be.streams, be.order, be.shared_device, be.errors = None, {}, {}, False, None
    ctx.begin(100)
    for p in peers_ready:
        ctx.signals[ctx.ready_word(p)] = 1  # peer p is ready for launch 1 (its word in our pad)
    be._connect(ctx)
    return be, calls, peers


def _consumer() -> Context:
    schedule = Schedule(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=2, order="ring")
    ctx = Context(all_gather(schedule, 0, WORLD, ROWS), (ROWS, 4), torch.float32, torch.device("cpu"), 0)
    ctx.schedule = schedule
    return ctx


def _producer(pattern: str) -> Context:
    schedule = Schedule(pattern=pattern, tensor="C", dim=0, chunks_per_rank=1, order="local_first")
    full = (WORLD * ROWS, 4) if pattern == "all_reduce" else None
    ctx = Context(reduce(schedule, 0, WORLD, ROWS, size=WORLD * ROWS), (ROWS, 4), torch.float32, torch.device("cpu"), 0,
                  producer=True, full_shape=full)
    ctx.schedule = schedule
    return ctx


def _bounded(fn, *args):
    """`fn(*args)` on a thread: (its exception or None, seconds taken); fails if it hangs."""
    out: dict = {}

    def run():
        t0 = time.monotonic()
        try:
            fn(*args)
        except BaseException as exc:  # handed to the test
            out["exc"] = exc
        out["s"] = time.monotonic() - t0

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HUNG_S)
    assert not thread.is_alive(), f"{getattr(fn, '__name__', fn)} still waits for a peer after {HUNG_S:g}s: a wait without a bound"
    return out.get("exc"), out["s"]


def _launch(be, ctx: Context, epoch: int = 1):
    """A consumer launch as sequence.py runs it: start (before the kernel), the kernel, join, finish."""
    push = be.start(ctx, epoch)
    be.memory.calls.append(("kernel",))
    push.join()
    be.finish(ctx, epoch)
    return push


def test_peers_are_opened_on_this_ranks_device_and_reached_before_the_first_write(monkeypatch):
    ctx = _consumer()
    be, calls, _ = _backend(monkeypatch, ctx)
    _launch(be, ctx)
    assert calls[0] == ("reach", "cpu"), calls[:3]  # every pair checked before any handle is opened
    opens = {c[1]: i for i, c in enumerate(calls) if c[0] == "open"}
    assert all(c[2] == "cpu" for c in calls if c[0] == "open"), [c for c in calls if c[0] == "open"]  # ours, not the owner's
    for peer in (1, 2):
        first_write = min(i for i, c in enumerate(calls) if c[0] in ("write32", "copy") and c[1] == peer)
        assert opens[peer] < first_write, (peer, calls)
    # The token check reads each peer's pad through the mapping opened here, the one the writes use.
    assert [c[1] for c in calls if c[0] == "read"] == [1, 2], calls


def test_cuda_memory_opens_a_peers_handle_on_this_ranks_gpu_not_the_owners():
    # torch's rebuild opens the IPC handle under a guard of the device it is handed: the owner's GPU
    # (3) would map the peer's memory in a context made on that GPU and leave ours without peer
    # access. The real rebuild's parameters: a torch that renamed `storage_device` fails here.
    import functools
    import inspect

    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    seen = {}

    @functools.wraps(rebuild_cuda_tensor)
    def rebuild(*args):
        seen["args"] = args
        return "mapped"

    params = list(inspect.signature(rebuild_cuda_tensor).parameters)
    args = [f"<{p}>" for p in params]
    args[params.index("storage_device")] = 3
    assert p2p.CudaMemory().open((rebuild, tuple(args)), torch.device("cuda", 1)) == "mapped"
    assert seen["args"][params.index("storage_device")] == 1
    assert [a for i, a in enumerate(seen["args"]) if i != params.index("storage_device")] == [
        a for i, a in enumerate(args) if i != params.index("storage_device")]


def test_a_peer_pair_without_peer_access_refuses_p2p_in_one_line(monkeypatch):
    ctx = _consumer()
    monkeypatch.setattr(Recording, "reach", lambda self, group, device: ["rank 0 (GPU 0) has no peer access to rank 2's GPU 3"])
    with pytest.raises(LaunchError) as err:
        _backend(monkeypatch, ctx)
    assert str(err.value) == ("the p2p backend writes into the peers' GPU memory, but rank 0 (GPU 0) has no peer access to rank 2's "
                              "GPU 3; use backend='nccl' (backend='auto' picks it on such a node)")


def test_auto_picks_nccl_where_a_gpu_cannot_reach_another(monkeypatch):
    from syncopy.runtime.transport import backends
    from syncopy.runtime.transport.backends import control

    monkeypatch.setattr(control, "on_one_node", lambda group: True)
    for reachable, expected in ((True, "p2p"), (False, "nccl")):
        monkeypatch.setattr(p2p, "peers_reachable", lambda group, device, ok=reachable: ok)
        assert backends.backend_for("auto", "cuda", group="group", device=torch.device("cuda", 0)) == expected
    assert backends.backend_for("p2p", "cuda", group="group") == "p2p"  # an explicit name: P2PBackend refuses, saying why


def test_unreachable_peers_are_the_same_list_on_every_rank(monkeypatch):
    # Rank 0 sees GPUs a and b but has no peer access from a to b; the lists of every rank are
    # exchanged, so rank 0 also refuses for rank 2, which cannot see rank 0's GPU at all.
    import types

    from syncopy.runtime.transport.backends import control

    monkeypatch.setattr(control, "_device_ids", lambda group, device: ([("n", "a"), ("n", "b"), ("n", "c")], ("n", "a")))
    monkeypatch.setattr(control, "group_token", lambda group: "reach-test")
    monkeypatch.setattr(control, "group_lock", lambda group: threading.RLock())
    monkeypatch.setattr(control, "control_group", lambda group, timeout_s=None: "control")
    monkeypatch.setattr(p2p.dist, "get_rank", lambda group: 0)
    monkeypatch.setattr(p2p.dist, "get_world_size", lambda group: 3)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(uuid="abc"[i]))
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda a, b: (a, b) != (0, 1))

    def exchange(out, mine, group=None):
        out[:] = [mine, [], ["rank 2 (GPU 0) cannot see rank 0's GPU (CUDA_VISIBLE_DEVICES hides it)"]]

    monkeypatch.setattr(p2p.dist, "all_gather_object", exchange)
    monkeypatch.setattr(p2p, "_reach", {})
    assert p2p.unreachable_peers("group", torch.device("cuda", 0)) == [
        "rank 0 (GPU 0) has no peer access to rank 1's GPU 1", "rank 2 (GPU 0) cannot see rank 0's GPU (CUDA_VISIBLE_DEVICES hides it)"]
    assert not p2p.peers_reachable("group", torch.device("cuda", 0))


def test_the_kernels_error_words_are_copied_before_any_wait_for_a_peer(monkeypatch):
    ctx = _consumer()
    be, calls, _ = _backend(monkeypatch, ctx)
    _launch(be, ctx)
    after = calls[calls.index(("kernel",)):]
    error_words = ctx.word_address(p2p.dev.SIG_ERROR.value)
    copied = next(i for i, c in enumerate(after) if c[0] == "copy" and c[2] == error_words)
    waits = [i for i, c in enumerate(after) if c[0] in ("bounded wait", "compute waits for a stream") or c[:2] == ("wait32", "compute")]
    assert waits and copied < min(waits), after
    # Nothing on the compute stream waits for a peer without a bound.
    assert ("compute waits for a stream",) not in calls and ("wait32", "compute") not in [c[:2] for c in after], after
    assert ("bounded wait", p2p.peer_wait.PUSHED) in after, after
    be.check(wait=True)  # every push came: nothing to say
    assert ctx.broken is None


def test_a_peer_that_never_gets_ready_is_a_timeout_naming_it_never_a_hang(monkeypatch):
    # Rank 2 died (or skipped the launch): its ready word never comes, our push stream to it waits
    # on the device for good. The launch still returns, its end is reached within the bound, and
    # check(wait=True) raises a SyncopyTimeout naming rank 2; the context takes no more launches.
    ctx = _consumer()
    be, calls, _ = _backend(monkeypatch, ctx, device_like=True, peers_ready=(1,))
    try:
        exc, took = _bounded(_launch, be, ctx)
        assert exc is None, exc
        exc, took = _bounded(be.check, True)
        assert isinstance(exc, SyncopyTimeout), exc
        assert "rank 2 never took it: it never got ready for launch 1 within 0.5s after this rank's kernel" in str(exc), str(exc)
        assert exc.rank == 0 and exc.epoch == 1
        assert took < HUNG_S / 2
        assert "rank 2 never took it" in (ctx.broken or ""), ctx.broken
    finally:
        ctx.signals[ctx.ready_word(2)] = 1  # let the push stream go
        for stream in be.streams.values():
            stream.synchronize(5)
            stream.close()


@pytest.mark.parametrize("pattern", ["reduce_scatter", "all_reduce"])
def test_send_reduce_waits_for_peers_with_a_bound_and_names_a_dead_one(monkeypatch, pattern):
    # Rank 1's partial sums (and, all_reduce, its reduced rows) never come: the compute stream's
    # waits are bounded, the launch ends, and the late words name rank 1.
    ctx = _producer(pattern)
    be, calls, peers = _backend(monkeypatch, ctx, device_like=True)
    r = be.reducer
    assert isinstance(r, p2p.SendReduce)
    try:
        ctx.signals[ctx.delivered_word(2)] = 1  # rank 2 delivered, rank 1 never does
        ctx.signals[ctx.gathered_word(2)] = 1
        ctx.signals[ctx.ready_word(1)] = ctx.signals[ctx.ready_word(2)] = 0  # both reduced launch 0
        for g in range(ctx.n_chunks):  # the kernel raised every flag
            ctx.signals[p2p.dev.SIG_HEADER + g] = 1
        out = torch.zeros(ROWS if pattern == "reduce_scatter" else WORLD * ROWS, 4)
        launch = be.start_reduce(ctx, out, 1)
        calls.append(("kernel",))
        exc, _ = _bounded(launch.join)
        assert exc is None, exc
        after = calls[calls.index(("kernel",)):]
        assert ("compute waits for a stream",) not in after and ("wait32", "compute") not in [c[:2] for c in after], after
        assert ("wait_event", "compute") not in after, after
        assert ("bounded wait", p2p.peer_wait.DELIVERED) in after, after
        exc, _ = _bounded(be.check, True)
        assert isinstance(exc, SyncopyTimeout), exc
        assert "the partial sums from rank 1 never came within 0.5s after this rank's kernel" in str(exc), str(exc)
        assert ctx.broken is not None
    finally:
        for stream in r.streams.values():
            stream.close()


def test_one_hardware_queue_enqueues_the_pushes_behind_the_kernel(monkeypatch):
    # CUDA_DEVICE_MAX_CONNECTIONS=1: a push stream's wait for a peer enqueued before the kernel would
    # hold the kernel back. The pushes go behind it, starting from where the compute stream was
    # before it (its own slot written), not from its end (the kernel waits for the peers' pushes).
    from syncopy.runtime.streams import hardware_queues

    ctx = _consumer()
    be, calls, _ = _backend(monkeypatch, ctx)
    monkeypatch.setattr(hardware_queues, "single_queue", lambda: True)
    monkeypatch.setattr(Recording, "sends_before_kernel", False)  # as on a GPU
    _launch(be, ctx)
    kernel = calls.index(("kernel",))
    ready_waits = [i for i, c in enumerate(calls) if c[0] == "wait32"]
    assert ready_waits and min(ready_waits) > kernel, calls[kernel - 3:]
    assert ("push stream follows", "mark") in calls[kernel:] and ("push stream follows the compute stream",) not in calls, calls
    assert calls.index(("mark",)) < kernel
    flags = [i for i, c in enumerate(calls) if c[0] == "write32" and c[1] is not None and i > min(ready_waits)]
    assert flags and min(flags) > kernel, calls[kernel:]  # the chunks' flags (and copies) behind the kernel too


def test_one_hardware_queue_keeps_the_pushes_first_for_a_grid_that_is_not_resident(monkeypatch):
    import types

    from syncopy.runtime.streams import hardware_queues, occupancy

    ctx = _consumer()
    be, calls, _ = _backend(monkeypatch, ctx)
    monkeypatch.setattr(hardware_queues, "single_queue", lambda: True)
    monkeypatch.setattr(Recording, "sends_before_kernel", False)
    monkeypatch.setattr(occupancy, "sm_count", lambda device: 132)
    be.check_grid(133, False, "k", types.SimpleNamespace(type="cuda"))
    with pytest.warns(UserWarning, match=r"^with CUDA_DEVICE_MAX_CONNECTIONS=1 every stream shares one hardware queue"):
        _launch(be, ctx)
    kernel = calls.index(("kernel",))
    assert max(i for i, c in enumerate(calls) if c[0] == "wait32") < kernel
    be.check_grid(132, True, "k", types.SimpleNamespace(type="cuda"))
    assert be.pushes_after_kernel


def test_a_failure_read_from_the_ring_marks_the_context_broken(monkeypatch):
    # The kernel of launch 1 ran out waiting for rank 1's chunk 0: read at the next check, it breaks
    # the context, so later launches refuse with the reason instead of going on unreported.
    ctx = _consumer()
    be, calls, _ = _backend(monkeypatch, ctx)
    push = be.start(ctx, 1)
    ctx.signals[: p2p.dev.SIG_HEADER] = torch.tensor([1, 0, 2, ctx.word], dtype=torch.int32)  # flag, rank, unit (chunk 2), epoch
    push.join()
    be.finish(ctx, 1)
    with pytest.raises(SyncopyTimeout, match=r"^rank 0 waited 0.1s for chunk 0 of rank 1 \(epoch 1\)"):
        be.check()
    assert ctx.broken is not None and ctx.broken.startswith("SyncopyTimeout: rank 0 waited 0.1s for chunk 0 of rank 1"), ctx.broken


def test_a_launch_that_never_ends_is_bounded_on_the_host_and_names_the_peer_that_never_started(monkeypatch):
    # One hardware queue: the pushes' device wait for a dead peer holds the whole queue, the bounded
    # wait and the launch's end event included. check(wait=True) still returns within its bound,
    # naming the peer whose host never said it started the launch (the node barrier's shared file).
    import types

    from syncopy.runtime.streams import hardware_queues

    ctx = _consumer()
    be, calls, _ = _backend(monkeypatch, ctx)
    be.handshake = types.SimpleNamespace(words=[0] * (8 * WORLD), step=8)
    be.handshake.words[1 * 8 + 1] = 1  # rank 1 started launch 1; rank 2 never did
    monkeypatch.setattr(hardware_queues, "single_queue", lambda: True)
    _launch(be, ctx)
    assert be.handshake.words[0 * 8 + 1] == 1  # ours, said at the launch
    assert be.behind(1) == [2]
    real_done = be.ops.done
    monkeypatch.setattr(be.ops, "done", lambda event: False if event is be.waits.settled else real_done(event))
    exc, took = _bounded(be.check, True)
    assert isinstance(exc, SyncopyTimeout), exc
    assert str(exc).startswith("rank 0 waited 0.1s for chunk 0 of rank 2 (epoch 1) and it never arrived; rank 2 never started launch 1 "
                               "(it died, or skipped it), and this rank's launch had not ended 0.6s later (CUDA_DEVICE_MAX_CONNECTIONS=1"), exc
    assert took < 3 and ctx.broken is not None
