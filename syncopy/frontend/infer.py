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

from syncopy.errors import InferenceError, KernelError
from syncopy.frontend import cstutil as cu
from syncopy.frontend.source import KernelSource

BASE_NAME = "syncopy_base"
_RANGE_CALLS = {"range", "tl.range", "tl.static_range", "triton.language.range", "triton.language.static_range"}
_PURE_METHODS = {"to", "reshape", "broadcast_to", "expand_dims", "trans", "permute", "view"}


@dataclass
class Access:
    """A pointer block (and mask) as code that is valid right before the read's top-level statement."""

    pointer: str
    mask: str | None = None


@dataclass
class ReadGroup:
    """Reads inside one top-level statement; one wait goes right before that statement."""

    stmt_index: int
    accesses: list[Access]
    line: int


@dataclass
class TensorBinding:
    """The result of inference for one communicated tensor."""

    tensor: str
    dim: int
    base: str
    copy_base: bool
    groups: list[ReadGroup] = field(default_factory=list)
    explicit_rows: str | None = None


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


def _reads(ks: KernelSource, stmt: cst.CSTNode, derived: set[str], tensor: str, dim: int = 0, explicit: bool = False,
           writes: bool = False):
    """(call, pointer, mask) for each read of the tensor inside `stmt`, in source order; with
    `writes`, for each store into it instead (the producer side)."""
    out = []
    for call in cu.calls_in(stmt):
        name = cu.call_name(call) or ""
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "load":
            ptr = cu.arg(call, 0, "pointer")
            if not writes and ptr is not None and cu.names_in(ptr) & derived:
                out.append((call, ptr, cu.arg(call, 1, "mask")))
            continue
        if leaf in cu.WRITE_CALLS:
            ptr = cu.arg(call, 0, "pointer")
            if writes and ptr is not None and cu.names_in(ptr) & derived:
                out.append((call, ptr, cu.arg(call, 2, "mask")))
            elif ptr is not None and cu.names_in(ptr) & derived:
                raise KernelError(
                    f"the kernel writes into '{tensor}' ({name}); an all-gathered input is read-only, "
                    "so write results to another argument",
                    ks.location(call),
                )
            continue
        if leaf in ("make_block_ptr", "make_tensor_descriptor") and any(cu.names_in(a.value) & derived for a in call.args):
            if explicit:
                out.append((call, call, None))
                continue
            raise InferenceError(
                f"'{tensor}' is {'written' if writes else 'read'} through {name}, whose rows inference cannot follow yet; {_binding_hint(tensor, dim, writes)}",
                ks.location(call),
            )
        head = name.split(".", 1)[0]
        if not name or head in ("tl", "triton", "math", "libdevice") or leaf in _PURE_METHODS or leaf in ("range", "min", "max", "len", "int", "float", "static_range"):
            continue
        # A user helper handed a pointer into the tensor reads through it.
        for a in call.args:
            if cu.names_in(a.value) & derived:
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


def _covered(groups: list[ReadGroup], accesses: list[Access], body, index: int) -> bool:
    """A later read of the very same rows (same expressions, nothing they use reassigned since the
    earlier wait) needs no second wait."""

    def used(a: Access) -> set[str]:
        return cu.names_in(cst.parse_expression(a.pointer)) | (cu.names_in(cst.parse_expression(a.mask)) if a.mask else set())

    for g in groups:
        if len(g.accesses) != len(accesses):
            continue
        if all(cu.same_expression(x.pointer, y.pointer) and (x.mask == y.mask or (x.mask and y.mask and cu.same_expression(x.mask, y.mask)))
               for x, y in zip(g.accesses, accesses)):
            between = set().union(*(cu.assigned_in(s) for s in body[g.stmt_index:index]))
            if not (set().union(*(used(a) for a in accesses)) & between):
                return True
    return False


def body_start(func: cst.FunctionDef) -> int:
    """Index of the first statement after a docstring."""
    body = func.body.body
    if body and isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Expr):
        if isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
            return 1
    return 0


def infer(ks: KernelSource, tensor: str, dim: int, rows: str | None = None, writes: bool = False) -> TensorBinding:
    """Find every read of `tensor` and express its pointer at the point a wait can be placed.

    With `writes` (reduce_scatter, all_reduce), find every store into `tensor` instead: the same
    hoisted pointer then says which chunks a program writes, so it can announce them afterwards."""
    if tensor not in ks.params:
        raise KernelError(
            f"kernel '{ks.name}' has no argument '{tensor}'; its arguments are {', '.join(ks.params)}; "
            "set `tensor:` to the communicated one",
            ks.location(ks.func),
        )
    func = ks.func
    reassigned = tensor in cu.assigned_in(func.body)
    base = BASE_NAME if reassigned else tensor
    binding = TensorBinding(tensor, dim, base, reassigned, explicit_rows=rows)
    derived = _derived_names(func, tensor)
    body = list(func.body.body)
    before: set[str] = set(ks.params)
    for index, stmt in enumerate(body):
        reads = _reads(ks, stmt, derived, tensor, dim, rows is not None, writes)
        if reads and rows is not None:
            binding.groups.append(ReadGroup(index, [], ks.location(reads[0][0]).line))
            break
        accesses: list[Access] = []
        for call, ptr, mask in reads:
            for last in (False, True):
                env: dict[str, str] = {}
                unknown: dict[str, cst.CSTNode] = {}
                state = {"loops": 0, "while": False}
                try:
                    _evaluate(ks, [stmt], call, env, unknown, last, state)
                except _Unknown as exc:
                    raise InferenceError(
                        f"cannot follow the loop `{exc.name}` around the read of '{tensor}' (only range loops are "
                        f"understood); {_binding_hint(tensor, dim, writes)}",
                        ks.location(exc.node),
                    ) from None
                if last and not state["loops"]:
                    break
                p = cu.substitute(ks.module, ptr, env)
                m = cu.substitute(ks.module, mask, env) if mask is not None else None
                used = cu.names_in(cst.parse_expression(p)) | (cu.names_in(cst.parse_expression(m)) if m else set())
                inner = cu.assigned_in(stmt) if not isinstance(stmt, cst.SimpleStatementLine) else set()
                bad = sorted(n for n in used if (n in unknown) or (n in inner and n not in before))
                if bad:
                    raise InferenceError(
                        f"the rows of '{tensor}' read here depend on {', '.join(bad)}, which changes inside "
                        f"the loop in a way inference cannot follow; {_binding_hint(tensor, dim, writes)}",
                        ks.location(call),
                    )
                if state["while"] and cu.names_in(cst.parse_expression(p)) & cu.assigned_in(stmt):
                    raise InferenceError(
                        f"the pointer into '{tensor}' changes inside a while loop; {_binding_hint(tensor, dim, writes)}",
                        ks.location(call),
                    )
                access = Access(p, m)
                if access not in accesses:
                    accesses.append(access)
        # A read of rows already waited for needs no second wait; every write counts, because the
        # announcement must follow the last one.
        if accesses and (writes or not _covered(binding.groups, accesses, body, index)):
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
            f"check `tensor:` or {_binding_hint(tensor, dim, writes)}",
            ks.location(func),
        )
    return binding
