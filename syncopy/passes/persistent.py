"""Pass: persistent loops. The wait moves to the start of each tile, inside the loop, and the tile
id (not the program id) is remapped through the runtime's order, so that all programs together
visit tiles in chunk-arrival order:

    for tile_id in range(start, n_tiles, NUM_SMS):
        # syncopy: run tiles in chunk-arrival order
        tile_id = syncopy_device.tile_of(syncopy_order, tile_id)
        pid_m, pid_n = tile_coords(tile_id, ...)
        off_m = pid_m * BM
        # syncopy: wait for the chunks of A this tile reads
        if SYNCOPY_TABLE:
            syncopy_lo, syncopy_hi = syncopy_device.tile_range(syncopy_order, tile_id, syncopy_ctx)
        else:
            syncopy_lo, syncopy_hi = syncopy_device.desc_chunk_range(A, off_m, BM, M, K, (K - 1), A, syncopy_ctx)
        syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
        syncopy_device.trace_tile_start_at(...)
        for k in range(...): ... a_desc.load([off_m, k * BK]) ...

A counter the loop steps itself (`tile += NUM_SMS`) keeps the user's line and gets
`tile = syncopy_device.advance_tile(syncopy_order, tile, NUM_SMS)` right after it.

The probe runs the same loop, cut at the tile's wait, and records every tile's chunk range, the
program that ran it and when (`probe_store_tile`): the order table is indexed by tile id.

Proven or as written (docs/how-it-works.md): the tile id is remapped only where the probe saw every
tile visited once and inference proved nothing carries from one tile to the next
(`PersistentLoop.remap`); otherwise tiles keep the loop's order.
"""
from __future__ import annotations

import libcst as cst

from syncopy.frontend import cstutil as cu
from syncopy.frontend import infer as inference
from syncopy.frontend import persistent as loops
from syncopy.frontend.source import KernelSource
from syncopy.passes import consumer_wait, names, probe, signature
from syncopy.passes.transformed import Transformed
from syncopy.schedule.model import Schedule

D = names.DEVICE
PROBE_ITER = "syncopy_probe_iter"
REMAP_COMMENT = "# syncopy: run tiles in chunk-arrival order"


def _stmt(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code + "\n")


def _commented(stmts: list[cst.BaseStatement], text: str) -> list[cst.BaseStatement]:
    first = stmts[0].with_changes(leading_lines=[*stmts[0].leading_lines, cst.EmptyLine(comment=cst.Comment(text))])
    return [first, *stmts[1:]]


def tile_wait(binding: inference.TensorBinding, group: inference.ReadGroup, tile: str) -> list[cst.BaseStatement]:
    """The wait at the start of a tile: the probed range of tile `tile` or, without a table, the computed one."""
    computed = consumer_wait.range_statements(binding, group)
    inner = consumer_wait.indented(computed)
    lo, hi = names.LO, names.HI
    stmts = [
        _stmt(f"if {names.TABLE_FLAG}:\n    {lo}, {hi} = {D}.tile_range({names.ORDER}, {tile}, {names.CTX})\nelse:\n{inner}"),
        _stmt(f"{D}.wait_chunks({names.SIGNALS}, {names.CTX}, {lo}, {hi})"),
        *consumer_wait.async_proxy_acquire(binding),
        _stmt(f"{D}.trace_tile_start_at({names.SIGNALS}, {names.TRACE}, {names.CTX}, {names.ORDER}, {tile}, {names.TRACE_FLAG})"),
    ]
    return _commented(stmts, f"# syncopy: wait for the chunks of {binding.tensor} this tile reads")


def _apply(stmts: list[cst.BaseStatement], path: tuple[int, ...], before: dict, after: dict) -> list[cst.BaseStatement]:
    """Insert `before[(path, i)]` ahead of statement i (i == len: at the end) and `after[(path, i)]`
    behind it, recursing into `if` bodies that have edits; user comments stay above their statement."""
    out: list[cst.BaseStatement] = []
    nested = {k[0] for k in (*before, *after)}
    for i, s in enumerate(stmts):
        new = before.get((path, i), [])
        if new:
            new = [new[0].with_changes(leading_lines=[*s.leading_lines, *new[0].leading_lines]), *new[1:]]
            s = s.with_changes(leading_lines=[])
        out += new
        if isinstance(s, cst.If) and any(p[: len(path) + 1] == path + (i,) for p in nested):
            s = s.with_changes(body=s.body.with_changes(body=_apply(list(s.body.body), path + (i,), before, after)))
        out.append(s)
        out += after.get((path, i), [])
    out += before.get((path, len(stmts)), [])
    return out


def _loop_edits(binding: inference.TensorBinding, loop: loops.PersistentLoop, stmt) -> tuple[dict, dict]:
    before: dict[tuple, list] = {}
    after: dict[tuple, list] = {}
    if loop.remap:
        if loop.loop_var is not None:
            remap = _stmt(f"{loop.loop_var} = {D}.tile_of({names.ORDER}, {loop.loop_var})")
            before.setdefault(((), 0), []).extend(_commented([remap], REMAP_COMMENT))
        for name, paths in loops.step_paths(loop, stmt).items():
            step = loop.counters[name]
            for p in paths:
                after.setdefault((p[:-1], p[-1]), []).append(_stmt(f"{name} = {D}.advance_tile({names.ORDER}, {name}, {step})"))
    note = [f"# syncopy: tiles keep their order: {loop.note}"] if loop.note else []
    for g in binding.groups:
        if g.inner and not g.nested:
            waits = tile_wait(binding, g, loop.tile) if g.tile_start else consumer_wait.wait_statements(binding, g, False, notes=tuple(note))
            before.setdefault((g.inner[:-1], g.inner[-1]), []).extend(waits)
            note = []
    return before, after


def _probe(ks: KernelSource, binding: inference.TensorBinding, loop: loops.PersistentLoop, head, body, start) -> cst.FunctionDef | None:
    """The kernel up to each tile's wait, recording the tile's range instead of waiting."""
    group = next((g for g in binding.groups if g.tile_start), None)
    if group is None:
        return None
    stmt = body[loop.index]
    lbody = list(stmt.body.body)
    record = [_stmt(f"{D}.probe_store_tile({names.PROBE_OUT}, {loop.tile}, {names.LO}, {names.HI}, {PROBE_ITER})"),
              _stmt(f"{PROBE_ITER} += 1")]
    ranges = consumer_wait.range_statements(binding, group)
    if loop.kind == "flat":
        j = loop.tile_block[0]
        block = lbody[j]
        kept = [*lbody[:j], block.with_changes(body=block.body.with_changes(body=[*block.body.body, *ranges, *record]))]
        rest = lbody[j + 1 :]
    else:
        j = group.inner[0]
        kept, rest = [*lbody[:j], *ranges, *record], lbody[j:]
    # Past the wait only what steps the loop survives (the counters, the names a while loop tests).
    control = set(loop.counters) | (cu.names_in(stmt.test) if isinstance(stmt, cst.While) else set())
    for s in rest:
        if cu.assigned_in(s) & control:
            if not isinstance(s, cst.SimpleStatementLine):
                return None
            kept.append(s)
    cut = stmt.with_changes(body=stmt.body.with_changes(body=kept))
    prefix = [*head, *body[start : loop.index], _stmt(f"{PROBE_ITER} = 0"), cut]
    return probe.build(signature.add_params(ks.func, flags=signature.flags_for(binding)), prefix, [], store=[])


def transform(ks: KernelSource, schedule: Schedule, binding: inference.TensorBinding, stages: dict):
    """The fused kernel and its probe for a kernel whose reads sit in a persistent loop."""
    loop = binding.persistent
    func = ks.func
    body = list(func.body.body)
    start = inference.body_start(func)
    stmt = body[loop.index]
    before, after = _loop_edits(binding, loop, stmt)
    top = {g.stmt_index: g for g in binding.groups if not g.inner and not g.nested}
    out: list[cst.BaseStatement] = []
    for i, s in enumerate(body):
        pre: list[cst.BaseStatement] = []
        if i in top:
            pre += consumer_wait.wait_statements(binding, top[i], False)
        if i == loop.index:
            if loop.remap and loop.counters:
                pre += _commented([_stmt(f"{n} = {D}.tile_of({names.ORDER}, {n})") for n in loop.counters], REMAP_COMMENT)
            # Waits before reads deep inside the loop body go in first: they leave its indices alone.
            lbody = [consumer_wait.insert_nested(x, consumer_wait.nested_edits(
                binding, [g for g in binding.groups if g.inner == (j,) and g.nested])) for j, x in enumerate(s.body.body)]
            s = s.with_changes(body=s.body.with_changes(body=_apply(lbody, (), before, after)))
        else:
            s = consumer_wait.insert_nested(s, consumer_wait.nested_edits(
                binding, [g for g in binding.groups if g.stmt_index == i and not g.inner]))
        if pre:
            pre[0] = pre[0].with_changes(leading_lines=[*s.leading_lines, *pre[0].leading_lines])
            s = s.with_changes(leading_lines=[])
        out += [*pre, s]
    head = [_stmt(f"{inference.BASE_NAME} = {binding.tensor}")] if binding.copy_base else []
    out = out[:start] + head + out[start:]
    fused = signature.add_params(func.with_changes(body=func.body.with_changes(body=out)), flags=signature.flags_for(binding))
    probe_fn = _probe(ks, binding, loop, head, body, start)
    stages["binding"] += (
        f"persistent loop ({loop.kind}) at line {ks.location(stmt).line}: tile id {loop.tile}"
        + (f", counters {', '.join(loop.counters)}" if loop.counters else "")
        + ("; tiles remapped" if loop.remap else f"; tiles not remapped ({loop.why_not})") + "\n"
    )
    t = Transformed(ks, schedule, binding, fused, probe_fn, loop.remap, stages, persistent=loop)
    stages["fused"] = t.code()
    if probe_fn is not None:
        stages["probe"] = t.code(probe_fn)
    return t
