"""The GPU backends' logic that runs without a GPU: which backend a launch gets, what each refuses
(with the fix in the message), how NCCL rounds are cut from the plans, how many programs a
persistent kernel may launch on nccl, and the bound every compiled wait gets."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from syncopy.errors import LaunchError
from syncopy.runtime.transport import backends
from syncopy.runtime.streams import occupancy
from syncopy.runtime.transport.backends.nccl import rounds
from syncopy.runtime.transport.link import Faults, Link
from syncopy.runtime.state.plan import all_gather, all_to_all
from syncopy.schedule import Schedule, load_schedule

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "explicit_all_gather.yaml"


# --- selection ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "device", "single_node", "expected"), [
    ("auto", "cpu", None, "gloo"),
    ("auto", "cpu", False, "gloo"),
    ("auto", "cuda", True, "p2p"),
    ("auto", "cuda", False, "nccl"),
    ("auto", "cuda", None, "nccl"),  # layout unknown: nccl is correct anywhere
    ("p2p", "cuda", False, "p2p"),   # an explicit name is honoured (P2PBackend itself checks the hosts)
    ("nccl", "cuda", True, "nccl"),
    ("gloo", "cpu", None, "gloo"),
])
def test_resolve_picks_by_device_and_node(name, device, single_node, expected):
    assert backends.resolve(name, device, single_node) == expected


@pytest.mark.parametrize(("name", "device", "single_node", "cls"), [
    ("auto", "cpu", None, "GlooBackend"),
    ("auto", "cuda", True, "P2PBackend"),
    ("auto", "cuda", False, "NcclBackend"),
    ("p2p", "cuda", None, "P2PBackend"),
    ("nccl", "cuda", None, "NcclBackend"),
])
def test_select_returns_the_backend_class(name, device, single_node, cls):
    assert backends.select(name, device, single_node).__name__ == cls


@pytest.mark.parametrize(("name", "device", "message"), [
    ("gloo", "cuda", "the gloo backend runs on CPU tensors, got cuda tensors; use backend='nccl', 'p2p' or 'auto'"),
    ("p2p", "cpu", "the p2p backend moves CUDA tensors, got cpu tensors; use backend='gloo' (or 'auto') for CPU tensors"),
    ("nccl", "cpu", "the nccl backend moves CUDA tensors, got cpu tensors; use backend='gloo' (or 'auto') for CPU tensors"),
    ("mpi", "cuda", "unknown backend 'mpi'; use auto, gloo, p2p, nccl"),
])
def test_select_refuses_with_the_fix(name, device, message):
    with pytest.raises(LaunchError) as info:
        backends.select(name, device)
    assert str(info.value) == message


def test_backend_for_asks_no_one_on_cpu_or_for_an_explicit_name():
    # No process group exists here: a collective would fail. Only 'auto' on CUDA asks the hosts.
    assert backends.backend_for("auto", "cpu", group=None) == "gloo"
    assert backends.backend_for("nccl", "cuda", group=None) == "nccl"
    assert backends.backend_for("p2p", "cuda", group=None) == "p2p"


@pytest.mark.parametrize(("name", "link", "faults", "message"), [
    ("p2p", Link(latency_s=1e-3), None, "link emulation runs on the gloo backend; the p2p backend moves chunks over the real link, drop link="),
    ("p2p", None, Faults.of(delay={(0, 0): 0.1}), "the p2p backend cannot inject delays; use backend='gloo' (CPU) for fault injection"),
    ("nccl", None, Faults.of(drop=[(0, 1)]), "the nccl backend cannot inject dropped chunks; use backend='gloo' (CPU) for fault injection"),
    ("p2p", None, Faults.of(kill=(1, 0)), "the p2p backend cannot inject killed ranks; use backend='gloo' (CPU) for fault injection"),
])
def test_gpu_backends_refuse_emulation_they_cannot_do(name, link, faults, message):
    from syncopy.runtime.transport.backends.p2p import refuse_emulation

    with pytest.raises(LaunchError) as info:
        refuse_emulation(name, link, faults, drop=name == "p2p")
    assert str(info.value) == message


def test_p2p_takes_dropped_chunks_and_the_default_link():
    from syncopy.runtime.transport.backends.p2p import refuse_emulation

    refuse_emulation("p2p", Link(), Faults.of(drop=[(1, 0)]), drop=True)
    refuse_emulation("nccl", None, None)


# --- occupancy ------------------------------------------------------------------------------------

@pytest.fixture
def no_sm_env(monkeypatch):
    monkeypatch.delenv("SYNCOPY_NCCL_SMS", raising=False)
    monkeypatch.delenv("NCCL_MAX_NCHANNELS", raising=False)
    return monkeypatch


def test_nccl_keeps_sms_and_copy_engine_backends_keep_none(no_sm_env):
    assert occupancy.reserved_sms("nccl") == occupancy.DEFAULT_NCCL_SMS
    assert occupancy.reserved_sms("p2p") == occupancy.reserved_sms("gloo") == 0
    no_sm_env.setenv("NCCL_MAX_NCHANNELS", "4")
    assert occupancy.reserved_sms("nccl") == 4
    no_sm_env.setenv("SYNCOPY_NCCL_SMS", "12")  # ours wins
    assert occupancy.reserved_sms("nccl") == 12


@pytest.mark.parametrize(("value", "message"), [
    ("lots", "$SYNCOPY_NCCL_SMS is 'lots'; set it to a number of SMs (a positive integer)"),
    ("0", "$SYNCOPY_NCCL_SMS is 0; NCCL needs at least one SM, set it to 1 or more"),
])
def test_bad_sm_reservation_says_what_to_set(no_sm_env, value, message):
    no_sm_env.setenv("SYNCOPY_NCCL_SMS", value)
    with pytest.raises(LaunchError) as info:
        occupancy.reserved_sms("nccl")
    assert str(info.value) == message


def test_persistent_programs_leave_nccl_its_sms(no_sm_env):
    assert occupancy.programs_for(132, "nccl") == 124
    assert occupancy.programs_for(132, "p2p") == 132
    assert occupancy.programs_for(132, "nccl", n_tiles=40) == 40  # never more programs than tiles
    assert occupancy.programs_for(132, "p2p", n_tiles=0) == 132
    with pytest.raises(LaunchError, match="reserves 8 SMs but the device has only 6"):
        occupancy.programs_for(6, "nccl")


def test_grid_check_passes_what_fits_and_refuses_the_rest_with_the_fix(no_sm_env):
    occupancy.check_grid(124, 132, "nccl", persistent=True, kernel="k")
    occupancy.check_grid(4096, 132, "p2p", persistent=False, kernel="k")
    with pytest.raises(LaunchError) as info:
        occupancy.check_grid(4096, 132, "nccl", persistent=False, kernel="ag_gemm_kernel")
    msg = str(info.value)
    assert msg.startswith("kernel 'ag_gemm_kernel' launches 4096 programs on a GPU with 132 SMs; on the nccl backend")
    assert "make it a persistent kernel of at most 124 programs (see the ag_gemm_persistent template" in msg
    assert msg.endswith("or use backend='p2p' on one node (copy engines, no SM)")
    with pytest.raises(LaunchError) as info:
        occupancy.check_grid(132, 132, "nccl", persistent=True, kernel="pk")
    assert "persistent kernel 'pk' launches 132 programs" in str(info.value)
    assert "launch at most 124 programs (NUM_SMS = syncopy.runtime.streams.occupancy.programs(device, 'nccl'))" in str(info.value)


def test_persistent_template_sizes_its_grid_by_backend(no_sm_env, monkeypatch):
    import torch

    from syncopy.templates.ag_gemm_persistent import template

    monkeypatch.setattr(occupancy, "sm_count", lambda device: 132)
    cuda = torch.device("cuda", 0)
    assert template.programs(cuda, 10_000, "nccl") == 124
    assert template.programs(cuda, 10_000, "p2p") == 132
    assert template.programs(cuda, 50, "nccl") == 50
    assert template.programs(torch.device("cpu"), 50, "gloo") == template.CPU_PROGRAMS


# --- NCCL rounds ------------------------------------------------------------------------------------

def _orders(world: int) -> list:
    perms = [list(p) for p in itertools.permutations(range(1, world))]
    return ["ring", "local_first", "bidirectional_ring"] + perms[:2] + perms[-1:]


def _check_rounds(plans, cut) -> None:
    """Every planned transfer exactly once; a rank receives at most once per round, in its planned
    order; a sender holds the chunk (and its `after` chunks) before the round starts."""
    world, c = len(plans), plans[0].chunks_per_rank
    have = [set(range(r * c, (r + 1) * c)) for r in range(world)]
    for transfers in cut:
        assert transfers == sorted(transfers)
        receivers = [dst for _, dst, _ in transfers]
        assert len(receivers) == len(set(receivers)), transfers
        for src, dst, g in transfers:
            node = next(n for n in plans[src].sends() if n.chunk == g and n.peer == dst)
            assert {g, *node.after} <= have[src], (src, dst, g)
        for _, dst, g in transfers:
            have[dst].add(g)
    for dst, p in enumerate(plans):
        got = [(src, g) for transfers in cut for src, d, g in transfers if d == dst]
        assert got == [(n.peer, n.chunk) for n in p.recvs()]
    planned = sorted((src, n.peer, n.chunk) for src, p in enumerate(plans) for n in p.sends())
    assert planned == sorted(x for transfers in cut for x in transfers)
    assert all(h == set(range(world * c)) for h in have)


@pytest.mark.parametrize(("world", "chunks"), [(w, c) for w in (2, 3, 4, 5) for c in (1, 2, 3)])
def test_rounds_cover_every_named_order(world, chunks):
    for order in _orders(world):
        s = Schedule(pattern="all_gather", tensor="A", chunks_per_rank=chunks, order=order)
        plans = [all_gather(s, r, world, 12) for r in range(world)]
        cut = rounds(plans)
        _check_rounds(plans, cut)
        # One chunk per rank per round: nothing waits longer than the schedule itself does.
        assert len(cut) == (world - 1) * chunks, order


@pytest.mark.parametrize("world", [2, 3, 4])
def test_rounds_cover_all_to_all(world):
    s = Schedule(pattern="all_to_all", tensor="X", chunks_per_rank=2, order="ring")
    plans = [all_to_all(s, r, world, 6) for r in range(world)]
    _check_rounds(plans, rounds(plans))


def test_rounds_of_the_explicit_example_follow_relays_and_after():
    plans = [all_gather(load_schedule(EXAMPLE), r, 3, 21) for r in range(3)]
    cut = rounds(plans)
    _check_rounds(plans, cut)
    # Rank 0 relays chunk 5 (rank 2's chunk 1) to rank 1 only after it landed on rank 0.
    landed_on_0 = next(t for t, tr in enumerate(cut) if (2, 0, 5) in tr)
    relayed = next(t for t, tr in enumerate(cut) if (0, 1, 5) in tr)
    assert relayed > landed_on_0


# --- compiled waits -------------------------------------------------------------------------------

def test_compiled_waits_get_a_poll_budget_from_the_measured_poll_cost(monkeypatch):
    from syncopy.runtime import where

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert where.GPU_POLL_S == 200e-9
    assert where.spin_limit(2.5, "cuda") == 12_500_000
    assert where.spin_limit(1e-12, "cuda") == 1


def test_interpreted_waits_are_bounded_in_host_microseconds():
    from syncopy import device
    from syncopy.runtime import where

    assert device.INTERPRETED and device.TIMED_WAITS  # the test session runs the interpreter (conftest)
    assert where.spin_limit(1.0, "cpu") == 1_000_000
    assert where.spin_limit(1e-9, "cpu") == 1


def _recording_p2p(monkeypatch, shared: bool, deadline_s: float = 5.0):
    """A p2p backend of rank 0 of 3 between CPU tensors, its peers' buffers local, recording what it does."""
    import torch

    from syncopy.runtime.transport.backends import p2p
    from syncopy.runtime.transport.backends.p2p import HostMemory, P2PBackend
    from syncopy.runtime.state.context import Context
    from syncopy.runtime.streams.error_ring import LaunchErrors
    from syncopy.runtime.streams.streamops import HostOps

    calls = []

    class Stream:
        def synchronize(self):
            calls.append(("synchronize", self))

    class Recording(HostMemory):
        def stream(self, device):
            return Stream()

        def after_compute(self, stream, device):
            calls.append(("after_compute", stream))

        def using(self, stream):
            calls.append(("using", stream))
            return super().using(stream)

    monkeypatch.setattr(p2p.dist, "barrier", lambda group=None: calls.append(("barrier", group)))
    world, rows = 3, 8
    schedule = Schedule(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=2, order="ring")
    ctx = Context(all_gather(schedule, 0, world, rows), (rows, 4), torch.float32, torch.device("cpu"), 0)
    ctx.schedule = schedule
    be = object.__new__(P2PBackend)
    be.rank, be.world, be.memory, be.faults, be.shared_device, be.group = 0, world, Recording(), Faults(), shared, "control"
    be.ops, be.timeout_s = HostOps(deadline_s), deadline_s
    be.errors = None if shared else LaunchErrors(ctx, be.ops, be.memory.pin, deadline_s)
    be.order = be._push_order(ctx)
    be.streams = {p: be.memory.stream(None) for p in be.order}
    be.peers = {p: (torch.empty_like(ctx.buffer), torch.zeros_like(ctx.signals)) for p in be.order}
    ctx.begin(100)
    return be, ctx, calls


@pytest.mark.parametrize("shared", [False, True])
def test_p2p_pushes_follow_the_compute_stream_and_ranks_on_one_gpu_deliver_first(monkeypatch, shared):
    # Our own slot is written on the compute stream: every push stream waits for it before its
    # first copy. Ranks alone on their GPU then wait (on the device) for each peer's ready word and
    # launch at once; ranks that share a GPU wait for every push to finish and meet in a barrier
    # before any of them launches its kernel.
    from syncopy.runtime.transport.backends.p2p import Push

    be, ctx, calls = _recording_p2p(monkeypatch, shared)
    for p in be.order:
        ctx.signals[ctx.ready_word(p)] = 1  # every peer is ready for launch 1
    Push(be, ctx, 1).start()
    for p, stream in be.streams.items():
        assert calls.index(("after_compute", stream)) < calls.index(("using", stream)), calls
    assert [peer[1][4:10].tolist() for peer in be.peers.values()] == [[1, 1, 0, 0, 0, 0]] * 2  # our chunks' flags, raised
    last_push = max(i for i, call in enumerate(calls) if call[0] == "using")
    after = calls[last_push + 1:]
    if shared:
        assert after == [("synchronize", s) for s in be.streams.values()] + [("barrier", "control")], after
    else:
        assert after == [], after  # the kernel launches at once; nothing on the host waits


def test_p2p_pushes_wait_for_the_peers_ready_word(monkeypatch):
    # A peer that never says it is ready for this launch gets no chunk (its kernel may still read
    # the last launch's): on the device the push stream waits; on CPU the wait has a deadline.
    from syncopy.runtime.transport.backends.p2p import Push

    be, ctx, calls = _recording_p2p(monkeypatch, False, deadline_s=0.2)
    ctx.signals[ctx.ready_word(1)] = 1  # rank 1 is ready, rank 2 is still at launch 0
    with pytest.raises(LaunchError, match=r"^rank 0: rank 2 never got ready for launch 1 within 5.4s; every rank of the group must"):
        Push(be, ctx, 1).start()
    flags = {p: peer[1][4:10].tolist() for p, peer in be.peers.items()}
    assert flags == {1: [1, 1, 0, 0, 0, 0], 2: [0] * 6}


def test_a_peers_failed_connection_is_kept_in_gloos_words_and_a_timeout_is_not(monkeypatch):
    from syncopy.runtime.transport.backends import control
    from syncopy.runtime.transport.backends.gloo import _Threads

    monkeypatch.setattr(control, "gave_up_ranks", lambda group, ranks: {})  # the store answered: nobody gave up
    threads = object.__new__(_Threads)
    threads.gone, threads.group = {}, object()  # a control group of its own: marked broken, nobody else's
    threads._lost_peer(2, RuntimeError("[/src/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:9102. "
                                       "This is typically caused by a remote worker crashing. Check the logs. GLHF!"))
    threads._lost_peer(2, RuntimeError("[pair.cc:537] Read error: Connection reset by peer"))  # the first reason stays
    assert threads.dropped_out() == "rank 2 dropped out (Connection closed by peer [127.0.0.1]:9102)"
    with pytest.raises(RuntimeError, match="Timed out"):
        threads._lost_peer(1, RuntimeError("[pair.cc:100] Timed out waiting 2000ms for recv operation to complete"))
    assert list(threads.gone) == [2]


def test_a_peer_that_gave_up_on_its_own_timeout_is_not_said_to_have_dropped_out(monkeypatch):
    from syncopy.runtime.transport.backends import control
    from syncopy.runtime.transport.backends.gloo import _Threads

    def threads_with(answer):
        monkeypatch.setattr(control, "gave_up_ranks", lambda group, ranks: answer)
        threads = object.__new__(_Threads)
        threads.gone, threads.group = {0: "Connection closed by peer [127.0.0.1]:9102", 1: "Connection reset by peer"}, object()
        return threads.dropped_out()

    assert threads_with({0: "rank 0: chunk 4 never arrived"}) == (
        "rank 0 gave up waiting and closed its connection (rank 0: chunk 4 never arrived within its timeout); "
        "rank 1 dropped out (Connection reset by peer)")
    # No store to ask (its host exited): neither claimed.
    assert threads_with(None).startswith("rank 0 closed its connection (Connection closed by peer [127.0.0.1]:9102): it died, "
                                         "or gave up waiting on its own timeout (its output says which); rank 1 closed")


def test_a_launch_whose_peer_dropped_out_after_delivering_everything_still_fails(monkeypatch):
    import torch

    from syncopy.runtime.launch import outcome
    from syncopy.runtime.state.context import Context

    schedule = Schedule(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=1, order="ring")
    ctx = Context(all_gather(schedule, 1, 3, 4), (4, 2), torch.float32, torch.device("cpu"), 0)
    outcome._raise_if_dropped_out(ctx, 3, "")  # nobody dropped out: nothing to say
    with pytest.raises(LaunchError, match=r"^rank 1: rank 2 dropped out \(Connection reset by peer\) during launch 3; this "
                                                  r"rank's result is complete, but the operator's peers cannot finish: restart the job"):
        outcome._raise_if_dropped_out(ctx, 3, "rank 2 dropped out (Connection reset by peer)")
    assert ctx.broken == "rank 2 dropped out (Connection reset by peer)"


def test_every_rank_takes_the_shared_gpu_handshake_when_any_gpu_hosts_two_ranks(monkeypatch):
    # Ranks 1 and 2 share a GPU, rank 0 is alone: rank 0 counts one rank on its GPU but must still
    # take the host handshake the others take (their barriers need it), or the rounds drift apart.
    import types

    import torch

    from syncopy.runtime.transport.backends import control

    import threading

    monkeypatch.setattr(control, "group_token", lambda group: "group")
    monkeypatch.setattr(control, "group_lock", lambda group: threading.RLock())
    monkeypatch.setattr(control.socket, "gethostname", lambda: "node")
    monkeypatch.setitem(control._devices, ("group", "cuda:0"), [("node", "gpu-a"), ("node", "gpu-b"), ("node", "gpu-b")])
    for uuid, on_mine in (("gpu-a", 1), ("gpu-b", 2)):
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device, uuid=uuid: types.SimpleNamespace(uuid=uuid))
        assert control.ranks_on_device("group", "cuda:0") == on_mine
        assert control.any_device_shared("group", "cuda:0") is True
    monkeypatch.setitem(control._devices, ("group", "cuda:0"), [("node", "gpu-a"), ("node", "gpu-b")])
    assert control.any_device_shared("group", "cuda:0") is False


def test_nccl_grid_check_counts_the_ctas_of_each_program(monkeypatch):
    # num_ctas=2 makes every program two CTAs: 64 programs hold 128 SMs, past the 124 nccl leaves.
    monkeypatch.delenv("SYNCOPY_NCCL_SMS", raising=False)
    monkeypatch.delenv("NCCL_MAX_NCHANNELS", raising=False)
    occupancy.check_grid(64, 132, "nccl", True, "k")  # one CTA each: fits
    with pytest.raises(LaunchError, match=r"^kernel 'k' launches 64 programs of num_ctas=2 CTAs \(128 CTAs\) on a GPU with 132 SMs; "
                                          r"on the nccl backend .* launch at most 124 CTAs in all \(programs x num_ctas\)"):
        occupancy.check_grid(64, 132, "nccl", True, "k", ctas_per_program=2)


def test_nccl_options_say_when_this_torch_cannot_cap_the_ctas(monkeypatch):
    import torch.distributed as dist

    from syncopy.runtime.transport.backends import nccl

    class Options:  # a torch whose NCCL options have no config.max_ctas
        def __init__(self, is_high_priority_stream):
            self.config = object()

    monkeypatch.setattr(dist, "ProcessGroupNCCL", type("PG", (), {"Options": Options}), raising=False)
    monkeypatch.delenv("NCCL_MAX_CTAS", raising=False)
    monkeypatch.delenv("NCCL_MAX_NCHANNELS", raising=False)
    with pytest.warns(UserWarning, match=r"^this torch cannot cap NCCL's CTAs per communicator, so the 8 SMs .* set NCCL_MAX_CTAS=8"):
        nccl.nccl_options(8)
    monkeypatch.setenv("NCCL_MAX_CTAS", "8")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nccl.nccl_options(8)
