r"""A pipeline on the thread world: every rank's linked operators in one process, each rank's links its own.

    tw = ThreadWorld(templates.get("tp_mlp").fused(), 4)      # a pipeline template's operator
    ys = tw.run(lambda op, group, r: tp_mlp.launch(op, x[r], w1[r], w2[r], group=group))

Each rank's `launch` runs against a view of the operator of its own (its own activations H, kept
per shape as the template keeps them) whose `with pipeline:` block records the launches instead of
running them (runtime/pipeline/__init__.py's recording). From what rank 0 recorded the pipeline infers the
edges (the tensors the launches share, `infer_edges`); every rank must record the same structure.
Each operator becomes its linked variant, run on a ThreadWorld of its own, and each edge gets one
`LinkSignals` per rank (the shared tensor is per rank):

    caller      [link words, every rank][== op 1 on every rank ==][join][== op 2 on every rank ==][join][link error words -> rings]
    rank r        (its compute stream)    [kernel: h chunks rise]         [kernel: waits h's chunks]
                                              (op 1's pushes / op 2's sends on each rank's own streams, as in threads.py)

The operators run in order: each operator's launch starts on every rank once the caller's stream
holds the operator before it, so op 2's tiles find op 1's chunks raised and the links' waits pass
through. On a GPU op 2 beside op 1 would have W ranks' waiting tiles share the SMs W ranks' op 1
tiles need (runtime/pipeline/__init__.py, "Streams": the reader may never hold every SM); that is not done
here (`placement.why` says so). A launch enqueues and returns; a starved reader's error words are
copied into its link's ring and read, with each operator's own errors, at the next launch or
`synchronize()`: the first in stream order (op 1's, then its link's, then op 2's) raises.
"""
from __future__ import annotations

import torch

from syncopy.errors import LaunchError, SyncopyError
from syncopy.runtime.pipeline.edges import Launch, infer_edges, structure, writer_chunks
from syncopy.runtime.pipeline.links import LinkSignals, Reader, link_args
from syncopy.runtime.pipeline.placement import Placement
from syncopy.runtime.pipeline.run import Pipeline, _probe_writes
from syncopy.runtime.where import on_device, spin_limit
from syncopy.runtime.worlds.rank_group import RankGroup


RING_DRAIN = 64  # errors read and dropped per ring at most, after a failure (ErrorRing.RING launches)


class Recorder(Pipeline):
    """A rank's `with pipeline:` block: records the launches (Pipeline.add) and keeps them."""

    def __init__(self):
        super().__init__()
        self.launches: list[Launch] = []

    def run(self, launches):
        self.launches = launches


class Plan:
    """What a thread pipeline runs for one launch structure: edges, variants, each rank's links."""

    def __init__(self, edges, variants, links: list[dict]):
        self.edges, self.variants, self.links = edges, variants, links  # links[r]: Edge -> LinkSignals
        self.need: dict[tuple, list[int]] = {}  # per edge and writer launch shape: its tiles per chunk of the link

    def link_args(self, rank: int, index: int) -> dict:
        return link_args(self.links[rank], index)


class ThreadPipeline:
    """Run a pipeline template's operator (one with a `pipeline` and `rank_view()`, e.g. tp_mlp's) on a
    thread world of `world` ranks (module doc). ThreadWorld delegates here."""

    placement = Placement(False, False, "in order on the caller's stream: a thread world runs each operator on "
                                                  "every rank, then the next (op 2 beside op 1 would let W ranks' waiting "
                                                  "tiles hold the SMs op 1 needs)")

    def __init__(self, op, world: int, device: str, pushes: str | None, operator_world, max_plans: int = 16):
        """operator_world(variant, world, device=, pushes=): the thread world that runs one operator (ThreadWorld)."""
        self.op, self.world, self.device, self.pushes = op, world, device, pushes
        self.operator_world = operator_world
        self.views = [op.rank_view() for _ in range(world)]  # each rank's activations, kept per shape
        self.max_plans = max_plans  # launch structures kept (their links); the least recently used goes first
        self.plans: dict[tuple, Plan] = {}
        self.worlds: dict[int, object] = {}  # id(variant) -> its ThreadWorld
        self.launches = 0

    # -- recording ----------------------------------------------------------------------------------
    def run(self, body, delay_s: float = 0.0) -> list:
        """Call `body(view, group, rank)` for every rank, then launch what they recorded; returns each
        rank's return value (its output, filled in stream order). `delay_s`: each operator's paced
        link (ThreadWorld.launch; CPU engine)."""
        outs, recorded = [], []
        for r in range(self.world):
            view = self.views[r]
            view.pipeline = Recorder()
            outs.append(body(view, RankGroup(r, self.world), r))
            if not view.pipeline.launches:
                raise LaunchError(f"rank {r}'s launch recorded no operator in its pipeline; launch the operators inside "
                                  "`with op.pipeline:`")
            recorded.append(view.pipeline.launches)
        self._launch(recorded, delay_s)
        return outs

    def _launch(self, recorded: list[list[Launch]], delay_s: float = 0.0) -> None:
        self._check()
        key = self._key(recorded)
        plan = self._plan(key, recorded)
        first = recorded[0]
        device = next((t.device for t in first[0].tensors().values()), torch.device("cpu"))
        cuda = device.type == "cuda"
        with on_device(device if cuda else None):
            caller = torch.cuda.current_stream(device) if cuda else None
            epochs = []
            try:
                for links in plan.links:
                    for link in links.values():
                        link.errors.make_room()  # before the kernels: an older launch's starved reader raises now
                for r in range(self.world):
                    for e, link in plan.links[r].items():
                        need = self._need(plan, e, recorded[r][e.src], link)
                        spin = spin_limit(plan.variants[e.dst].timeout_s, device.type)
                        epochs.append((link, link.begin(need, spin, link.ops.handle(caller))))
                for index, variant in enumerate(plan.variants):
                    launches = [rank_launches[index] for rank_launches in recorded]
                    self._world(variant).launch([x.grid for x in launches], [x.args for x in launches],
                                                [x.kwargs for x in launches], links=[plan.link_args(r, index) for r in range(self.world)],
                                                delay_s=delay_s)
            except BaseException:
                # Links stepped to an epoch whose operators did not all run: the next launch of this
                # structure starts from new links (Pipeline.run does the same).
                self.plans.pop(key, None)
                raise
            for link, epoch in epochs:
                link.errors.record(epoch, link.ops.handle(caller))
        self.launches += 1
        if not cuda:
            self._check()  # CPU: every copy and kernel is done when enqueued

    def _need(self, plan: Plan, edge, writer: Launch, link) -> list[int]:
        """The writer's tiles per chunk of the link (its probe, once per launch shape; the same on every rank)."""
        variant = plan.variants[edge.src]
        key = (edge, variant.orders.shape_key(writer.grid, writer.bound))
        if key not in plan.need:
            plan.need[key] = _probe_writes(variant, writer, link)
        return plan.need[key]

    # -- plans ---------------------------------------------------------------------------------------
    def _key(self, recorded: list[list[Launch]]) -> tuple:
        """The launch structure (operators, each tensor's shape, dtype and device, which arguments are the
        same tensor): the same on every rank, or a LaunchError naming the first rank that differs."""
        keys = [structure(launches) for launches in recorded]
        for r, k in enumerate(keys):
            if k != keys[0]:
                raise LaunchError(f"rank {r}'s pipeline launched {_describe(recorded[r])} but rank 0 {_describe(recorded[0])}; "
                                  "every rank launches the same operators on tensors of the same shapes")
        return keys[0]

    def _plan(self, key: tuple, recorded: list[list[Launch]]) -> Plan:
        plan = self.plans.pop(key, None)
        if plan is None:
            while len(self.plans) >= self.max_plans:  # the least recently used, its errors read first
                oldest = self.plans.pop(next(iter(self.plans)))
                for links in oldest.links:
                    for link in links.values():
                        link.errors.check(wait=True)
            first = recorded[0]
            edges = infer_edges(first)
            variants = [self.op.pipeline._variant(x.op, i, edges) for i, x in enumerate(first)]  # the template's own
            links = []
            for r, launches in enumerate(recorded):
                mine = {}
                for e in edges:
                    link = LinkSignals(launches[e.src].bound[e.src_arg], self._chunks(first, e))
                    link.reader = Reader(r, e.dst_arg, first[e.dst].name, first[e.src].name, e.src, first[e.dst].op.timeout_s)
                    mine[e] = link
                links.append(mine)
            plan = Plan(edges, variants, links)
        self.plans[key] = plan  # the most recently used last
        return plan

    def _chunks(self, launches: list[Launch], e) -> int:
        pipe = self.op.pipeline
        return pipe.link_chunks if pipe.link_chunks is not None else writer_chunks(launches[e.src], self.world)

    def _world(self, variant):
        tw = self.worlds.get(id(variant))
        if tw is None:
            tw = self.worlds[id(variant)] = self.operator_world(variant, self.world, device=self.device, pushes=self.pushes)
        return tw

    # -- errors --------------------------------------------------------------------------------------
    def _check(self, wait: bool = False) -> None:
        """Raise the first error, in stream order, of the launches done by now: per plan, each operator's
        (its ranks'), then the links it writes. What the other operators and links of the pipeline
        recorded of the same failure (a starved reader's own timeout, its sends that never left) are
        its consequences: waited for (bounded by their own timeouts), read and dropped with it, so
        that they do not surface at a later launch."""
        try:
            for check in self._checks(wait):
                check()
        except SyncopyError:
            for check in self._checks(wait=True):
                for _ in range(RING_DRAIN):
                    try:
                        check()
                        break
                    except SyncopyError:
                        continue
            raise

    def _checks(self, wait: bool) -> list:
        out = []
        for plan in self.plans.values():
            for index, variant in enumerate(plan.variants):
                tw = self.worlds.get(id(variant))
                if tw is not None:
                    out.append(tw.synchronize if wait else tw.check)
                for r in range(self.world):
                    for e, link in plan.links[r].items():
                        if e.src == index:
                            out.append(lambda link=link: link.errors.check(wait=wait))
        return out

    def synchronize(self) -> None:
        """Wait for every launch so far and raise the first error among them (module doc)."""
        self._check(wait=True)


def _describe(launches: list[Launch]) -> str:
    return ", ".join(f"{x.name}({', '.join(f'{n}={list(t.shape)}' for n, t in sorted(x.tensors().items()))})" for x in launches)
