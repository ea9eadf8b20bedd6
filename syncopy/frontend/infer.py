"""Binding inference: which rows (along `dim`) of the communicated tensor each program reads.

We follow the pointer arithmetic of every read of the tensor (a `*.load(ptr, mask=...)`, or a call
of a user helper handed a pointer into the tensor) and rewrite that pointer expression so that it
can be evaluated *before* the top-level statement that contains the read: names assigned inside the
statement are inlined, loop variables are replaced by their first value (and, for a second
evaluation, their last value; pointers stepped with `+=` in the loop get their last-iteration value).
With affine index arithmetic the rows read in any iteration lie between those of the first and
the last, so a wait on the union is a wait on everything the loop will read.

Nothing here matches on the user's names: the communicated argument is the only name we start from.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from syncopy.errors import InferenceError, KernelError, SourceLocation
from syncopy.frontend import cstutil as cu
from syncopy.frontend import persistent, scope
from syncopy.frontend.source import KernelSource

BASE_NAME = "syncopy_base"
_RANGE_CALLS = {"range", "tl.range", "tl.static_range", "triton.language.range", "triton.language.static_range"}
_PURE_METHODS = {"to", "reshape", "broadcast_to", "expand_dims", "trans", "permute", "view"}


@dataclass
class Access:
    """A pointer block (and mask) as code that is valid right before the read's top-level statement.

    For a read through a tensor descriptor, `pointer` is the block's first row (the coordinate for
    dim 0) and `desc` holds (descriptor base, block rows, descriptor rows, row stride, offset of the
    last element of the other dimensions), the arguments of `syncopy_device.desc_chunk_range`.
    """

    pointer: str
    mask: str | None = None
    desc: tuple[str, ...] | None = None


@dataclass
class ReadGroup:
    """Reads inside one top-level statement; one wait goes right before that statement.

    In a persistent loop (statement `stmt_index`), `inner` is where the wait goes inside it: indices
    into the loop body (and into an `if` body for a flat loop), the last one an insertion point.
    `tile_start` marks the wait at the start of each tile, whose rows are a function of the tile id.
    """

    stmt_index: int
    accesses: list[Access]
    line: int
    inner: tuple[int, ...] = ()
    tile_start: bool = False


@dataclass
class TensorBinding:
    """The result of inference for one communicated tensor."""

    tensor: str
    dim: int
    base: str
    copy_base: bool
    groups: list[ReadGroup] = field(default_factory=list)
    explicit_rows: str | None = None
    persistent: persistent.PersistentLoop | None = None


@dataclass
class Descriptor:
    """`name = tl.make_tensor_descriptor(base, shape, strides, block_shape)` over the tensor, as code."""

    name: str
    base: str
    rows: str
    row_stride: str
    block_rows: str
    tail: str

    def args(self) -> tuple[str, ...]:
        return (self.base, self.block_rows, self.rows, self.row_stride, self.tail)


@dataclass
class _DescRead:
    desc: Descriptor
    row: cst.BaseExpression


_PRODUCER = "reduce_scatter and all_reduce"


def _binding_hint(tensor: str, dim: int, writes: bool = False) -> str:
    verb = "writes" if writes else "reads"
    return (
        f"add `binding: {{rows: <expression>}}` to the schedule, giving in the kernel's names the indices "
        f"along dim {dim} of '{tensor}' that one program {verb} (e.g. pid_m * BLOCK_M + tl.arange(0, BLOCK_M))"
    )


def _pointer_names(expr: cst.CSTNode) -> set[str]:
    """Names an expression's *pointer* value can come from: what a load returns is data, not a pointer."""
    found: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> bool:
            if (cu.call_name(n) or "").rsplit(".", 1)[-1] == "load":
                return False
            return True

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


def _derived_names(func: cst.FunctionDef, tensor: str) -> set[str]:
    """Names whose value is computed from the tensor's pointer (a fixpoint, flow-insensitive)."""
    derived = {tensor}

    class V(cst.CSTVisitor):
        changed = False

        def _add(self, names):
            new = set(names) - derived
            if new:
                derived.update(new)
                self.changed = True

        def visit_Assign(self, n: cst.Assign) -> None:
            if _pointer_names(n.value) & derived:
                for t in n.targets:
                    self._add(cu.target_names(t.target))

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            if _pointer_names(n.value) & derived:
                self._add(cu.target_names(n.target))

        def visit_AnnAssign(self, n: cst.AnnAssign) -> None:
            if n.value is not None and _pointer_names(n.value) & derived:
                self._add(cu.target_names(n.target))

    v = V()
    while True:
        v.changed = False
        func.body.visit(v)
        if not v.changed:
            return derived


def _descriptor_of(call: cst.Call, descs: dict[str, Descriptor]) -> tuple[str, Descriptor | None, cst.BaseExpression | None]:
    """(method, descriptor, coordinates) of `desc.method(coords)` / `tl.method_tensor_descriptor(desc, coords)`."""
    if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) and call.func.value.value in descs:
        return call.func.attr.value, descs[call.func.value.value], cu.arg(call, 0, "offsets")
    leaf = (cu.call_name(call) or "").rsplit(".", 1)[-1]
    if leaf in ("load_tensor_descriptor", "store_tensor_descriptor"):
        d = cu.arg(call, 0, "desc")
        if isinstance(d, cst.Name) and d.value in descs:
            return leaf.split("_", 1)[0], descs[d.value], cu.arg(call, 1, "offsets")
    return "", None, None


def _reads(ks: KernelSource, stmt: cst.CSTNode, derived: set[str], tensor: str, dim: int = 0, explicit: bool = False,
           descs: dict[str, Descriptor] | None = None, writes: bool = False):
    """(call, pointer, mask) for each read of the tensor inside `stmt`, in source order; with
    `writes`, for each store into it instead (the producer side): pointer stores, atomics,
    `desc.store([row, ...], value)` and user helpers handed a pointer into it."""
    out = []
    descs = descs or {}
    verb, access = ("written", "store([row, ...], v)") if writes else ("read", "load([row, ...])")
    hint = _binding_hint(tensor, dim, writes)
    for call in cu.calls_in(stmt):
        name = cu.call_name(call) or ""
        leaf = name.rsplit(".", 1)[-1]
        method, desc, coords = _descriptor_of(call, descs)
        if not writes and isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) \
                and call.func.value.value == tensor and call.func.attr.value in ("load", "gather", "store", "scatter"):
            raise InferenceError(
                f"'{tensor}' is used as a tensor descriptor made on the host ({name}); syncopy gathers tensors, so pass "
                f"the tensor and make its descriptor in the kernel with tl.make_tensor_descriptor({tensor}, shape=[...], "
                f"strides=[...], block_shape=[...])",
                ks.location(call),
            )
        if desc is not None:
            stores = method in cu.WRITE_CALLS or method == "scatter"
            if stores and not writes:
                raise KernelError(
                    f"the kernel writes into '{tensor}' through its tensor descriptor '{desc.name}' ({name}); an all-gathered "
                    "input is read-only, so write results to another argument",
                    ks.location(call),
                )
            if writes and method in ("load", "gather"):
                continue
            if explicit:
                out.append((call, call, None))
            elif method == ("store" if writes else "load") and isinstance(coords, (cst.List, cst.Tuple)) and coords.elements:
                out.append((call, _DescRead(desc, coords.elements[0].value), None))
            else:
                raise InferenceError(
                    f"'{tensor}' is {verb} through {name}, whose rows inference cannot follow (only desc.{access} "
                    f"with a literal coordinate list is understood); {hint}",
                    ks.location(call),
                )
            continue
        if leaf == "load":
            ptr = cu.arg(call, 0, "pointer")
            if not writes and ptr is not None and cu.names_in(ptr) & derived:
                out.append((call, ptr, cu.arg(call, 1, "mask")))
            continue
        if leaf in cu.WRITE_CALLS:
            ptr = cu.arg(call, 0, "pointer")
            if ptr is not None and cu.names_in(ptr) & derived:
                if not writes:
                    raise KernelError(
                        f"the kernel writes into '{tensor}' ({name}); an all-gathered input is read-only, "
                        "so write results to another argument",
                        ks.location(call),
                    )
                out.append((call, ptr, cu.arg(call, 2, "mask")))
            continue
        if leaf == "make_block_ptr" and any(cu.names_in(a.value) & derived for a in call.args):
            if explicit:
                out.append((call, call, None))
                continue
            raise InferenceError(
                f"'{tensor}' is {verb} through {name}, whose rows inference cannot follow yet; {hint}",
                ks.location(call),
            )
        head = name.split(".", 1)[0]
        if not name or head in ("tl", "triton", "math", "libdevice") or leaf in _PURE_METHODS or leaf in ("range", "min", "max", "len", "int", "float", "static_range"):
            continue
        # A user helper handed a pointer into the tensor reads (or, on the producer side, may write)
        # through it.
        for a in call.args:
            if cu.names_in(a.value) & derived:
                handed = sorted(cu.names_in(a.value) & set(descs))
                if handed and not explicit and not writes:
                    raise InferenceError(
                        f"'{tensor}' is read through the tensor descriptor '{handed[0]}' handed to {name}, which inference "
                        f"does not follow; load with {handed[0]}.load([row, col]) in the kernel or {hint}",
                        ks.location(call),
                    )
                out.append((call, a.value, None))
                break
    return out


def _iterations_before_last(start: str, stop: str, step: str) -> str:
    """Iterations of range(start, stop, step) before its last one: (stop - start - 1) // step."""
    span = f"{cu.paren(stop)} - 1" if start == "0" else f"{cu.paren(stop)} - {cu.paren(start)} - 1"
    return span if step == "1" else f"({span}) // {cu.paren(step)}"


def _plus(a: str, b: str) -> str:
    return b if a == "0" else f"{a} + {cu.paren(b)}"


def _times(a: str, b: str) -> str:
    if b == "1":
        return a
    return f"{cu.paren(a)} * {cu.paren(b)}"


class _Unknown(Exception):
    def __init__(self, name: str, node: cst.CSTNode):
        self.name, self.node = name, node


def _range_bounds(ks: KernelSource, loop: cst.For) -> tuple[str, str, str]:
    it = loop.iter
    if not (isinstance(it, cst.Call) and cu.call_name(it) in _RANGE_CALLS):
        raise _Unknown(ks.code(it), loop)
    positional = [ks.code(a.value) for a in it.args if a.keyword is None]
    if len(positional) == 1:
        return "0", positional[0], "1"
    if len(positional) == 2:
        return positional[0], positional[1], "1"
    if len(positional) >= 3:
        return positional[0], positional[1], positional[2]
    raise _Unknown(ks.code(it), loop)


def _step_updates(ks: KernelSource, body: cst.CSTNode, loop_assigned: set[str]) -> dict[str, str]:
    """`p += inc` (or `p = p + inc`) inside a loop body, with a loop-invariant inc: {p: inc}."""
    steps: dict[str, str] = {}
    for node in _walk_statements(body):
        if isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name) and isinstance(node.operator, cst.AddAssign):
            if not (cu.names_in(node.value) & loop_assigned):
                steps[node.target.value] = ks.code(node.value)
        elif isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            name = node.targets[0].target.value
            v = node.value
            if isinstance(v, cst.BinaryOperation) and isinstance(v.operator, cst.Add) and isinstance(v.left, cst.Name) and v.left.value == name:
                if not (cu.names_in(v.right) & loop_assigned):
                    steps[name] = ks.code(v.right)
    return steps


def _walk_statements(node: cst.CSTNode):
    out = []

    class V(cst.CSTVisitor):
        def visit_AugAssign(self, n):
            out.append(n)

        def visit_Assign(self, n):
            out.append(n)

    node.visit(V())
    return out


def _effects(ks: KernelSource, stmt: cst.CSTNode, env: dict[str, str], unknown: dict[str, cst.CSTNode]) -> None:
    """Apply a statement that does not contain the read to the substitution environment."""
    if isinstance(stmt, cst.SimpleStatementLine):
        for small in stmt.body:
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                name = small.targets[0].target.value
                env[name] = cu.substitute(ks.module, small.value, env)
                unknown.pop(name, None)
            elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
                name = small.target.value
                op = ks.code(small.operator).strip().rstrip("=")
                prev = env.get(name, name)
                env[name] = f"({prev}) {op} ({cu.substitute(ks.module, small.value, env)})"
            else:
                for name in cu.assigned_in(small):
                    env.pop(name, None)
                    unknown[name] = small
        return
    # A compound statement we do not enter: what it assigns is not known at the hoist point.
    for name in cu.assigned_in(stmt):
        env.pop(name, None)
        unknown[name] = stmt


def _evaluate(ks: KernelSource, block: list[cst.CSTNode], read: cst.Call, env, unknown, last: bool, state) -> bool:
    """Walk statements in execution order up to the read; fill env. Returns True once the read is reached."""
    for stmt in block:
        if not cu.contains(stmt, read):
            _effects(ks, stmt, env, unknown)
            continue
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if cu.contains(small, read):
                    return True
                _effects(ks, cst.SimpleStatementLine(body=[small]), env, unknown)
            return True
        if isinstance(stmt, cst.For):
            loop_assigned = cu.assigned_in(stmt.body) | set(cu.target_names(stmt.target))
            start, stop, step = _range_bounds(ks, stmt)
            start, stop, step = (cu.substitute(ks.module, cst.parse_expression(x), env) for x in (start, stop, step))
            var = cu.target_names(stmt.target)
            state["loops"] += 1
            if last:
                # Values in the last iteration: loop variables at their last value, pointers stepped
                # by a loop-invariant `+=` advanced by (trips - 1) steps; anything else carried
                # around the loop is unknown unless the body assigns it again before the read.
                done = _iterations_before_last(start, stop, step)
                for v in var:
                    env[v] = _plus(start, _times(done, step))
                steps = _step_updates(ks, stmt.body, loop_assigned)
                for name, inc in steps.items():
                    inc = cu.substitute(ks.module, cst.parse_expression(inc), env)
                    env[name] = _plus(env.get(name, name), _times(done, inc))
                for name in loop_assigned - set(var) - set(steps):
                    env.pop(name, None)
                    unknown[name] = stmt
            else:
                for v in var:
                    env[v] = start
            return _evaluate(ks, list(stmt.body.body), read, env, unknown, last, state)
        if isinstance(stmt, cst.While):
            state["while"] = True
            return _evaluate(ks, list(stmt.body.body), read, env, unknown, last, state)
        if isinstance(stmt, cst.If):
            if cu.contains(stmt.body, read):
                return _evaluate(ks, list(stmt.body.body), read, env, unknown, last, state)
            if stmt.orelse is not None:
                body = stmt.orelse.body
                return _evaluate(ks, [body] if isinstance(body, cst.If) else list(body.body), read, env, unknown, last, state)
            return True
        if isinstance(stmt, cst.With):
            return _evaluate(ks, list(stmt.body.body), read, env, unknown, last, state)
        return True
    return False


def _access_names(a: Access) -> set[str]:
    names = cu.names_in(cst.parse_expression(a.pointer)) | (cu.names_in(cst.parse_expression(a.mask)) if a.mask else set())
    for code in a.desc or ():
        names |= cu.names_in(cst.parse_expression(code))
    return names


def _covered(groups: list[ReadGroup], accesses: list[Access], body, index: int) -> bool:
    """A later read of the very same rows (same expressions, nothing they use reassigned since the
    earlier wait) needs no second wait."""
    for g in groups:
        if len(g.accesses) != len(accesses):
            continue
        if all(cu.same_expression(x.pointer, y.pointer) and x.desc == y.desc
               and (x.mask == y.mask or (x.mask and y.mask and cu.same_expression(x.mask, y.mask)))
               for x, y in zip(g.accesses, accesses)):
            between = set().union(*(cu.assigned_in(s) for s in body[g.stmt_index:index]))
            if not (set().union(*(_access_names(a) for a in accesses)) & between):
                return True
    return False


def body_start(func: cst.FunctionDef) -> int:
    """Index of the first statement after a docstring."""
    body = func.body.body
    if body and isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Expr):
        if isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
            return 1
    return 0


def _descriptors(ks: KernelSource, func: cst.FunctionDef, derived: set[str], tensor: str, dim: int) -> dict[str, Descriptor]:
    """Tensor descriptors made over the communicated tensor: `d = tl.make_tensor_descriptor(...)`."""
    found: list[tuple[cst.Assign, cst.Call]] = []

    class V(cst.CSTVisitor):
        def visit_Assign(self, n: cst.Assign) -> None:
            if isinstance(n.value, cst.Call) and (cu.call_name(n.value) or "").rsplit(".", 1)[-1] == "make_tensor_descriptor":
                base = cu.arg(n.value, 0, "base")
                if base is not None and cu.names_in(base) & derived:
                    found.append((n, n.value))

    func.body.visit(V())
    out: dict[str, Descriptor] = {}
    counts: dict[str, int] = {}

    class Count(cst.CSTVisitor):
        def visit_Assign(self, n):
            for t in n.targets:
                for x in cu.target_names(t.target):
                    counts[x] = counts.get(x, 0) + 1

        def visit_AugAssign(self, n):
            for x in cu.target_names(n.target):
                counts[x] = counts.get(x, 0) + 2

        def visit_For(self, n):
            for x in cu.target_names(n.target):
                counts[x] = counts.get(x, 0) + 2

    func.body.visit(Count())
    for assign, call in found:
        where = ks.location(call)
        targets = [t.target for t in assign.targets]
        if len(targets) != 1 or not isinstance(targets[0], cst.Name):
            raise InferenceError(f"assign the tensor descriptor of '{tensor}' to one name; {_binding_hint(tensor, dim)}", where)
        name = targets[0].value
        if dim != 0:
            raise InferenceError(
                f"'{tensor}' is read through the tensor descriptor '{name}' but the schedule shards dim {dim}; inference binds "
                f"descriptor reads along dim 0 only, so {_binding_hint(tensor, dim)}", where)
        lists = [cu.arg(call, i, key) for i, key in enumerate(("base", "shape", "strides", "block_shape"))]
        if not all(isinstance(x, (cst.List, cst.Tuple)) and x.elements for x in lists[1:]):
            raise InferenceError(
                f"the tensor descriptor '{name}' of '{tensor}' needs literal shape=[...], strides=[...] and block_shape=[...] lists "
                f"for inference to follow it; write them out or {_binding_hint(tensor, dim)}", where)
        shape, strides, block = ([ks.code(e.value) for e in x.elements] for x in lists[1:])
        used = set().union(*(cu.names_in(x) for x in lists))
        moved = sorted(n for n in used if counts.get(n, 0) > (0 if n in ks.params else 1))
        if counts.get(name, 0) > 1 or moved:
            what = f"'{name}' itself" if counts.get(name, 0) > 1 else ", ".join(moved)
            raise InferenceError(
                f"the tensor descriptor of '{tensor}' depends on {what}, which the kernel assigns more than once; make the "
                f"descriptor once from values that do not change, or {_binding_hint(tensor, dim)}", where)
        tail = " + ".join(cu.paren(f"{cu.paren(n)} - 1") if st == "1" else f"({cu.paren(n)} - 1) * {cu.paren(st)}"
                          for n, st in zip(shape[1:], strides[1:])) or "0"
        out[name] = Descriptor(name, ks.code(lists[0]), shape[0], strides[0], block[0], tail)
    return out


def _hoist(ks: KernelSource, block: list[cst.CSTNode], reads, before: set[str], tensor: str, dim: int,
           writes: bool = False) -> list[Access]:
    """The reads of the last statement of `block`, as expressions valid right before `block[0]`
    (every statement of `block` but the last runs in between and is inlined)."""
    accesses: list[Access] = []
    inner = set().union(*(cu.assigned_in(s) for s in block[:-1])) if len(block) > 1 else set()
    if not isinstance(block[-1], cst.SimpleStatementLine):
        inner |= cu.assigned_in(block[-1])
    assigned = set().union(*(cu.assigned_in(s) for s in block))
    for call, ptr, mask in reads:
        for last in (False, True):
            env: dict[str, str] = {}
            unknown: dict[str, cst.CSTNode] = {}
            state = {"loops": 0, "while": False}
            try:
                _evaluate(ks, block, call, env, unknown, last, state)
            except _Unknown as exc:
                raise InferenceError(
                    f"cannot follow the loop `{exc.name}` around the read of '{tensor}' (only range loops are "
                    f"understood); {_binding_hint(tensor, dim, writes)}",
                    ks.location(exc.node),
                ) from None
            if last and not state["loops"]:
                break
            if isinstance(ptr, _DescRead):
                access = Access(cu.substitute(ks.module, ptr.row, env), None, ptr.desc.args())
            else:
                access = Access(cu.substitute(ks.module, ptr, env), cu.substitute(ks.module, mask, env) if mask is not None else None)
            used = _access_names(access)
            bad = sorted(n for n in used if (n in unknown) or (n in inner and n not in before))
            if bad:
                raise InferenceError(
                    f"the rows of '{tensor}' read here depend on {', '.join(bad)}, which changes inside "
                    f"the loop in a way inference cannot follow; {_binding_hint(tensor, dim, writes)}",
                    ks.location(call),
                )
            if state["while"] and cu.names_in(cst.parse_expression(access.pointer)) & assigned:
                raise InferenceError(
                    f"the pointer into '{tensor}' changes inside a while loop; {_binding_hint(tensor, dim, writes)}",
                    ks.location(call),
                )
            if access not in accesses:
                accesses.append(access)
    return accesses


def _infer_loop(ks: KernelSource, binding: TensorBinding, loop: persistent.PersistentLoop, stmt, before: set[str],
                reads_of, tainted: set[str], rows: str | None) -> list[ReadGroup]:
    """Waits inside a persistent loop: one at the start of each tile (the first read's statement in
    the loop body, or the end of the block a flat loop starts its tiles in), others before their reads."""
    tensor, dim, index = binding.tensor, binding.dim, loop.index
    lbody = list(stmt.body.body)
    outer = before | (set(cu.target_names(stmt.target)) if isinstance(stmt, cst.For) else set())
    flat = loop.kind == "flat"
    j_if = loop.tile_block[0] if flat else -1
    tile_end = len(stmt.body.body[j_if].body.body) if flat else 0
    fine = None
    local: list[ReadGroup] = []  # stmt_index = position in the loop body while we build them
    tile_accesses: list[Access] = []
    tile_line = 0
    for j, s in enumerate(lbody):
        reads = reads_of(s)
        if not reads:
            continue
        line = ks.location(reads[0][0]).line
        at_tile_start = flat and j > j_if
        if rows is not None:
            at = (j_if, tile_end) if at_tile_start else (j,)
            _check_rows(ks, rows, outer | set().union(*(cu.assigned_in(x) for x in lbody[:at[0] + (1 if at_tile_start else 0)])),
                        lbody[at[0]], tensor)
            if fine is None:
                fine = persistent.determined(loop, stmt, at, tainted)
            start = (at_tile_start or not flat) and fine(cu.names_in(cst.parse_expression(rows)))
            return [ReadGroup(index, [], line, at, start)]
        if at_tile_start:
            try:
                accs = _hoist(ks, lbody[j_if + 1 : j + 1], reads, outer | cu.assigned_in(stmt.body), tensor, dim)
            except InferenceError:
                accs = []
            if fine is None:
                fine = persistent.determined(loop, stmt, (j_if, tile_end), tainted)
            if accs and all(fine(_access_names(a)) for a in accs):
                tile_line = tile_line or line
                tile_accesses += [a for a in accs if a not in tile_accesses]
                continue
        accs = _hoist(ks, [s], reads, outer | set().union(*(cu.assigned_in(x) for x in lbody[:j])), tensor, dim)
        if accs and not _covered(local, accs, lbody, j):
            local.append(ReadGroup(j, accs, line))
    groups = [ReadGroup(index, g.accesses, g.line, (g.stmt_index,)) for g in local]
    if tile_accesses:
        groups.insert(0, ReadGroup(index, tile_accesses, tile_line, (j_if, tile_end), True))
        groups.sort(key=lambda g: g.inner)
    elif groups and not flat:
        first = groups[0]
        fine = persistent.determined(loop, stmt, first.inner, tainted)
        first.tile_start = all(fine(_access_names(a)) for a in first.accesses)
    return groups


def _decide_remap(ks, loop: persistent.PersistentLoop, stmt, tainted: set[str]) -> None:
    carried = persistent.carried_state(loop, stmt, tainted) if loop.tile_start else []
    hidden = sorted(n for n, paths in persistent.step_paths(loop, stmt).items() if paths is None)
    test = persistent.loop_test_problem(loop, stmt, ks)
    loop.remap = loop.tile_start and not carried and not hidden and not test
    if not loop.tile_start:
        loop.why_not = "the rows of the first read in the loop are not a function of the tile id alone"
    elif carried:
        loop.why_not = f"{', '.join(carried)} carried from tile to tile"
    elif hidden:
        loop.why_not = f"{', '.join(hidden)} stepped inside a nested loop or else branch"
    elif test:
        loop.why_not = test


def _hoistable(ks, stmt, reads_of, before, tensor, dim) -> bool:
    try:
        _hoist(ks, [stmt], reads_of(stmt), before, tensor, dim)
    except InferenceError:
        return False
    return True


def _check_rows(ks: KernelSource, rows: str, defined: set[str], at: cst.CSTNode, tensor: str) -> None:
    """`binding.rows` may only use names the kernel has defined where its wait goes (before `at`)."""
    unknown = scope.unknown_names(ks, rows, defined)
    if unknown:
        name, line = unknown[0], ks.location(at).line
        why = "assigns only later" if name in cu.assigned_in(ks.func.body) else "does not define" + scope.suggestion(name, defined)
        raise KernelError(
            f"binding.rows uses '{name}', which kernel '{ks.name}' {why}; the wait for '{tensor}' goes before line {line}, "
            "so write `rows:` with its parameters and the names it assigns above that line",
            ks.location(at),
        )


def _check_pointer(ks: KernelSource, tensor: str) -> None:
    """`tensor:` must name a pointer: a scalar (an `M` used in arithmetic) would drag every index
    computed from it into the search for reads, and the error would point at some unrelated store."""
    if tensor not in cu.names_in(ks.func.body):
        return  # never used at all: the "never loads" error below says so
    pointers = scope.pointer_params(ks)
    if tensor in pointers:
        return
    param = next(p for p in (*ks.func.params.posonly_params, *ks.func.params.params, *ks.func.params.kwonly_params)
                 if p.name.value == tensor)
    which = f"one of {', '.join(pointers)}" if pointers else "the pointer argument that is communicated"
    raise KernelError(
        f"kernel '{ks.name}' never loads or stores through '{tensor}' as a pointer (it is used as a scalar); "
        f"set `tensor:` to {which}",
        ks.location(param),
    )


def _wait_index(ks: KernelSource, body: list, start: int, read_index: int, before_line: int, tensor: str) -> int:
    """The statement `binding.before_line` names: one directly in the kernel's body, no later than
    the one holding the first read (`read_index`)."""
    first, last = ks.location(ks.func).line, ks.positions[ks.func].end.line + ks.line_offset
    read_line = ks.location(body[read_index]).line
    hint = (f"use the line of a statement directly in the body of '{ks.name}', at most {read_line} (the statement "
            f"holding the first read of '{tensor}')")
    if not first <= before_line <= last:
        raise KernelError(f"binding.before_line {before_line} is outside kernel '{ks.name}' (lines {first}-{last}); {hint}",
                          ks.location(ks.func))
    for index in range(start, len(body)):
        if ks.location(body[index]).line == before_line:
            if index > read_index:
                raise KernelError(f"binding.before_line {before_line} comes after line {read_line}, whose read of '{tensor}' "
                                  f"would run before the wait; {hint}", ks.location(body[index]))
            return index
    raise KernelError(f"binding.before_line {before_line} does not start a statement directly in the body of "
                      f"'{ks.name}'; {hint}", SourceLocation(ks.path, before_line, 1))


def infer(ks: KernelSource, tensor: str, dim: int, rows: str | None = None, writes: bool = False,
          before_line: int | None = None) -> TensorBinding:
    """Find every read of `tensor` and express its pointer at the point a wait can be placed.

    With `writes` (reduce_scatter, all_reduce), find every store into `tensor` instead: the same
    hoisted pointer then says which chunks a program writes, so it can announce them afterwards.
    (A persistent producer is treated as one program writing all its tiles: it announces after
    its loop.)"""
    if tensor not in ks.params:
        raise KernelError(
            f"kernel '{ks.name}' has no argument '{tensor}'; its arguments are {', '.join(ks.params)}; "
            "set `tensor:` to the communicated one",
            ks.location(ks.func),
        )
    try:
        return _infer(ks, tensor, dim, rows, writes, before_line)
    except (KernelError, InferenceError):
        # Only a kernel that failed is asked whether `tensor:` names a scalar (an `M` used in
        # arithmetic): then that is the mistake to report, not whatever the search tripped on.
        _check_pointer(ks, tensor)
        raise


def _infer(ks: KernelSource, tensor: str, dim: int, rows: str | None, writes: bool, before_line: int | None) -> TensorBinding:
    if before_line is not None and writes:
        raise KernelError(
            "binding.before_line applies to the patterns that read the tensor (all_gather, all_to_all); a producer "
            "announces its chunks after its stores, so drop before_line",
            ks.location(ks.func),
        )
    func = ks.func
    reassigned = tensor in cu.assigned_in(func.body)
    base = BASE_NAME if reassigned else tensor
    binding = TensorBinding(tensor, dim, base, reassigned, explicit_rows=rows)
    derived = _derived_names(func, tensor)
    descs = _descriptors(ks, func, derived, tensor, dim)
    body = list(func.body.body)

    def reads_of(stmt):
        return _reads(ks, stmt, derived, tensor, dim, rows is not None, descs, writes)

    def row_names(stmt) -> set[str]:
        out: set[str] = set()
        for call, ptr, _ in reads_of(stmt):
            out |= cu.names_in(ptr.row if isinstance(ptr, _DescRead) else ptr) | {"<read>"}
        return out

    loop = None if writes else persistent.find(ks, func, body, row_names, derived)
    tainted = persistent.forward(func, set(), program_ids=True)
    before: set[str] = set(ks.params)
    for index, stmt in enumerate(body):
        if loop is not None and index == loop.index:
            if before_line is not None:
                raise KernelError(
                    f"binding.before_line is not supported for persistent kernels: the wait goes at the start of each tile, "
                    f"inside the loop at line {ks.location(stmt).line}; drop before_line",
                    ks.location(stmt),
                )
            groups = _infer_loop(ks, binding, loop, stmt, before, reads_of, tainted, rows)
            loop.tile_start = any(g.tile_start for g in groups)
            if rows is not None or loop.tile_start or not _hoistable(ks, stmt, reads_of, before, tensor, dim):
                binding.groups += groups
                binding.persistent = loop
                _decide_remap(ks, loop, stmt, tainted)
                if rows is not None:
                    break
                before |= cu.assigned_in(stmt)
                continue
            # Not a loop over tiles after all (split-K style: its start comes from a program id
            # but its rows are no function of it): one wait before the loop, as for any loop.
        reads = reads_of(stmt)
        if reads and rows is not None:
            at = index if before_line is None else _wait_index(ks, body, body_start(func), index, before_line, tensor)
            _check_rows(ks, rows, set(ks.params).union(*(cu.assigned_in(s) for s in body[:at])), body[at], tensor)
            line = ks.location(reads[0][0]).line if before_line is None else before_line
            binding.groups.append(ReadGroup(at, [], line))
            break
        accesses = _hoist(ks, [stmt], reads, before, tensor, dim, writes) if reads else []
        # A read of rows already waited for needs no second wait; every write counts, because the
        # announcement must follow the last one.
        if accesses and (writes or not _covered([g for g in binding.groups if not g.inner], accesses, body, index)):
            binding.groups.append(ReadGroup(index, accesses, ks.location(reads[0][0]).line))
        before |= cu.assigned_in(stmt)
    if not binding.groups and writes:
        raise InferenceError(
            f"kernel '{ks.name}' never stores into '{tensor}', so no program would announce its chunks; "
            f"check `tensor:` (for {_PRODUCER} it is the output the kernel writes) or {_binding_hint(tensor, dim, writes)}",
            ks.location(func),
        )
    if not binding.groups:
        raise InferenceError(
            f"kernel '{ks.name}' never loads from '{tensor}', so no program would wait for its chunks; "
            f"check `tensor:` or {_binding_hint(tensor, dim)}",
            ks.location(func),
        )
    return binding
