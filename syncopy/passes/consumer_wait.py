"""Pass: consumer wait. Before each top-level statement that reads the communicated tensor, wait for
every chunk overlapping the rows the program reads there (a tile may span several chunks).

    # syncopy: wait for the chunks of A this program reads
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi   # this tile's range, probed
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(<ptrs>, <mask>, A, syncopy_ctx, True)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
"""
from __future__ import annotations

import libcst as cst

from syncopy.frontend.infer import ReadGroup, TensorBinding
from syncopy.passes import names

D = names.DEVICE


def range_statements(binding: TensorBinding, group: ReadGroup, lo: str = names.LO, hi: str = names.HI) -> list[cst.BaseStatement]:
    """Statements computing (lo, hi), by default (syncopy_lo, syncopy_hi): the chunk range a group
    of reads (or, on the producer side, of stores) touches."""
    outer = "True" if binding.dim == 0 else "False"
    if binding.explicit_rows is not None:
        return [cst.parse_statement(f"{lo}, {hi} = {D}.chunk_range_of_rows({binding.explicit_rows}, {names.CTX})\n")]
    out = []
    for i, access in enumerate(group.accesses):
        tl_, th_ = (lo, hi) if i == 0 else (f"{lo}_{i}", f"{hi}_{i}")
        if access.desc is not None:
            d_base, block_rows, rows, row_stride, tail = access.desc
            call = f"{D}.desc_chunk_range({d_base}, {access.pointer}, {block_rows}, {rows}, {row_stride}, {tail}, {binding.base}, {names.CTX})"
        elif access.mask is None:
            call = f"{D}.chunk_range({access.pointer}, {binding.base}, {names.CTX}, {outer})"
        else:
            call = f"{D}.chunk_range_masked({access.pointer}, {access.mask}, {binding.base}, {names.CTX}, {outer})"
        out.append(cst.parse_statement(f"{tl_}, {th_} = {call}\n"))
        if i:
            out.append(cst.parse_statement(f"{lo}, {hi} = {D}.merge_ranges({lo}, {hi}, {tl_}, {th_})\n"))
    return out


def from_table_or(computed: list[cst.BaseStatement]) -> cst.BaseStatement:
    """`if SYNCOPY_TABLE:` read the range the probe found for this tile, `else:` compute it."""
    inner = "\n".join("    " + cst.Module(body=[s]).code.strip() for s in computed)
    code = (f"if {names.TABLE_FLAG}:\n    {names.LO}, {names.HI} = {names.TABLE_LO}, {names.TABLE_HI}\n"
            f"else:\n{inner}\n")
    return cst.parse_statement(code)


def wait_statements(binding: TensorBinding, group: ReadGroup, first: bool, table: bool = False) -> list[cst.BaseStatement]:
    stmts = range_statements(binding, group)
    if first and table:
        stmts = [from_table_or(stmts)]
    stmts.append(cst.parse_statement(f"{D}.wait_chunks({names.SIGNALS}, {names.CTX}, {names.LO}, {names.HI})\n"))
    if first:
        stmts.append(cst.parse_statement(f"{D}.trace_tile_start({names.SIGNALS}, {names.TRACE}, {names.CTX}, {names.TRACE_FLAG})\n"))
    comment = cst.EmptyLine(comment=cst.Comment(f"# syncopy: wait for the chunks of {binding.tensor} this program reads"))
    stmts[0] = stmts[0].with_changes(leading_lines=[*stmts[0].leading_lines, comment])
    return stmts


def insert_waits(body: list[cst.BaseStatement], binding: TensorBinding, table: bool = False) -> list[cst.BaseStatement]:
    """`body` is the original function body (indices match `binding.groups`)."""
    at = {g.stmt_index: g for g in binding.groups}
    out: list[cst.BaseStatement] = []
    first = True
    for index, stmt in enumerate(body):
        group = at.get(index)
        if group is not None:
            waits = wait_statements(binding, group, first, table)
            # Keep the user's comments and blank lines attached above their own statement.
            waits[0] = waits[0].with_changes(leading_lines=[*stmt.leading_lines, *waits[0].leading_lines])
            stmt = stmt.with_changes(leading_lines=[])
            out.extend(waits)
            first = False
        out.append(stmt)
    return out
