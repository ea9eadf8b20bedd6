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

Proven or as written (docs/how-it-works.md): a store's rows are bounded before its statement only
where they are proven as a read's are (rows affine in the loop counters, every corner of the loop
nest, a mask term that changes with the loop left out and the rows clamped). Elsewhere (`%`, `//`,
rows loaded inside the loop, a pointer stepped in a nested loop, a loop that is no range) the rows
are taken at the store itself, from its own pointers: the probe runs the statement (its stores
left out, sliced to what their addresses use) and merges each store's chunk range into the
program's, and the program announces that range after its last store statement:

    # syncopy: the rows of C stored at line 12 are not bounded before this statement (the rows
    # read are not affine in the loop counter): taken at the store, announced after the last store
    for i in range(T):
        rows = (pid * T * BM + i * BM + tl.arange(0, BM)) % M
        tl.store(C + rows[:, None] * N + cols[None, :], v)
    # syncopy: the chunks of C this program writes, as the probe took them at its stores
    syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)

Without a table (a pipeline's link) the kernel collects the same range itself, at each store.

Every tile counts itself exactly once, on every path: a `return` before the announcement (a
triangular mask's `if pid_n > pid_m: return`, a tile skipped by a loaded flag) is preceded by the
same count, over the tile's range from the probe table, which is what the chunk's target was made
of. So a tile that stores nothing never holds a chunk back, and a chunk is announced only once
every tile that could write it has ended:

    if pid_n > pid_m:
        # syncopy: a tile that ends here still counts itself against its chunks
        syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_table_lo, syncopy_table_hi)
        return

The targets and table come from the probe; where the write addresses depend on loaded data
(`depends_on_data`), the runtime probes again at every launch instead of reusing a table.
"""
from __future__ import annotations

import libcst as cst

from syncopy.frontend import cstutil as cu
from syncopy.frontend.infer import _PURE_METHODS, TensorBinding
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


def _async_proxy_release() -> cst.BaseSmallStatement:
    """Before a notify in a kernel that stores through tensor descriptors: complete the tile's TMA
    stores and order them before the release (sm_90+; nothing elsewhere)."""
    return cst.parse_statement(f"{D}.async_proxy_release({names.ASYNC_PROXY_FLAG})\n").body[0]


def notify_statements(binding: TensorBinding) -> list[cst.BaseStatement]:
    notify = cst.parse_statement(f"{D}.notify_chunks({names.SIGNALS}, {names.CTX}, {names.LO}, {names.HI})\n")
    stmts = [_comment(notify, "announce the finished chunks")]
    if binding.descriptors:
        fence = cst.SimpleStatementLine([_async_proxy_release()])
        stmts.insert(0, _comment(fence, "the TMA stores land before the announcement (sm_90+)"))
    return stmts


EARLY_END = "a tile that ends here still counts itself against its chunks"
EVERY = "syncopy cannot bound the rows a helper called here writes: this program counts against every chunk"
CLAMPED = "a mask that changes with the loop is left out of this bound (rows outside the tensor clamp to it)"
FRESH = "its write addresses depend on loaded data: the runtime probes them at every launch"


def _early_notify(descriptors: bool) -> list[cst.BaseSmallStatement]:
    """The count of a tile that ends early (after the fence for its TMA stores, if it made any)."""
    notify = cst.parse_statement(f"{D}.notify_chunks({names.SIGNALS}, {names.CTX}, {names.TABLE_LO}, {names.TABLE_HI})\n").body[0]
    return [_async_proxy_release(), notify] if descriptors else [notify]


class _CountBeforeReturn(cst.CSTTransformer):
    """Put the tile's count (over its table range) before every `return`: a tile that ends before
    the announcement must still count itself, or the chunk it was expected to write never completes."""

    def __init__(self, descriptors: bool = False):
        super().__init__()
        self.descriptors = descriptors

    def leave_SimpleStatementLine(self, original, updated):
        if len(updated.body) == 1 and isinstance(updated.body[0], cst.Return):
            counts = [cst.SimpleStatementLine([small]) for small in _early_notify(self.descriptors)]
            counts[0] = _comment(counts[0].with_changes(leading_lines=list(updated.leading_lines)), EARLY_END)
            return cst.FlattenSentinel([*counts, updated.with_changes(leading_lines=[])])
        return updated.with_changes(body=self._before_returns(updated.body))

    def leave_SimpleStatementSuite(self, original, updated):
        return updated.with_changes(body=self._before_returns(updated.body))

    def _before_returns(self, body) -> list:
        out = []
        for small in body:
            if isinstance(small, cst.Return):
                semicolon = cst.Semicolon(whitespace_after=cst.SimpleWhitespace(" "))
                out += [s.with_changes(semicolon=semicolon) for s in _early_notify(self.descriptors)]
            out.append(small)
        return out


def at_stores(binding: TensorBinding) -> bool:
    """Whether some store's rows are not bounded before its statement (taken at the store instead)."""
    return any(g.nested for g in binding.groups)


def _at_store_note(binding: TensorBinding, group) -> str:
    return (f"the rows of {binding.tensor} stored at line {group.line} are not bounded before this statement "
            f"({group.why.replace('rows read', 'rows written')}): taken at the store, announced after the last store")


def _collected(body: list[cst.BaseStatement], binding: TensorBinding, start: int) -> list[tuple[cst.BaseStatement, bool]]:
    """Statements start..last store with the program's chunk range collected as they run: it starts
    empty, and each store statement merges in its bounded range (before it) or, for a store not
    bounded there, each store's own range (right before the statement holding it). (statement,
    whether it computes part of the range)."""
    last = binding.groups[-1].stmt_index
    init = cst.parse_statement(f"{names.LO}, {names.HI} = {D}.empty_range({binding.ctx})\n")
    out: list[tuple[cst.BaseStatement, bool]] = [(init, True)]
    site = 0
    for index in range(start, last + 1):
        stmt = body[index]
        here = [(k, g) for k, g in enumerate(binding.groups) if g.stmt_index == index]
        edits = []
        for k, g in here:
            if g.nested:
                lo, hi = f"{names.LO}_s{site}", f"{names.HI}_s{site}"
                site += 1
                edits.append((g.nested, [*consumer_wait.range_statements(binding, g, lo, hi), _merge(lo, hi)]))
            else:
                lo, hi = f"{names.LO}_w{k}", f"{names.HI}_w{k}"
                out += [(x, True) for x in (*consumer_wait.range_statements(binding, g, lo, hi), _merge(lo, hi))]
        if edits:
            stmt = consumer_wait.insert_nested(stmt, edits)
        out.append((stmt, bool(edits)))
    return out


def _merge(lo: str, hi: str) -> cst.BaseStatement:
    return cst.parse_statement(f"{names.LO}, {names.HI} = {D}.merge_ranges({names.LO}, {names.HI}, {lo}, {hi})\n")


class _RecordBeforeReturn(cst.CSTTransformer):
    """In the probe: a program that returns inside a statement the probe keeps records the chunks it
    collected so far (the kernel's tile counts its table range before the same return, after the
    same stores)."""

    def leave_SimpleStatementLine(self, original, updated):
        if any(isinstance(x, cst.Return) for x in updated.body):
            record = cst.parse_statement(f"{D}.probe_store({names.PROBE_OUT}, {names.LO}, {names.HI})\n")
            return cst.FlattenSentinel([record, updated])
        return updated


def insert_notifies(body: list[cst.BaseStatement], binding: TensorBinding, table: bool = False,
                    fresh: bool = False) -> list[cst.BaseStatement]:
    """`body` is the original function body (indices match `binding.groups`). `fresh`: the write
    addresses depend on loaded data (said in a comment; the runtime probes at every launch)."""
    if at_stores(binding):
        return _insert_at_stores(body, binding, table, fresh)
    at = {g.stmt_index: k for k, g in enumerate(binding.groups)}
    last = binding.groups[-1].stmt_index
    out: list[cst.BaseStatement] = []
    for index, stmt in enumerate(body):
        k = at.get(index)
        if index <= last:
            # Returns after the announcement need nothing: the tile has counted itself already.
            stmt = stmt.visit(_CountBeforeReturn(binding.descriptors))
        if k is not None:
            ranges = range_statements(binding, k, table)
            what = f"the chunks of {binding.tensor} this program writes"
            first = ranges[0].with_changes(leading_lines=list(stmt.leading_lines))
            if any(a.clamped for a in binding.groups[k].accesses):
                first = _comment(first, CLAMPED)
            if any(a.every for a in binding.groups[k].accesses):
                first = _comment(first, EVERY)
            ranges[0] = _comment(first, f"{what}; {FRESH}" if fresh and k == 0 else what)
            out.extend(ranges)
            stmt = stmt.with_changes(leading_lines=[])
        out.append(stmt)
        if index == last:
            out += notify_statements(binding)
    return out


def _insert_at_stores(body: list[cst.BaseStatement], binding: TensorBinding, table: bool,
                      fresh: bool) -> list[cst.BaseStatement]:
    """`insert_notifies` where some store's rows are taken at the store: with the probe's table, the
    program's range is the table's (the probe collected it store by store), read before the
    announcement; without one, the kernel collects it itself (`_collected`)."""
    first, last = binding.groups[0].stmt_index, binding.groups[-1].stmt_index
    counted = [s.visit(_CountBeforeReturn(binding.descriptors)) if i <= last else s for i, s in enumerate(body)]
    notes: dict[int, list[str]] = {}
    for g in binding.groups:
        if g.nested:
            notes.setdefault(g.stmt_index, []).append(_at_store_note(binding, g))
        else:
            notes.setdefault(g.stmt_index, []).extend(
                [*([CLAMPED] if any(a.clamped for a in g.accesses) else []), *([EVERY] if any(a.every for a in g.accesses) else [])])
    if fresh:
        notes.setdefault(first, []).insert(0, f"the chunks of {binding.tensor} this program writes; {FRESH}")
    for index, texts in notes.items():
        lines = [cst.EmptyLine(comment=cst.Comment(f"# syncopy: {t}")) for t in texts]
        counted[index] = counted[index].with_changes(leading_lines=[*counted[index].leading_lines, *lines])
    if table:
        read = cst.parse_statement(f"{names.LO}, {names.HI} = {names.TABLE_LO}, {names.TABLE_HI}\n")
        what = f"the chunks of {binding.tensor} this program writes, as the probe took them at its stores"
        return [*counted[:last + 1], _comment(read, what), *notify_statements(binding), *counted[last + 1:]]
    collected = [s for s, _ in _collected(counted, binding, first)]
    return [*counted[:first], *collected, *notify_statements(binding), *counted[last + 1:]]


_READS = {"load", "gather", "atomic_add", "atomic_xchg", "atomic_cas", "atomic_max", "atomic_min", "atomic_and", "atomic_or",
          "atomic_xor", "inline_asm_elementwise"}


def depends_on_data(stmts: list[cst.BaseStatement], module: cst.Module, pointers: set[str]) -> bool:
    """Whether the probe's statements (what computes the write ranges) read memory: a load or an
    atomic, or a call to a helper that does (followed through the helpers `module` defines; one
    defined elsewhere counts if it is handed a pointer, `pointers`). Then the ranges can change from
    one launch to the next with the same shapes and scalars, and no table may be reused."""
    helpers = {f.name.value: f for f in module.body if isinstance(f, cst.FunctionDef)}
    return any(_reads_memory(stmt, helpers, pointers, set()) for stmt in stmts)


def _reads_memory(node: cst.CSTNode, helpers: dict, pointers: set[str], seen: set[str]) -> bool:
    for call in cu.calls_in(node):
        name = cu.call_name(call) or ""
        leaf = name.rsplit(".", 1)[-1]
        if leaf in _READS:
            return True
        if name.split(".", 1)[0] in ("tl", "triton", "math", "libdevice", names.DEVICE) or leaf in _PURE_METHODS:
            continue
        helper = helpers.get(name)
        if helper is not None:
            if name not in seen and _reads_memory(helper.body, helpers, pointers, seen | {name}):
                return True
        elif any(cu.names_in(a.value) & pointers for a in call.args):
            return True
    return False


def probe_body(body: list[cst.BaseStatement], binding: TensorBinding, start: int) -> list[cst.BaseStatement]:
    """The statements a probe needs to compute the write range: the body up to the last store, each
    store statement replaced by its range statements, sliced backwards to what the ranges use (so
    the probe skips the K loop and every other computation the addresses do not depend on)."""
    if at_stores(binding):
        return _probe_at_stores(body, binding, start)
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
    if any(_returns(s) for s in kept):
        # A return the slice keeps (in a statement kept for a name the addresses use) ends the probe
        # program after some stores: it records the range so far, which starts empty.
        init = cst.parse_statement(f"{names.LO}, {names.HI} = {D}.empty_range({binding.ctx})\n")
        return [init, *(s.visit(_RecordBeforeReturn()) for s in kept[::-1])]
    return kept[::-1]


def _returns(stmt: cst.CSTNode) -> bool:
    found = []

    class V(cst.CSTVisitor):
        def visit_Return(self, node: cst.Return) -> None:
            found.append(node)

    stmt.visit(V())
    return bool(found)


def _probe_at_stores(body: list[cst.BaseStatement], binding: TensorBinding, start: int) -> list[cst.BaseStatement]:
    """`probe_body` where some store's rows are taken at the store: the statements from the first to
    the last store, the range collected as they run (`_collected`), sliced backwards to what the
    ranges use, inside the statements that hold such stores too (their K loops, other stores and
    every value the addresses do not use left out)."""
    needed: set[str] = set()
    kept: list[cst.BaseStatement] = []
    for stmt, anchor in reversed(_collected(body, binding, start)):
        if anchor and not isinstance(stmt, cst.SimpleStatementLine):
            stmt = _slice(stmt, needed)
        elif not (anchor or cu.assigned_in(stmt) & needed):
            continue
        kept.append(stmt)
        needed |= cu.names_in(stmt)
    # The range starts empty before anything else, so a return anywhere can record it.
    return [kept[-1], *(s.visit(_RecordBeforeReturn()) for s in kept[-2::-1])]


def _slice(stmt: cst.BaseStatement, needed: set[str]) -> cst.BaseStatement:
    """`stmt` with only what its collected ranges (and `needed`, what later statements use) depend
    on: a fixpoint over the names used, flow-insensitive (an assignment to a needed name is kept
    wherever it is), control flow (`break`, `continue`, `return`, loops and tests) kept."""
    names_ = set(needed)
    while True:
        out = _slice_compound(stmt, names_)
        more = names_ | cu.names_in(out)
        if more == names_:
            return out
        names_ = more


def _keep_small(small: cst.BaseSmallStatement, needed: set[str]) -> bool:
    if isinstance(small, (cst.Return, cst.Break, cst.Continue)):
        return True
    if cu.assigned_in(small) & needed:
        return True
    return any((cu.call_name(c) or "").split(".", 1)[0] == D for c in cu.calls_in(small))


def _slice_block(stmts, needed: set[str]) -> list[cst.BaseStatement]:
    out = []
    for s in stmts:
        if isinstance(s, cst.SimpleStatementLine):
            kept = [x for x in s.body if _keep_small(x, needed)]
            if kept:
                kept[-1] = kept[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
                out.append(s.with_changes(body=kept))
        else:
            new = _slice_compound(s, needed)
            if new is not None:
                out.append(new)
    return out


def _block(stmts: list[cst.BaseStatement]) -> cst.IndentedBlock:
    return cst.IndentedBlock(body=stmts or [cst.SimpleStatementLine([cst.Pass()])])


def _slice_compound(s: cst.BaseStatement, needed: set[str]):
    """A compound statement sliced (None: nothing of it is needed)."""
    if isinstance(s, cst.SimpleStatementLine):
        kept = _slice_block([s], needed)
        return kept[0] if kept else None
    body = _slice_block(consumer_wait._indented(s.body).body, needed) if hasattr(s, "body") else []
    if isinstance(s, cst.For):
        if not body and not (set(cu.target_names(s.target)) & needed) and s.orelse is None:
            return None
        return s.with_changes(body=_block(body))
    if isinstance(s, cst.While):
        return s.with_changes(body=_block(body))
    if isinstance(s, cst.If):
        orelse = s.orelse
        if isinstance(orelse, cst.If):
            orelse = _slice_compound(orelse, needed)
        elif orelse is not None:
            rest = _slice_block(consumer_wait._indented(orelse.body).body, needed)
            orelse = orelse.with_changes(body=_block(rest)) if rest else None
        if not body and orelse is None:
            return None
        return s.with_changes(body=_block(body), orelse=orelse)
    if isinstance(s, cst.With):
        return s.with_changes(body=_block(body)) if body else None
    return s
