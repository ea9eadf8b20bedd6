"""Pass: loop order. A loop whose iterations read other rows of the communicated tensor waits inside,
per iteration (infer.py, consumer_wait.py). When the loop only accumulates (a sum, a max, a dot into
an accumulator, an online softmax: order-independent up to rounding), it runs its iterations in
chunk-arrival order, this rank's own rows first, as the tile reorder does for programs:

    syncopy_n = syncopy_device.trip_count(0, hi, BN)
    syncopy_r0 = syncopy_device.first_row(<the read's pointer at the first iteration>, K, syncopy_ctx)
    syncopy_r1 = syncopy_device.first_row(<... at the second iteration>, K, syncopy_ctx)
    for syncopy_t in range(0, syncopy_n):
        start = 0 + syncopy_device.arrival_iteration(syncopy_t, syncopy_n, syncopy_r0, syncopy_r1, syncopy_ctx) * BN
        <the loop's body, its per-iteration waits included>

Where that is not shown from the source, iterations keep their order and still wait one by one. The
schedule's `loop_order` forces either; `arrival` where iterations carry other state is refused.
"""
from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from syncopy.errors import KernelError
from syncopy.frontend import cstutil as cu
from syncopy.frontend.infer import ReadGroup, TensorBinding
from syncopy.frontend.source import KernelSource
from syncopy.passes import names

D = names.DEVICE
T, N, R0, R1 = "syncopy_t", "syncopy_n", "syncopy_r0", "syncopy_r1"
_RANGES = {"range", "tl.range", "triton.language.range"}
_REDUCERS = {"maximum", "minimum"}
_SIDE_EFFECTS = ("store", "atomic_", "device_print", "device_assert")


@dataclass
class ArrivalLoop:
    """A top-level loop to run in arrival order: where its iterations' rows begin, read through which binding."""

    rows_at: tuple[str, str]
    binding: TensorBinding


def plan(ks: KernelSource, body: list[cst.BaseStatement], bindings: tuple[TensorBinding, ...],
         forced: str | None) -> dict[int, ArrivalLoop]:
    """Which top-level loops (by index in `body`) run in arrival order. Raises for a forced order that
    cannot hold; with nothing forced, a loop that cannot be shown to only accumulate keeps its order."""
    moving = _moving_loops(bindings)
    if forced is not None and not moving:
        raise KernelError(f"loop_order: {forced} is set but no loop of kernel '{ks.name}' reads other rows of "
                          f"'{bindings[0].tensor}' at each iteration; drop loop_order", ks.location(ks.func))
    out: dict[int, ArrivalLoop] = {}
    if forced == "as_written":
        return out
    before_names = set(ks.params)
    for index, stmt in enumerate(body):
        if index in moving:
            group, binding = moving[index]
            after = set().union(*(cu.names_in(s) for s in body[index + 1:]))
            problem = _why_not(ks, stmt, before_names, after, group)
            if not problem:
                out[index] = ArrivalLoop(group.rows_at, binding)
            elif forced == "arrival":
                line = ks.location(stmt).line
                raise KernelError(f"loop_order: arrival, but the loop at line {line} {problem}, so its iterations must keep "
                                  "their order; set loop_order: as_written (or drop it)", ks.location(stmt))
        before_names |= cu.assigned_in(stmt)
    return out


def _moving_loops(bindings) -> dict[int, tuple[ReadGroup, TensorBinding]]:
    """Top-level statements holding a read whose rows move with the loop (the first such read)."""
    out: dict[int, tuple[ReadGroup, TensorBinding]] = {}
    for b in bindings:
        for g in b.groups:
            if g.nested and "each iteration reads other rows" in g.why and g.stmt_index not in out:
                out[g.stmt_index] = (g, b)
    return out


def _why_not(ks: KernelSource, stmt: cst.CSTNode, before: set[str], after: set[str], group: ReadGroup) -> str:
    """'' where the loop's iterations may run in any order, else what stops them (as a clause).
    `before`: the names defined before the loop; `after`: those the kernel uses after it. A name the
    loop assigns and that lives across iterations or past the loop must be an accumulator."""
    if group.rows_at is None or not isinstance(stmt, cst.For):
        return "is nested in another statement (only a loop directly in the kernel's body is reordered)"
    if not isinstance(stmt.target, cst.Name) or stmt.orelse is not None:
        return "does not bind one name (or has an else branch)"
    it = stmt.iter
    if not (isinstance(it, cst.Call) and cu.call_name(it) in _RANGES and 1 <= len(it.args) <= 3
            and all(a.keyword is None for a in it.args)):
        return f"is not `for ... in range(...)`"
    if len(it.args) == 3 and not _positive_step(ks, it.args[2].value):
        return f"steps by {ks.code(it.args[2].value)}, which is not a positive literal or constexpr"
    for call in cu.calls_in(stmt.body):
        leaf = (cu.call_name(call) or "").rsplit(".", 1)[-1]
        if leaf.startswith(_SIDE_EFFECTS):
            return f"calls {cu.call_name(call)} (a side effect whose order may matter)"
    if any(isinstance(n, (cst.Break, cst.Continue, cst.Return)) for n in _walk(stmt.body)):
        return "leaves early (break, continue or return)"
    var = stmt.target.value
    if var in cu.assigned_in(stmt.body) or var in after:
        return f"assigns its variable '{var}' in its body or reads it after the loop"
    carried = sorted((cu.assigned_in(stmt.body) & (before | after)) - {var})
    updates = _updates(stmt.body)
    maxes = {x for x in carried if _is_reduced(x, updates)}
    for x in carried:
        problem = _accumulator_problem(x, updates, maxes, stmt.body)
        if problem:
            return f"carries '{x}' from iteration to iteration ({problem})"
    return ""


def _positive_step(ks: KernelSource, step: cst.BaseExpression) -> bool:
    if isinstance(step, cst.Integer):
        return int(step.value, 0) > 0
    return isinstance(step, cst.Name) and step.value in _constexprs(ks)


def _constexprs(ks: KernelSource) -> set[str]:
    params = (*ks.func.params.posonly_params, *ks.func.params.params, *ks.func.params.kwonly_params)
    return {p.name.value for p in params if p.annotation is not None and "constexpr" in ks.code(p.annotation.annotation)}


def _walk(node: cst.CSTNode):
    yield node
    for child in node.children:
        yield from _walk(child)


def _updates(body: cst.CSTNode) -> dict[str, list[cst.CSTNode]]:
    """Every assignment in the loop body, by the name it assigns."""
    out: dict[str, list[cst.CSTNode]] = {}
    for n in _walk(body):
        if isinstance(n, cst.Assign) and len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name):
            out.setdefault(n.targets[0].target.value, []).append(n)
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign)) and isinstance(n.target, cst.Name):
            out.setdefault(n.target.value, []).append(n)
        elif isinstance(n, (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For, cst.With)):
            for name in cu.assigned_in(n) if not isinstance(n, (cst.For, cst.With)) else ():
                out.setdefault(name, []).append(n)
    return out


def _reducer_of(value: cst.BaseExpression, x: str) -> bool:
    """`tl.maximum(x, e)` / `tl.minimum(e, x)` with e free of x."""
    if not isinstance(value, cst.Call) or (cu.call_name(value) or "").rsplit(".", 1)[-1] not in _REDUCERS or len(value.args) != 2:
        return False
    a, b = (arg.value for arg in value.args)
    return (_is(a, x) and x not in cu.names_in(b)) or (_is(b, x) and x not in cu.names_in(a))


def _is_reduced(x: str, updates) -> bool:
    """x is a running max/min: `x = tl.maximum(x, e)`, or `x = y` after `y = tl.maximum(x, e)`."""
    mine = updates.get(x, [])
    if len(mine) != 1 or not isinstance(mine[0], cst.Assign):
        return False
    value = mine[0].value
    if isinstance(value, cst.Name):
        theirs = updates.get(value.value, [])
        return len(theirs) == 1 and isinstance(theirs[0], cst.Assign) and _reducer_of(theirs[0].value, x)
    return _reducer_of(value, x)


def _is(node: cst.CSTNode, x: str) -> bool:
    return isinstance(node, cst.Name) and node.value == x


def _accumulator_problem(x: str, updates, maxes: set[str], body: cst.CSTNode) -> str:
    """'' if x is only accumulated into, else what it does instead."""
    mine = updates.get(x, [])
    if x in maxes:
        return ""
    if len(mine) != 1:
        return "assigned more than once"
    node = mine[0]
    if isinstance(node, cst.AugAssign):
        ok = isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign)) and x not in cu.names_in(node.value)
    elif isinstance(node, cst.Assign):
        ok = _sum_form(node.value, x, bool(maxes))
    else:
        ok = False
    if not ok:
        return "not a sum into it"
    reads = sum(1 for n in _walk(body) if _is(n, x)) - sum(1 for n in _walk(node) if _is(n, x))
    return "" if reads == 0 else "read outside its own update"


def _sum_form(value: cst.BaseExpression, x: str, rescaled: bool) -> bool:
    """x + e, e + x, or (with a running max in the loop) x * f + e: an online-softmax rescale."""
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add)):
        return False
    for mine, other in ((value.left, value.right), (value.right, value.left)):
        if x in cu.names_in(other):
            continue
        if _is(mine, x):
            return True
        if rescaled and isinstance(mine, cst.BinaryOperation) and isinstance(mine.operator, cst.Multiply):
            a, b = mine.left, mine.right
            if (_is(a, x) and x not in cu.names_in(b)) or (_is(b, x) and x not in cu.names_in(a)):
                return True
    return False


def rewrite(ks: KernelSource, loop: cst.For, arrival: ArrivalLoop) -> list[cst.BaseStatement]:
    """The loop, run in chunk-arrival order (see the module docstring), with what it needs before it."""
    args = [ks.code(a.value) for a in loop.iter.args]
    start, stop, step = (["0", args[0], "1"] if len(args) == 1 else [*args, "1"] if len(args) == 2 else args)
    b, var = arrival.binding, loop.target.value
    r0, r1 = arrival.rows_at
    pre = [
        f"{N} = {D}.trip_count({start}, {stop}, {step})\n",
        f"{R0} = {D}.first_row({r0}, {b.base}, {b.ctx})\n",
        f"{R1} = {D}.first_row({r1}, {b.base}, {b.ctx})\n",
    ]
    stmts = [cst.parse_statement(code) for code in pre]
    note = cst.EmptyLine(comment=cst.Comment("# syncopy: the loop only accumulates: its iterations run in chunk-arrival "
                                             "order, this rank's rows first"))
    stmts[0] = stmts[0].with_changes(leading_lines=[*loop.leading_lines, note])
    first = cst.parse_statement(f"{var} = {cu.paren(start)} + {D}.arrival_iteration({T}, {N}, {R0}, {R1}, {b.ctx}) * {cu.paren(step)}\n")
    body = loop.body
    new_loop = loop.with_changes(
        leading_lines=[], target=cst.Name(T),
        iter=cst.parse_expression(f"range(0, {N})"),
        body=body.with_changes(body=[first, *body.body]))
    return [*stmts, new_loop]
