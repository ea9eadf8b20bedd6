"""The order tiles run in: each program's chunk range (probed, or computed in the kernel), sorted by
arrival (consumer) or send order (producer), laid out as the table the kernel reads by execution slot."""
from __future__ import annotations

from typing import NamedTuple

import torch

from syncopy import device as dev
from syncopy.errors import LaunchError
from syncopy.runtime.state import plan as planning
from syncopy.runtime.state.context import Context
from syncopy.runtime.launch import host_descriptors, persistent_order, warmup
from syncopy.runtime.transport.backends import control
from syncopy.passes.names import ASYNC_PROXY_FLAG
from syncopy.runtime.where import has_async_proxy, interpreting, spin_limit


def slot_tiles(order: torch.Tensor, n_tiles: int) -> list[int]:
    """The tile each execution slot runs, read back from an order table (see `TileOrders.order`)."""
    return order[dev.SLOT_WORDS * n_tiles:].tolist()


def slot_records(order: torch.Tensor, n_tiles: int) -> list[tuple[int, ...]]:
    """Per slot the record the kernel reads: (pid0, pid1, pid2, first chunk, last chunk)."""
    flat = order[: dev.SLOT_WORDS * n_tiles].tolist()
    return [tuple(flat[k : k + dev.SLOT_WORDS]) for k in range(0, len(flat), dev.SLOT_WORDS)]


class Order(NamedTuple):
    """A launch shape's tile order: the table the kernel reads (a slot record per program, then the
    tile per slot), each tile's chunk range, and the tile each execution slot runs."""

    table: torch.Tensor
    ranges: list
    exec_order: list


def grid3(grid, args: dict) -> tuple[int, int, int]:
    """The launch's grid as three ints (a grid function called on the arguments)."""
    g = grid(args) if callable(grid) else grid
    g = tuple(int(x) for x in g)
    return (g + (1, 1, 1))[:3]


class TileOrders:
    """How an operator's launches order their tiles, per context and launch shape: probed once (or
    at every launch where the rows come from loaded data), kept in the context. `op` is the operator
    (api.FusedKernel): its kernel and probe, schedule and pattern."""

    def __init__(self, op):
        self.op = op

    def prepared(self, ctx: Context, grid, call_args: dict, options: dict, backend, group) -> Order:
        """`order`; at the first launch of this launch shape on `ctx`, also the kernel's compile, both
        done before the launch's waits start and met by every rank (control.prepared): a compile
        longer than timeout_s times nothing out, and blames no rank."""
        # Uneven splits: grids follow each rank's received rows, so they differ between ranks and
        # launches; the first launch of the context is the one every rank prepares together.
        key = ("uneven",) if ctx.plan.uneven else self.shape_key(grid, call_args)
        if backend is None or key in ctx.prepared:
            return self.order(ctx, grid, call_args, backend)
        op = self.op

        def prepare():
            spin_limit(op.timeout_s, ctx.buffer.device.type)  # the interpreter measures a poll once: not on the clock
            ordered = self.order(ctx, grid, call_args, backend)
            extra = op.kernel.syncopy_args(ctx, ordered.table, ctx.no_trace)
            warmup.compile_kernel(op.kernel.build().fused, grid, {**call_args, **extra}, options)
            return ordered

        what = f"the first launch of {op.local.fn.__name__} with grid {list(grid3(grid, call_args))}"
        ordered = control.prepared(group, op.timeout_s, what, prepare)
        ctx.prepared[key] = True
        return ordered

    def order(self, ctx: Context, grid, args: dict, backend) -> Order:
        """Tile order for this launch shape: probe each program's chunk range, sort by arrival."""
        t, _, probe, _ = self.op.kernel.build()
        producer = self.op.producer
        z_fastest = getattr(backend, "z_fastest", False) if backend is not None else interpreting()
        if t.persistent is not None:
            # Tiles come from the kernel's own loop: the table is per tile id (persistent_order.py).
            return self._persistent(ctx, grid, args, probe, sequential=z_fastest)
        key = self.shape_key(grid, args)
        dims = key[0]
        n = dims[0] * dims[1] * dims[2]
        if ctx.plan.uneven:  # chunks' rows change with each launch's split sizes
            key = (*key, ctx.plan.recv_splits)
        # A producer whose write rows come from loaded data is probed at every launch (on GPUs the
        # probe's answer is read back: a host sync that only such kernels pay).
        self.check_extents_once(ctx, key, grid, args)
        if key in ctx.orders and not t.fresh_probe:
            return ctx.orders[key]
        ranges: list[tuple[int, int]] = [(0, -1)] * n
        written = None
        if probe is not None:
            ranges, written = self._probe(ctx, grid, args, probe, n)
        if producer:
            # A probe program that ended before recording (a return the address slice kept) writes nothing.
            ranges = [(lo, hi) if 0 <= lo <= hi else (0, -1) for lo, hi in ranges]
        tiles = planning.tile_order(ranges, ctx.plan.position(), producer=producer)
        if producer:
            self._check_coverage(ctx, ranges, args, written)
            ctx.tiles_per_chunk[key] = self._tiles_per_chunk(ctx, ranges)
        # The table is indexed by hardware linear id; place tiles so that the backend's execution
        # order (z fastest under the interpreter, x fastest on GPUs) runs them in sorted order.
        g0, g1, g2 = dims
        if z_fastest:
            slots = [x + g0 * (y + g1 * z) for x in range(g0) for y in range(g1) for z in range(g2)]
        else:
            slots = list(range(n))
        table = [0] * n
        for s, tile in zip(slots, tiles):
            table[s] = tile
        # [(pid0, pid1, pid2, first, last) per slot | tile per slot]: device.slot_entry reads the first part.
        records = []
        for tile in table:
            records += [tile % g0, (tile // g0) % g1, tile // (g0 * g1), *ranges[tile]]
        order = torch.tensor(records + table, dtype=torch.int32, device=ctx.buffer.device)
        ctx.orders[key] = Order(order, ranges, [table[s] for s in slots])
        return ctx.orders[key]

    def check_extents_once(self, ctx: Context, key: tuple, grid, args: dict) -> None:
        """check_extents, once per launch shape and outputs: their shapes and strides are no part of
        the launch shape (a cached tile order), so a launch with a smaller output is checked again."""
        outputs = tuple((name, tuple(v.shape), tuple(v.stride())) for name in self.op.kernel.written()
                        if isinstance(v := args.get(name), torch.Tensor))
        if (key, outputs) not in ctx.extents_checked:
            self.check_extents(grid, args)
            ctx.extents_checked[(key, outputs)] = True

    def check_extents(self, grid, args: dict, world: int | None = None) -> None:
        """Refuse a grid that writes past the end of an output, before anything moves. Each output's
        store-address probe (Kernel.extent_probe) runs against a context in which every element of
        it is its own chunk and the tensor has no end, so it reports the element offsets each program
        writes; the largest must lie within the output (any layout: transposed views too).
        `world`: the unfused reference's check (launch/reference.py), where a producer's communicated
        tensor is a plain full-size tensor too: its rows are checked as the fused launch checks them."""
        kernel = self.op.kernel
        own = [] if world is None or not self.op.producer else [self.op.schedule.tensor]
        outputs = [name for name in kernel.written() if (name not in self.op.schedule.tensors or name in own)
                   and isinstance(args.get(name), torch.Tensor) and args[name].dim() > 0 and args[name].numel() > 0]
        g0, g1, g2 = grid3(grid, args)
        n = g0 * g1 * g2
        for name in outputs:
            found_probe = kernel.extent_probe(name)
            if found_probe is None:
                continue
            probe, descriptors = found_probe
            out = args[name]
            device = out.device
            ctx = torch.zeros(dev.CTX_LEN, dtype=torch.int64, device=device)
            for word, value in ((dev.CTX_ROWS, 2**31 - 1), (dev.CTX_CHUNKS, 2**31 - 1), (dev.CTX_WORLD, 1),
                                (dev.CTX_STRIDE_BYTES, out.element_size()), (dev.CTX_SIZE, 2**31 - 1)):
                ctx[word.value] = value
            found = torch.full((2 * n,), -1, dtype=torch.int32, device=device)
            dummy = torch.zeros(1, dtype=torch.int32, device=device)
            flag = {ASYNC_PROXY_FLAG: has_async_proxy(device)} if descriptors else {}
            probe[grid](**args, syncopy_ctx=ctx, syncopy_signals=dummy, syncopy_order=dummy, syncopy_trace=dummy,
                        SYNCOPY_TRACE=False, SYNCOPY_TABLE=False, **flag, syncopy_probe_out=found)
            flat = found.tolist()
            last = max((flat[2 * i + 1] for i in range(n) if 0 <= flat[2 * i] <= flat[2 * i + 1]), default=-1)
            end = sum((size - 1) * stride for size, stride in zip(out.shape, out.stride()))  # its last element's offset
            if last > end and name in own and out.is_contiguous():
                written = last // out.stride(0) + 1
                per_rank = out.shape[0] // world if self.op.schedule.pattern == "reduce_scatter" else out.shape[0]
                raise LaunchError(rows_message(name, written, out.shape[0], per_rank, world, self.op.schedule.pattern, args))
            if last > end:
                self._refuse_extent(name, out, last)

    def _refuse_extent(self, name: str, out: torch.Tensor, last: int) -> None:
        kernel = self.op.local.fn.__name__
        if out.is_contiguous():
            rows, written = out.shape[0], last // out.stride(0) + 1
            raise LaunchError(f"launch of '{kernel}': the grid writes rows up to {written - 1} of '{name}', which has {rows} "
                              f"rows; give '{name}' at least {written} rows, or a grid and bounds that write {rows}")
        raise LaunchError(f"launch of '{kernel}': the grid writes '{name}' at element offset {last}, past its last element "
                          f"(shape {list(out.shape)}, strides {tuple(out.stride())}); give '{name}' room for what the grid writes, "
                          "or a grid and bounds that stay within it")

    def _persistent(self, ctx: Context, grid, args: dict, probe, sequential: bool) -> Order:
        """`order` for a persistent kernel: the table per launch shape, cached in `ctx`."""
        key = self.shape_key(grid, args)
        if ctx.plan.uneven:  # chunks' rows change with each launch's split sizes
            key = (*key, ctx.plan.recv_splits)
        self.check_extents_once(ctx, key, grid, args)
        if key in ctx.orders:
            return ctx.orders[key]
        records = None
        if probe is not None:
            dummy = torch.zeros(3, dtype=torch.int32, device=ctx.buffer.device)
            extra = self.op.kernel.syncopy_args(ctx, dummy, dummy, table=False)
            by_rows = self.probe_rows(ctx, extra)  # rows, not chunks: past the buffer too (see _probe)

            def run(out):
                probe[grid](**args, **extra, syncopy_probe_out=out)

            records = persistent_order.probe_tiles(run, ctx.buffer.device)
            if records and by_rows:
                seen = [r for r in records if r[4] and 0 <= r[0] <= r[1]]
                self.check_rows(ctx, max((r[1] for r in seen), default=-1) + 1, args)
                for r in seen:
                    r[0], r[1] = ctx.unit_of_row(r[0]), ctx.unit_of_row(r[1])
        remap = self.op.kernel.build().transformed.persistent.remap
        table, ranges, exec_order = persistent_order.build_table(records, ctx.plan.position(), ctx.n_chunks, remap=remap,
                                                                 sequential=sequential)
        ctx.orders[key] = Order(torch.tensor(table, dtype=torch.int32, device=ctx.buffer.device), ranges, exec_order)
        return ctx.orders[key]

    def _probe(self, ctx: Context, grid, args: dict, probe, n: int) -> tuple[list[tuple[int, int]], int | None]:
        """Each program's chunk range, from the probe kernel, and the rows the grid touches (None
        where unknown). Along dim 0 the probe runs with a ctx in which every row is its own chunk and
        the buffer has no end, so it reports rows, past the buffer too (the kernel clamps them to
        its last chunk); _check_rows refuses those, and the rows map to chunks here the way
        device._chunk_of_row maps them."""
        out = torch.full((2 * n,), -1, dtype=torch.int32, device=ctx.buffer.device)
        dummy = torch.zeros(1, dtype=torch.int32, device=ctx.buffer.device)
        extra = self.op.kernel.syncopy_args(ctx, dummy, dummy, table=False)
        by_rows = self.probe_rows(ctx, extra)
        probe[grid](**args, **extra, syncopy_probe_out=out)
        flat = out.tolist()
        ranges = [(flat[2 * i], flat[2 * i + 1]) for i in range(n)]
        if not by_rows:
            return ranges, None
        written = max((hi for lo, hi in ranges if 0 <= lo <= hi), default=-1) + 1
        self.check_rows(ctx, written, args)
        # Empty ranges (hi < lo) and programs that stored nothing (-1, -1) stay as the probe left them.
        return [(ctx.unit_of_row(lo), ctx.unit_of_row(hi)) if 0 <= lo <= hi else (lo, hi) for lo, hi in ranges], written

    def probe_rows(self, ctx: Context, extra: dict) -> bool:
        """Make the probe report rows instead of chunks (see _probe), where rows can be told: along
        dim 0 (elsewhere a row is an offset modulo the size). `extra` is the probe's launch arguments."""
        if self.op.schedule.dim != 0 or (ctx.plan.rows_per_rank <= 0 and not ctx.plan.uneven):
            return False
        # A bound that left out a mask changing with the loop (infer._corners) may reach past the
        # buffer where the kernel reads nothing: only its chunks, clamped to the buffer, say anything.
        if any(a.clamped for g in self.op.kernel.build().transformed.binding.groups for a in g.accesses):
            return False
        extra["syncopy_ctx"] = probed = ctx.ctx.clone()
        # Every listed tensor's block (`tensor: [K, V]`): the table stands for the tensor read first.
        for at in range(0, dev.CTX_LEN * (1 + len(ctx.extras)), dev.CTX_LEN):
            probed[at + dev.CTX_CHUNKS.value] = ctx.plan.rows_per_rank
            if ctx.plan.uneven:  # one block of 2^31 - 1 rows, each its own chunk: the probe reports rows
                probed[at + dev.CTX_ROWS.value] = probed[at + dev.CTX_CHUNKS.value] = 2**31 - 1
            probed[at + dev.CTX_SIZE.value] = 2**31 - 1  # probe_store keeps int32
        return True

    def check_rows(self, ctx: Context, written: int, args: dict) -> None:
        """Refuse a grid that touches rows past the communicated buffer, before any transfer starts:
        a consumer would read past the gathered tensor, a producer write past its buffer."""
        size = ctx.plan.size if ctx.plan.uneven else ctx.buffer.shape[ctx.dim]
        if written <= size:
            return
        # (With several listed tensors: the one the kernel reads first, whose rows the probe followed.)
        tensor = self.op.kernel.build().transformed.binding.tensor
        split = list(ctx.plan.recv_splits) if ctx.plan.uneven else None
        raise LaunchError(rows_message(tensor, written, size, ctx.plan.rows_per_rank, ctx.plan.world, self.op.schedule.pattern,
                                       args, split))

    def shape_key(self, grid, args: dict) -> tuple:
        """What a tile order depends on: the grid and the scalar arguments (tensor shapes are part of the
        context's key already)."""
        scalars = tuple((k, host_descriptors.key(v) if host_descriptors.is_descriptor(v) else v)
                        for k, v in sorted(args.items()) if not isinstance(v, torch.Tensor))
        return grid3(grid, args), scalars

    def _check_coverage(self, ctx: Context, ranges: list[tuple[int, int]], args: dict, written: int | None = None) -> None:
        """A grid may leave chunks unwritten, as the local kernel may leave rows of its output: those
        chunks keep the partial's initial contents (sequence.init_partial) and are announced at launch start.
        Refused only where the output is evidently the wrong size (_should_blame_output_rows)."""
        missing = [g for g in range(ctx.n_chunks) if not ctx.plan.empty(g) and not any(lo <= g <= hi for lo, hi in ranges)]
        if missing and self._should_blame_output_rows(ctx, args, written):
            lo, hi = ctx.plan.bounds(missing[0])
            tensor, world, size = self.op.schedule.tensor, ctx.plan.world, ctx.buffer.shape[ctx.dim]
            raise LaunchError(
                f"'{tensor}' has {ctx.plan.rows_per_rank} rows, but reduce_scatter gives each rank its rows of the result "
                f"(rows / world) and the kernel writes {written} rows: give '{tensor}' {written // world} rows "
                f"({written} / {world} ranks); as passed, '{tensor}' needs a grid that writes all {size} rows, and no "
                f"program writes rows {lo}..{hi - 1} (chunk {missing[0]})"
            )

    def _should_blame_output_rows(self, ctx: Context, args: dict, written: int | None) -> bool:
        # reduce_scatter only: its output is this rank's part, the usual mistake is passing the whole result.
        # The probe saw where the writes end (dim 0), and they split evenly over the ranks.
        # A row-count argument equals the rows written: the grid covers the kernel's rows, so the output is wrong.
        # None equals the rows of the full partial: a kernel told the true row count that writes fewer
        # (a partial grid, a bound like `rows < MW`) means it, and its other rows stay zero.
        # Rows that come from loaded data (fresh_probe) say nothing of the output's size.
        size = ctx.buffer.shape[ctx.dim]
        return (self.op.schedule.pattern == "reduce_scatter" and not self.op.kernel.build().transformed.fresh_probe
                and written is not None and 0 < written < size
                and written % ctx.plan.world == 0
                and any(type(v) is int and v == written for v in args.values())
                and not any(type(v) is int and v == size for v in args.values()))

    @staticmethod
    def _tiles_per_chunk(ctx: Context, ranges: list[tuple[int, int]]) -> list[int]:
        need = [0] * ctx.n_chunks
        for lo, hi in ranges:
            for g in range(max(lo, 0), hi + 1):
                need[g] += 1
        return need


def rows_message(tensor: str, written: int, size: int, per_rank: int, world: int, pattern: str, args: dict,
                 splits: list[int] | None = None) -> str:
    """What to change where a grid touches rows up to `written` - 1 of the communicated `tensor`, which
    has `size` rows (per_rank from each of `world` ranks): one line, by pattern."""
    if pattern == "reduce_scatter":
        if written % world:
            fix = (f", which {world} ranks cannot share evenly; write a multiple of {world} rows and give '{tensor}' "
                   f"that number / {world}")
        else:
            fix = f" = {written // world} per rank x {world}; give '{tensor}' {written // world} rows"
        return f"'{tensor}' receives {per_rank} rows per rank, but the kernel writes {written} rows{fix}"
    if pattern == "all_reduce":
        return (f"the kernel writes rows up to {written - 1} of '{tensor}' but '{tensor}' has {size} rows; "
                f"all_reduce takes the full result: give '{tensor}' {written} rows")
    what, whose = ("gathered", "per rank") if pattern == "all_gather" else ("received", "from each rank")
    count = [k for k, v in args.items() if type(v) is int and v == written]
    fix = (f"pass {count[0]} = {size}, the {what} rows" if len(count) == 1
           else f"launch with the {what} row count, {size}, and a grid that reads no further")
    split = f"output splits {splits}" if splits is not None else f"{per_rank} {whose} x {world} ranks"
    return f"the grid reads rows up to {written - 1} of '{tensor}' but the {what} '{tensor}' has {size} rows ({split}); {fix}"
