"""Pass: producer notify (reduce_scatter, all_reduce). Around each top-level statement that stores
into the communicated tensor, take the chunk range the program writes (hoisted before the statement,
like a consumer wait) and, after the last such statement, announce it: the program counts itself
against each chunk, and the program that completes a chunk raises the chunk's flag, so the runtime
sends (and peers reduce) that chunk while later tiles still compute.

    # syncopy: the chunks of C this program writes
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi   # this tile's range, probed
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(<ptrs>, <mask>, C, syncopy_ctx, True)
    tl.store(c_ptrs, c, mask=c_mask)
    # syncopy: announce the finished chunks
    syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
"""
from __future__ import annotations

import libcst as cst

from syncopy.frontend import cstutil as cu
from syncopy.frontend.infer import TensorBinding
from syncopy.passes import consumer_wait, names

D = names.DEVICE


def _comment(stmt: cst.BaseStatement, text: str) -> cst.BaseStatement:
    return stmt.with_changes(leading_lines=[*stmt.leading_lines, cst.EmptyLine(comment=cst.Comment(f"# syncopy: {text}"))])


def range_statements(binding: TensorBinding, k: int, table: bool) -> list[cst.BaseStatement]:
    """(syncopy_lo, syncopy_hi) after write group k: the first sets them (from the probe's table when
    there is one), later groups widen them."""
    group = binding.groups[k]
    if k == 0:
        stmts = consumer_wait.range_statements(binding, group)
        return [consumer_wait.from_table_or(stmts)] if table else stmts
    lo, hi = f"{names.LO}_w{k}", f"{names.HI}_w{k}"
    stmts = consumer_wait.range_statements(binding, group, lo, hi)
    stmts.append(cst.parse_statement(f"{names.LO}, {names.HI} = {D}.merge_ranges({names.LO}, {names.HI}, {lo}, {hi})\n"))
    return stmts


def notify_statement() -> cst.BaseStatement:
    stmt = cst.parse_statement(f"{D}.notify_chunks({names.SIGNALS}, {names.CTX}, {names.LO}, {names.HI})\n")
    return _comment(stmt, "announce the finished chunks")


def insert_notifies(body: list[cst.BaseStatement], binding: TensorBinding, table: bool = False) -> list[cst.BaseStatement]:
    """`body` is the original function body (indices match `binding.groups`)."""
    at = {g.stmt_index: k for k, g in enumerate(binding.groups)}
    last = binding.groups[-1].stmt_index
    out: list[cst.BaseStatement] = []
    for index, stmt in enumerate(body):
        k = at.get(index)
        if k is not None:
            ranges = range_statements(binding, k, table)
            ranges[0] = _comment(ranges[0].with_changes(leading_lines=list(stmt.leading_lines)),
                                 f"the chunks of {binding.tensor} this program writes")
            out.extend(ranges)
            stmt = stmt.with_changes(leading_lines=[])
        out.append(stmt)
        if index == last:
            out.append(notify_statement())
    return out


def probe_body(body: list[cst.BaseStatement], binding: TensorBinding, start: int) -> list[cst.BaseStatement]:
    """The statements a probe needs to compute the write range: the body up to the last store, each
    store statement replaced by its range statements, sliced backwards to what the ranges use (so
    the probe skips the K loop and every other computation the addresses do not depend on)."""
    at = {g.stmt_index: k for k, g in enumerate(binding.groups)}
    last = binding.groups[-1].stmt_index
    stmts: list[tuple[cst.BaseStatement, bool]] = []
    for index in range(start, last + 1):
        k = at.get(index)
        if k is None:
            stmts.append((body[index], False))
        else:
            stmts += [(s, True) for s in range_statements(binding, k, table=False)]
    needed: set[str] = set()
    kept: list[cst.BaseStatement] = []
    for stmt, anchor in reversed(stmts):
        if anchor or cu.assigned_in(stmt) & needed:
            kept.append(stmt)
            needed |= cu.names_in(stmt)
    return kept[::-1]
