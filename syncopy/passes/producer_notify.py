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

Proven or as written (docs/how-it-works.md): the range is the stores' rows as inference bounds them;
the proof of those bounds for every store (affinity, `%`, every corner) is the open part C of the
issue of that name.

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


def insert_notifies(body: list[cst.BaseStatement], binding: TensorBinding, table: bool = False,
                    fresh: bool = False) -> list[cst.BaseStatement]:
    """`body` is the original function body (indices match `binding.groups`). `fresh`: the write
    addresses depend on loaded data (said in a comment; the runtime probes at every launch)."""
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
            ranges[0] = _comment(ranges[0].with_changes(leading_lines=list(stmt.leading_lines)),
                                 f"{what}; {FRESH}" if fresh and k == 0 else what)
            out.extend(ranges)
            stmt = stmt.with_changes(leading_lines=[])
        out.append(stmt)
        if index == last:
            out += notify_statements(binding)
    return out


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
