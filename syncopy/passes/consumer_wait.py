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

import textwrap

import libcst as cst

from syncopy.frontend.infer import ReadGroup, TensorBinding
from syncopy.passes import names

D = names.DEVICE


def range_statements(binding: TensorBinding, group: ReadGroup, lo: str = names.LO, hi: str = names.HI) -> list[cst.BaseStatement]:
    """Statements computing (lo, hi), by default (syncopy_lo, syncopy_hi): the chunk range a group
    of reads (or, on the producer side, of stores) touches."""
    outer = "True" if binding.dim == 0 else "False"
    ctx = binding.ctx
    if binding.explicit_rows is not None:
        return [cst.parse_statement(f"{lo}, {hi} = {D}.chunk_range_of_rows({binding.explicit_rows}, {ctx})\n")]
    out: list[cst.BaseStatement] = []
    if group.accesses and group.accesses[0].guard:
        # The first read may be compiled out: start from no chunk, merge each live read's range in.
        out.append(cst.parse_statement(f"{lo}, {hi} = {D}.empty_range({ctx})\n"))
    guarded: list[tuple[tuple[tuple[str, bool], ...], list[cst.BaseStatement]]] = []
    for i, access in enumerate(group.accesses):
        mine = []
        tl_, th_ = (lo, hi) if i == 0 and not access.guard else (f"{lo}_{i}", f"{hi}_{i}")
        if access.every:
            call = f"{D}.all_chunks({ctx})"
        elif access.affine is not None:
            last, v0, v1, n = access.affine
            call = (f"{D}.chunk_range_affine({access.pointer}, {last}, {access.mask or 'True'}, {v0}, {v1}, {n}, "
                    f"{binding.base}, {ctx}, {outer})")
        elif access.clamped:
            call = f"{D}.chunk_range_clamped({access.pointer}, {access.mask or 'True'}, {binding.base}, {ctx}, {outer})"
        elif access.desc is not None:
            d_base, block_rows, rows, row_stride, tail = access.desc
            call = f"{D}.desc_chunk_range({d_base}, {access.pointer}, {block_rows}, {rows}, {row_stride}, {tail}, {binding.base}, {ctx})"
        elif access.mask is None:
            call = f"{D}.chunk_range({access.pointer}, {binding.base}, {ctx}, {outer})"
        else:
            call = f"{D}.chunk_range_masked({access.pointer}, {access.mask}, {binding.base}, {ctx}, {outer})"
        mine.append(cst.parse_statement(f"{tl_}, {th_} = {call}\n"))
        if tl_ != lo:
            mine.append(cst.parse_statement(f"{lo}, {hi} = {D}.merge_ranges({lo}, {hi}, {tl_}, {th_})\n"))
        guarded.append((access.guard, mine))
    return out + _under(guarded)


def _under(items: list[tuple[tuple[tuple[str, bool], ...], list[cst.BaseStatement]]], depth: int = 0) -> list[cst.BaseStatement]:
    """Each item's statements inside the constexpr `if`s of its read's guard (infer.Access.guard), as
    the read itself is, so that Triton compiles them only where the read is live; reads under the same
    test share one `if` (their merges commute)."""
    out: list[cst.BaseStatement] = []
    i = 0
    while i < len(items):
        guard, stmts = items[i]
        if len(guard) <= depth:
            out += stmts
            i += 1
            continue
        test = guard[depth][0]
        j = i
        while j < len(items) and len(items[j][0]) > depth and items[j][0][depth][0] == test:
            j += 1
        live = _under([x for x in items[i:j] if x[0][depth][1]], depth + 1)
        dead = _under([x for x in items[i:j] if not x[0][depth][1]], depth + 1)
        if live:
            code = f"if {test}:\n{indented(live)}\n" + (f"else:\n{indented(dead)}\n" if dead else "")
        else:
            code = f"if not ({test}):\n{indented(dead)}\n"
        out.append(cst.parse_statement(code))
        i = j
    return out


def indented(stmts: list[cst.BaseStatement], by: str = "    ") -> str:
    """The code of `stmts`, every line indented `by` (a block to paste under an `if`/`else`)."""
    return textwrap.indent("\n".join(cst.Module(body=[s]).code.strip("\n") for s in stmts), by)


def from_table_or(computed: list[cst.BaseStatement]) -> cst.BaseStatement:
    """`if SYNCOPY_TABLE:` read the range the probe found for this tile, `else:` compute it."""
    code = (f"if {names.TABLE_FLAG}:\n    {names.LO}, {names.HI} = {names.TABLE_LO}, {names.TABLE_HI}\n"
            f"else:\n{indented(computed)}\n")
    return cst.parse_statement(code)


# A loop's pointer into the tensor stepped by constexprs only (infer._constexpr_step): its one wait
# before the loop covers every iteration's rows; the note starts with notes.FALLBACKS' "one wait before".
_CONSTEXPR_STEP = ("# syncopy: one wait before the loop for every row of {tensor} it reads: its pointer steps by constexprs "
                   "only ({step} per iteration), so syncopy cannot tell which rows each iteration reads; pass the stride as "
                   "a runtime argument (as Mamba's `p += stride_chunk`, which is recognised) and each iteration waits for "
                   "its own chunks")


def _comments(binding: TensorBinding, group: ReadGroup, what: str) -> list[str]:
    every = [a for a in group.accesses if a.every]
    if every:
        why = f" ({every[0].why})" if every[0].why else ""
        return [f"# syncopy: wait for every chunk of {binding.tensor}: syncopy cannot bound the rows a helper called here reads{why}"]
    lines = []
    if group.nested:
        lines.append(f"# syncopy: no bound before the loop ({group.why}): wait before each read, from its own pointers")
    if any(a.clamped for a in group.accesses):
        lines.append("# syncopy: a mask that changes with the loop is left out of this bound (rows outside the tensor clamp to it)")
    step = next((a.step for a in group.accesses if a.step), "")
    if step:
        lines.append(_CONSTEXPR_STEP.format(tensor=binding.tensor, step=step))
    return [*lines, f"# syncopy: wait for the chunks of {binding.tensor} {what}"]


def async_proxy_acquire(binding: TensorBinding) -> list[cst.BaseStatement]:
    """Right after a wait in a kernel that reads through tensor descriptors: the fence that orders
    its TMA loads after the wait's acquire (sm_90+; nothing elsewhere)."""
    if not binding.descriptors:
        return []
    return [cst.parse_statement(f"{D}.async_proxy_acquire({names.ASYNC_PROXY_FLAG})\n")]


def wait_statements(binding: TensorBinding, group: ReadGroup, first: bool, table: bool = False,
                    what: str = "this program reads", notes: tuple[str, ...] = (), trace: bool = True) -> list[cst.BaseStatement]:
    stmts = range_statements(binding, group)
    if first and table:
        stmts = [from_table_or(stmts)]
    stmts.append(cst.parse_statement(f"{D}.wait_chunks({names.SIGNALS}, {binding.ctx}, {names.LO}, {names.HI})\n"))
    stmts += async_proxy_acquire(binding)
    if first and trace:
        stmts.append(cst.parse_statement(f"{D}.trace_tile_start({names.SIGNALS}, {names.TRACE}, {names.CTX}, {names.TRACE_FLAG})\n"))
    comments = [cst.EmptyLine(comment=cst.Comment(c)) for c in (*notes, *_comments(binding, group, what))]
    stmts[0] = stmts[0].with_changes(leading_lines=[*stmts[0].leading_lines, *comments])
    return stmts


def _with_leading(new: list[cst.BaseStatement], stmt: cst.BaseStatement) -> tuple[list[cst.BaseStatement], cst.BaseStatement]:
    """Keep the user's comments and blank lines attached above the inserted statements."""
    new = [new[0].with_changes(leading_lines=[*stmt.leading_lines, *new[0].leading_lines]), *new[1:]]
    return new, stmt.with_changes(leading_lines=[])


def insert_nested(stmt: cst.BaseStatement, edits: list[tuple[tuple[tuple[str, int], ...], list[cst.BaseStatement]]]) -> cst.BaseStatement:
    """Insert each edit's statements before the statement its path leads to inside `stmt` (a path is
    (branch, index) steps through `body` / `orelse` blocks, see infer.ReadGroup.nested)."""
    if not edits:
        return stmt
    by_step: dict[tuple[str, int], list] = {}
    for path, new in edits:
        by_step.setdefault(path[0], []).append((path[1:], new))

    def rebuilt(block: list[cst.BaseStatement], branch: str) -> list[cst.BaseStatement]:
        out: list[cst.BaseStatement] = []
        for i, s in enumerate(block):
            mine = by_step.get((branch, i), [])
            here = [new for p, new in mine if not p]
            s = insert_nested(s, [(p, new) for p, new in mine if p])
            for new in here:
                new, s = _with_leading(new, s)
                out += new
            out.append(s)
        return out

    changes = {}
    if any(b == "body" for b, _ in by_step):
        body = _indented(stmt.body)
        changes["body"] = body.with_changes(body=rebuilt(list(body.body), "body"))
    if any(b == "orelse" for b, _ in by_step):
        orelse = stmt.orelse
        if isinstance(orelse, cst.If):
            # An `elif` cannot have statements before it: with a wait in front it becomes `else:` + `if`.
            block = rebuilt([orelse], "orelse")
            changes["orelse"] = block[0] if len(block) == 1 else cst.Else(body=cst.IndentedBlock(body=block))
        else:
            body = _indented(orelse.body)
            changes["orelse"] = orelse.with_changes(body=body.with_changes(body=rebuilt(list(body.body), "orelse")))
    return stmt.with_changes(**changes)


def _indented(block: cst.BaseSuite) -> cst.IndentedBlock:
    """A block statements can be inserted into: a one-line `if c: x += ...` gets its own lines."""
    if isinstance(block, cst.SimpleStatementSuite):
        return cst.IndentedBlock(body=[cst.SimpleStatementLine(body=[small]) for small in block.body])
    return block


def nested_edits(binding: TensorBinding, groups: list[ReadGroup]) -> list:
    """(path, wait statements) for the groups that wait before a read deep inside a statement."""
    return [(g.nested, wait_statements(binding, g, False, what="this read needs")) for g in groups if g.nested]


# One flag rises once a chunk of every listed tensor has landed, so one wait could stand for several
# tensors; syncopy does not prove that an earlier wait covers another tensor's rows, so each listed
# tensor waits before its own first read, and its wait says so.
_OWN_WAIT = "# syncopy: {tensor} waits for its own rows: no earlier wait is proven to cover them"


def insert_waits(body: list[cst.BaseStatement], binding: TensorBinding, table: bool = False,
                 notes: tuple[str, ...] = (), others: tuple[TensorBinding, ...] = (),
                 loops: dict | None = None) -> list[cst.BaseStatement]:
    """`body` is the original function body (indices match `binding.groups`). `others` are the
    bindings of the other listed tensors: their waits go next to the main tensor's, and the first
    statement that reads any of them starts the tile (the table stands for the main tensor only).
    `loops` maps a statement index to a rewrite of that statement once its waits are in (loop_order.py)."""
    bindings = (binding, *others)
    out: list[cst.BaseStatement] = []
    first = True
    for index, stmt in enumerate(body):
        edits = [e for b in bindings for e in nested_edits(b, [g for g in b.groups if g.stmt_index == index])]
        stmt = insert_nested(stmt, edits)
        waits: list[cst.BaseStatement] = []
        for b in bindings:
            group = next((g for g in b.groups if g.stmt_index == index and not g.nested), None)
            if group is None:
                continue
            last = b is next(x for x in reversed(bindings) if any(g.stmt_index == index and not g.nested for g in x.groups))
            said = notes if first and not waits else ()
            if b is not binding and group is b.groups[0]:
                said = (*said, _OWN_WAIT.format(tensor=b.tensor))
            waits += wait_statements(b, group, first, table and b is binding, notes=said, trace=last)
        if first and not waits and any(g.stmt_index == index for b in bindings for g in b.groups):
            # Its only waits are deeper inside this statement (per iteration of a loop that sweeps the rows,
            # per read under an `if`, before a read whose rows are known only there): the tile starts here.
            waits = [cst.parse_statement(f"{D}.trace_tile_start({names.SIGNALS}, {names.TRACE}, {names.CTX}, {names.TRACE_FLAG})\n")]
        if waits:
            waits, stmt = _with_leading(waits, stmt)
            out.extend(waits)
            first = False
        out.extend(loops[index](stmt) if loops and index in loops else [stmt])
    return out
