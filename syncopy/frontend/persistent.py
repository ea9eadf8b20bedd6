"""Persistent loops: kernels whose programs each loop over many tiles (how fast Hopper GEMMs are written).

    start = tl.program_id(0)
    for tile in range(start, n_tiles, NUM_PROGRAMS):     # kind "for": the loop variable is the tile id
        pid_m, pid_n = coords(tile, ...)                   # (a @triton.jit helper is fine)
        <reads of the communicated tensor>

    tile = tl.program_id(0)
    while tile < n_tiles:                                  # kind "while": a counter the loop steps itself
        <reads>
        tile += NUM_PROGRAMS

    tile = start - NUM_PROGRAMS
    for _ in range(k_tiles * tiles_per_program):          # kind "flat": one iteration per K step,
        ki = tl.where(ki == k_tiles - 1, 0, ki + 1)
        if ki == 0:
            tile += NUM_PROGRAMS                           # a new tile starts inside this block
            <tile coordinates>
        <reads>

A *tile counter* is a scalar computed from `tl.program_id` before the loop (no `tl.arange`, no
indexing, not a pointer into the communicated tensor) that the loop only ever steps by a
loop-invariant `+=`. Inference puts the wait at the start of each tile, inside the loop; the passes
remap every counter through the runtime's tile order so that all programs together visit tiles in
chunk-arrival order. Nothing here matches on the user's names.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from syncopy.frontend import cstutil as cu

_RANGE_CALLS = {"range", "tl.range", "triton.language.range"}


@dataclass
class PersistentLoop:
    """A top-level loop over tiles and the names that hold its tile id."""

    index: int                   # top-level statement index of the loop in the kernel body
    kind: str                    # "for" | "while" | "flat" (see the module docstring)
    tile: str                    # the name holding this tile's id where the tile's wait goes
    loop_var: str | None         # kind "for": the range variable (a slot, remapped to a tile on entry)
    step: str                    # the loop's step between a program's tiles (code)
    counters: dict[str, str] = field(default_factory=dict)  # counter -> its `+=` step (code)
    tile_block: tuple[int, ...] = ()  # kind "flat": index in the loop body of the `if` a tile starts in
    tile_start: bool = False     # the first wait's rows are a function of the tile id alone
    remap: bool = False          # safe to remap tile ids (no other state carried from tile to tile)
    why_not: str = ""            # why tile_start or remap is off (for --dump-dir's binding stage)
    note: str = ""               # why_not, where the transformed source must say it too (issue 10)


def _is_program_id(call: cst.Call) -> bool:
    name = cu.call_name(call) or ""
    return name.rsplit(".", 1)[-1] == "program_id" and (name == "program_id" or name.split(".")[0] in ("tl", "triton", "language"))


def _leaf(call: cst.Call) -> str:
    return (cu.call_name(call) or "").rsplit(".", 1)[-1]


def _data_free_names(expr: cst.CSTNode) -> set[str]:
    """Names an expression's value depends on, not looking inside loads (their values are data)."""
    found: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> bool:
            return _leaf(n) != "load"

        def visit_Attribute(self, n: cst.Attribute) -> bool:
            n.value.visit(self)
            return False

        def visit_Arg(self, n: cst.Arg) -> bool:
            n.value.visit(self)
            return False

        def visit_Name(self, n: cst.Name) -> None:
            found.add(n.value)

    expr.visit(V())
    return found


def _has_program_id(expr: cst.CSTNode) -> bool:
    return any(_is_program_id(c) for c in cu.calls_in(expr))


def forward(func: cst.FunctionDef, seeds: set[str], *, program_ids: bool = False) -> set[str]:
    """Names computed from `seeds` (and, with program_ids, from `tl.program_id`): a flow-insensitive
    fixpoint over assignments and range-loop targets; loaded values are data, not followed."""
    return cu.spread(func.body, set(seeds),
                     lambda value, out: bool(_data_free_names(value) & out) or (program_ids and _has_program_id(value)))


def _scalar_from_program_id(expr: cst.CSTNode, tainted: set[str]) -> bool:
    """A scalar tile index: computed from the program id, with no block (`tl.arange`) or indexing in it."""
    if not (_has_program_id(expr) or (_data_free_names(expr) & tainted)):
        return False
    if any(_leaf(c) in ("arange", "zeros", "full", "load", "make_block_ptr", "make_tensor_descriptor") for c in cu.calls_in(expr)):
        return False
    found = []

    class V(cst.CSTVisitor):
        def visit_Subscript(self, n: cst.Subscript) -> None:
            found.append(n)

    expr.visit(V())
    return not found


def _range(ks, loop: cst.For) -> tuple[cst.BaseExpression, str] | None:
    """(start, step code) of `for v in range(start, stop[, step])`, or None."""
    it = loop.iter
    if not (isinstance(it, cst.Call) and cu.call_name(it) in _RANGE_CALLS and isinstance(loop.target, cst.Name)):
        return None
    positional = [a.value for a in it.args if a.keyword is None and a.star == ""]
    if len(positional) == 2:
        return positional[0], "1"
    if len(positional) >= 3:
        return positional[0], ks.code(positional[2])
    return None


def step_of(stmt: cst.CSTNode, name: str) -> cst.BaseExpression | None:
    """The increment of `name += inc` or `name = name + inc`, else None."""
    if isinstance(stmt, cst.AugAssign) and isinstance(stmt.target, cst.Name) and stmt.target.value == name:
        return stmt.value if isinstance(stmt.operator, cst.AddAssign) else None
    if isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0].target, cst.Name):
        v = stmt.value
        if stmt.targets[0].target.value == name and isinstance(v, cst.BinaryOperation) and isinstance(v.operator, cst.Add):
            if isinstance(v.left, cst.Name) and v.left.value == name:
                return v.right
    return None


def _assignments(node: cst.CSTNode, name: str) -> list[tuple[tuple[int, ...], cst.CSTNode]]:
    """Every small statement (or loop target) assigning `name` inside `node`'s body, with its path
    of statement indices through nested bodies (If bodies only; else-branches count as deeper)."""
    out: list[tuple[tuple[int, ...], cst.CSTNode]] = []

    def walk(block: list[cst.CSTNode], path: tuple[int, ...], direct: bool) -> None:
        for i, s in enumerate(block):
            here = path + (i,) if direct else path + (-1,)
            if isinstance(s, cst.SimpleStatementLine):
                for small in s.body:
                    if name in cu.assigned_in(small):
                        out.append((here, small))
            elif isinstance(s, (cst.If, cst.For, cst.While, cst.With)):
                if isinstance(s, cst.For) and name in cu.target_names(s.target):
                    out.append((here, s))
                walk(list(s.body.body), here, direct and isinstance(s, cst.If))
                orelse = getattr(s, "orelse", None)
                if orelse is not None:
                    body = orelse.body
                    walk([body] if isinstance(body, cst.If) else list(body.body), here + (-1,), False)
            elif name in cu.assigned_in(s):
                out.append((here + (-1,), s))

    walk(list(node.body.body), (), True)
    return out


def find(ks, func: cst.FunctionDef, body: list[cst.BaseStatement], reads_in, derived: set[str]) -> PersistentLoop | None:
    """The first top-level loop that reads the tensor and runs over tiles, or None.

    `reads_in(stmt)` lists the names the reads inside `stmt` use for their rows (pointer or
    descriptor row coordinate), empty when `stmt` does not read the communicated tensor.
    """
    tainted = forward(func, set(), program_ids=True)
    params = set(ks.params)
    for index, loop in enumerate(body):
        if not isinstance(loop, (cst.For, cst.While)):
            continue
        read_names = reads_in(loop)
        if not read_names:
            continue
        in_loop = cu.assigned_in(loop.body) | (set(cu.target_names(loop.target)) if isinstance(loop, cst.For) else set())
        counters = _counters(ks, body[:index], loop, in_loop, tainted, derived, params)
        rng = _range(ks, loop) if isinstance(loop, cst.For) else None
        if rng is not None and _scalar_from_program_id(rng[0], tainted):
            var, step = loop.target.value, rng[1]
            if var in cu.assigned_in(loop.body) or cu.names_in(cst.parse_expression(step)) & in_loop:
                continue
            mine = {n: s for n, s in counters.items() if cu.same_expression(s, step)}
            return PersistentLoop(index, "for", var, var, step, mine)
        if not counters:
            continue
        # The counter that decides the rows read is the tile id; others stepped alike follow it.
        primary = next((n for n in counters if forward(func, {n}) & read_names), None)
        if primary is None:
            continue
        step = counters[primary]
        mine = {n: s for n, s in counters.items() if cu.same_expression(s, step)}
        paths = [p for p, _ in _assignments(loop, primary)]
        kind, block = "while", ()
        if len(paths) == 1 and len(paths[0]) == 2 and -1 not in paths[0] and isinstance(loop.body.body[paths[0][0]], cst.If):
            kind, block = "flat", (paths[0][0],)
        return PersistentLoop(index, kind, primary, None, step, mine, block)
    return None


def _counters(ks, prefix, loop, in_loop, tainted, derived, params) -> dict[str, str]:
    """Tile counters of `loop`: {name: step code}, in the order they are defined before the loop."""
    out: dict[str, str] = {}
    defined: dict[str, cst.CSTNode] = {}
    for stmt in prefix:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                    defined[small.targets[0].target.value] = small.value
                    continue
                for n in cu.assigned_in(small):
                    defined[n] = None
        else:
            for n in cu.assigned_in(stmt):
                defined[n] = None
    for name, value in defined.items():
        if value is None or name in params or name in derived or name not in in_loop:
            continue
        if not _scalar_from_program_id(value, tainted):
            continue
        steps = []
        for _, small in _assignments(loop, name):
            inc = step_of(small, name)
            if inc is None or cu.names_in(inc) & in_loop:
                steps = []
                break
            steps.append(ks.code(inc))
        if steps and all(cu.same_expression(s, steps[0]) for s in steps):
            out[name] = steps[0]
    return out


def determined(loop: PersistentLoop, stmt: cst.CSTNode, wait_at: tuple[int, ...], tainted: set[str]):
    """A predicate on sets of names: is their value at the tile's wait a function of the tile id alone?

    True for loop-invariant names (not assigned in the loop, not derived from the program id), the
    tile counters, and names assigned in straight-line code between the tile's start and the wait
    from such names. For kind "flat" that code is the tile's block (it runs once per tile); names
    the loop assigns anywhere else change from one K step to the next.
    """
    body = list(stmt.body.body)
    in_loop = cu.assigned_in(stmt.body) | (set(cu.target_names(stmt.target)) if isinstance(stmt, cst.For) else set())
    tiles = set(loop.counters) | {loop.tile} | ({loop.loop_var} if loop.loop_var else set())
    outside: set[str] = set()
    if loop.kind == "flat":
        straight = list(body[loop.tile_block[0]].body.body)
        for i, s in enumerate(body):
            if i != loop.tile_block[0]:
                outside |= cu.assigned_in(s)
    else:
        straight = body[: wait_at[0]]
    ok: set[str] = set()

    def fine(names: set[str]) -> bool:
        return all((n not in in_loop and n not in tainted) or n in tiles or n in ok for n in names)

    for s in straight:
        if not isinstance(s, cst.SimpleStatementLine):
            ok -= cu.assigned_in(s)
            continue
        for small in s.body:
            targets = cu.assigned_in(small)
            if not targets or (isinstance(small, cst.AugAssign) and targets <= tiles):
                continue
            value = getattr(small, "value", None)
            if isinstance(small, (cst.Assign, cst.AnnAssign)) and value is not None and not (targets & tiles) and fine(_data_free_names(value)):
                ok |= targets
            else:
                ok -= targets
    ok -= outside
    return fine


def carried_state(loop: PersistentLoop, stmt: cst.CSTNode, tainted: set[str]) -> list[str]:
    """Names other than the counters that carry program-id-derived state from one tile to the next
    (stepped with `+=` once per tile): remapping tile ids would not remap them."""
    body = list(stmt.body.body)
    blocks = [body]
    if loop.kind == "flat":
        blocks.append(list(body[loop.tile_block[0]].body.body))
    tiles = set(loop.counters) | {loop.tile} | ({loop.loop_var} if loop.loop_var else set())
    out = []
    for block in blocks:
        for s in block:
            if not isinstance(s, cst.SimpleStatementLine):
                continue
            for small in s.body:
                for name in cu.assigned_in(small):
                    if name in tainted and name not in tiles and step_of(small, name) is not None:
                        out.append(name)
    return sorted(set(out))


def _exposed(block: list[cst.CSTNode]) -> set[str]:
    """Names a block reads before it assigns them (upward-exposed uses). Only straight-line
    assignments count as definitions: a branch or a loop may not run, so what it assigns stays
    exposed after it (erring toward finding carried state, never toward missing it)."""
    out: set[str] = set()
    defined: set[str] = set()
    for s in block:
        if isinstance(s, cst.SimpleStatementLine):
            for small in s.body:
                uses = cu.names_in(small)
                if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None:
                    uses = cu.names_in(small.value)
                    for t in getattr(small, "targets", [small]):
                        target = t.target
                        if not isinstance(target, (cst.Name, cst.Tuple, cst.List)):
                            uses |= cu.names_in(target)
                out |= uses - defined
                if isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
                    defined |= cu.assigned_in(small)
            continue
        uses: set[str] = set()
        if isinstance(s, cst.For):
            uses = cu.names_in(s.iter) | (_exposed(list(s.body.body)) - set(cu.target_names(s.target)))
        elif isinstance(s, cst.While):
            uses = cu.names_in(s.test) | _exposed(list(s.body.body))
        elif isinstance(s, cst.If):
            uses = cu.names_in(s.test) | _exposed(list(s.body.body))
            if s.orelse is not None:
                body = s.orelse.body
                uses |= _exposed([body] if isinstance(body, cst.If) else list(body.body))
        else:
            uses = cu.names_in(s)
        out |= uses - defined
    return out


def carried_values(loop: PersistentLoop, stmt: cst.CSTNode) -> list[str]:
    """Names one iteration of a tile loop leaves for the next (read before they are assigned in
    the body, assigned later in it): a block prefetched for `tile + step`, a stream-K accumulator.
    Remapped tile ids would hand them to a tile they do not belong to. Flat loops carry their
    accumulator across K steps by design and are checked by `carried_state` instead."""
    if loop.kind == "flat":
        return []
    own = set(loop.counters) | {loop.tile} | ({loop.loop_var} if loop.loop_var else set())
    in_loop = cu.assigned_in(stmt.body)
    return sorted((_exposed(list(stmt.body.body)) & in_loop) - own)


def step_paths(loop: PersistentLoop, stmt: cst.CSTNode) -> dict[str, list[tuple[int, ...]]]:
    """Where each counter is stepped in the loop body: statement paths through `if` bodies, or None
    where a step sits somewhere a statement cannot be inserted after it (a loop, an else branch)."""
    out = {}
    for name in loop.counters:
        paths = [p for p, _ in _assignments(stmt, name)]
        out[name] = None if any(-1 in p for p in paths) else paths
    return out


def loop_test_problem(loop: PersistentLoop, stmt: cst.CSTNode, ks, tainted: set[str] = frozenset()) -> str:
    """Why a while loop's test would see remapped tile ids instead of slots ('' when it cannot).

    `while T < E:` with `T += step` as the last statement of the body is safe: the remap is a
    permutation of 0..n-1 and the identity elsewhere, and such a loop visits slots 0..E-1, so
    `tile < E` holds exactly when `slot < E` does. Any other test on a counter is not.
    """
    if not isinstance(stmt, cst.While) or not (cu.names_in(stmt.test) & set(loop.counters)):
        return ""
    t = stmt.test
    body = list(stmt.body.body)
    ok = (isinstance(t, cst.Comparison) and len(t.comparisons) == 1 and isinstance(t.comparisons[0].operator, cst.LessThan)
          and isinstance(t.left, cst.Name) and t.left.value in loop.counters
          and not (cu.names_in(t.comparisons[0].comparator) & cu.assigned_in(stmt.body))
          and isinstance(body[-1], cst.SimpleStatementLine) and step_of(body[-1].body[-1], t.left.value) is not None)
    if ok and cu.names_in(t.comparisons[0].comparator) & tainted:
        # `tile < end` with an end of this program's own: a remapped tile id is no slot of it.
        return f"the while test `{ks.code(t)}` compares the tile id with a bound of this program's own"
    return "" if ok else f"the while test `{ks.code(t)}` compares the tile id itself"
