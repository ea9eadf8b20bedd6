"""Binding inference: which rows (along `dim`) of the communicated tensor each program reads.

We follow the pointer arithmetic of every read of the tensor (a `*.load(ptr, mask=...)`, or a call
of a user helper handed a pointer into the tensor) and rewrite that pointer expression so that it
can be evaluated *before* the top-level statement that contains the read: names assigned inside the
statement are inlined, each loop around the read gets a symbolic iteration counter, and the pointer
is instantiated at every corner (each loop at its first or last iteration). Where the rows are
affine in the counters, every element's offset is extreme at a corner, so a wait on the union of
the corners is a wait on everything the loop will read (a mask term that changes with the loop is
left out: its iterations may end anywhere). Where that is not proven (%, //, loaded values, a
pointer stepped in a nested loop, a loop that is no range), the read waits right before itself, from
its own pointers (`ReadGroup.nested`), and says why.

Nothing here matches on the user's names: the communicated argument is the only name we start from.
"""
from __future__ import annotations

import ast
import dataclasses
import itertools
import operator
from dataclasses import dataclass, field

import libcst as cst

from syncopy.errors import InferenceError, KernelError, SourceLocation, SyncopyError
from syncopy.frontend import cstutil as cu
from syncopy.frontend import helpers, imports, persistent, scope
from syncopy.frontend.source import KernelSource

BASE_NAME = "syncopy_base"
_RANGE_CALLS = {"range", "tl.range", "tl.static_range", "triton.language.range", "triton.language.static_range"}
_PURE_METHODS = helpers.PURE_METHODS


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
    clamped: bool = False  # a loop-dependent mask was dropped: offsets outside the tensor are clamped to it
    # A loop whose mask has one term v(k) < 0 changing with it: (pointer at the last iteration, v at
    # the first, v at the last, the last iteration's counter); `pointer` is the first iteration's.
    affine: tuple[str, str, str, str] | None = None
    every: bool = False    # the rows cannot be told (a helper we cannot follow): every chunk
    # The constexpr `if` tests the read sits under, outermost first, each with the arm it is in (True:
    # the body, False: the else): (code, arm). Triton compiles only the live arm of such an `if`, so
    # the wait reads them too and bounds only what the launch's constexprs leave live (a dead arm's
    # unmasked load reads no row). Tests that are not constexpr are left out: the read waits as if
    # they held (a bound too wide is slower, never wrong).
    guard: tuple[tuple[str, bool], ...] = ()
    why: str = ""          # with `every`: why (said in the transformed source)
    # A loop's read whose pointer steps by constexprs only (`p += H * K`, `_constexpr_step`): the
    # step's code; the wait before the loop covers every iteration's rows, and the source says why.
    step: str = ""


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
    # A read whose rows cannot be bounded before its statement waits right before the read instead:
    # `nested` is the path of (branch, index) steps from the anchor statement down to the statement
    # holding it, `why` the reason (written into the transformed source), and `data` says the rows
    # depend on loaded values (so no table probed once per shape may stand in for them).
    nested: tuple[tuple[str, int], ...] = ()
    why: str = ""
    data: bool = False
    # A read whose rows move with the loop that is its top-level statement: the code of its pointer
    # at that loop's first and second iterations, valid before the loop (the loop may then run its
    # iterations in chunk-arrival order, passes/loop_order.py).
    rows_at: tuple[str, str] | None = None
    # Where in the text the group's first read is, (line, column): which listed tensor the kernel reads
    # first (passes/pipeline.py, _read_first) goes by it, whatever the formatting.
    at: tuple[int, int] = (0, 0)


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
    no_remap: str = ""  # why tiles must keep their launch order ('' where a remap is sound)
    # The kernel reaches the tensor through a tensor descriptor (TMA copies on sm_90, which the
    # async proxy performs): its waits and notifies fence that proxy (see device.py).
    descriptors: bool = False
    # The context pointer its waits read (one block per listed tensor: its own row stride).
    ctx: str = "syncopy_ctx"
    # The kernel's non-constexpr parameters that multiply an index in the tensor's pointer arithmetic
    # (or give a tensor descriptor's row stride): its strides as the launch passes them, which the
    # runtime checks against the gathered (reduce_scatter: the full partial's) layout.
    scales: tuple[str, ...] = ()


@dataclass
class Descriptor:
    """`name = tl.make_tensor_descriptor(base, shape, strides, block_shape)` over the tensor, as code."""

    name: str
    base: str
    rows: str
    row_stride: str
    block_rows: str
    tail: str
    made_by: int = field(default=0, compare=False)  # id of a helper call that made it (helpers.descriptor_made)

    def args(self) -> tuple[str, ...]:
        return (self.base, self.block_rows, self.rows, self.row_stride, self.tail)


@dataclass
class _DescRead:
    desc: Descriptor
    row: cst.BaseExpression


_PRODUCER = "reduce_scatter and all_reduce"


class _Every:
    """A read whose rows cannot be told at all (a helper we cannot follow): it waits for every chunk."""

    def __init__(self, why: str = ""):
        self.why = why


_EVERY = _Every()


@dataclass
class _Followed:
    """A read inside a @triton.jit helper, its access written in the caller's expressions."""

    access: Access


def _handed_descriptors(env: dict[str, str], descs: dict[str, Descriptor]) -> dict[str, Descriptor] | None:
    """{helper parameter: the caller's descriptor} for the tensor descriptors a call hands on as
    they are (`f(desc_k, ...)`); None where one goes in as part of an expression."""
    out = {}
    for p, code in env.items():
        expr = cst.parse_expression(code)
        if cu.names_in(expr) & set(descs):
            if not isinstance(expr, cst.Name):
                return None
            out[p] = dataclasses.replace(descs[expr.value], name=p)
    return out


def _reads_through(sub: KernelSource, param: str, dim: int, descs: dict[str, Descriptor], writes: bool, depth: int) -> bool:
    """Does the helper read (`writes`: store) through its parameter `param` at all?"""
    try:
        derived = _derived_names(sub.func, param)
        own = {**({param: descs[param]} if param in descs else {}), **_descriptors(sub, sub.func, derived, param, dim)}
        return bool(_reads(sub, sub.func.body, derived, param, dim, False, own, writes, depth))
    except SyncopyError:
        return True


def _follow_helper(ks: KernelSource, call: cst.Call, derived: set[str], dim: int, depth: int = 0,
                   writes: bool = False, descs: dict[str, Descriptor] | None = None) -> list[Access] | str:
    """The reads (`writes`: the stores) a @triton.jit helper makes through the pointer (or the
    tensor descriptor, from `descs`) it is handed, as accesses in the caller's expressions (valid
    right before the call); the helper is found in this file or in a module it imports. Where we
    cannot tell (a store whose rows the helper's own inference does not bound before its statement,
    too), why, as a clause."""
    name = helpers.helper_name(call, helpers.local_names(ks.func)) or ""
    found = helpers.find(ks, name) if name else None
    if found is not None and found.builtin:
        return f"{name} is {found.builtin} under another name, which syncopy does not read as {found.builtin}"
    if found is None or depth > 4:
        return f"the helper {name} is not a @triton.jit function of this file or of a module it imports"
    helper, sub = found.func, found.source
    env = helpers.bind_args(helper, call, ks)
    if env is None:
        return f"the arguments of {name} do not match its parameters"
    seeds = _handed_descriptors(env, descs or {})
    if seeds is None:
        return f"{name} is handed a tensor descriptor inside an expression"
    # Values computed from earlier calls count as derived too: only what it reads (stores) through counts.
    handed = [p for p, code in env.items() if cu.names_in(cst.parse_expression(code)) & derived
              and _reads_through(sub, p, dim, seeds, writes, depth + 1)]
    if not handed:
        return []
    if len(handed) != 1:
        return f"{name} is handed the tensor in {len(handed)} parameters"
    try:
        b = _infer(sub, handed[0], dim, None, writes, None, depth + 1, descs_in=seeds)
    except InferenceError as exc:  # rows it cannot follow: the caller waits for every chunk (a refusal is never swallowed)
        return f"{name}: {exc.message.split('; ')[0]}"
    if b.persistent is not None or b.copy_base:
        return f"{name} moves the pointer it is handed or loops over tiles"
    local = cu.assigned_in(helper.body)
    params = set(env)
    handed_descs = {d.args() for d in seeds.values()}
    body = list(helper.body.body)
    out: list[Access] = []
    for g in b.groups:
        if g.nested or g.data:
            return f"{name} reads rows that depend on loaded data" if g.data else f"{name} reads rows it cannot bound before the call: {g.why}"
        # One set of values per live arm of the helper's constexpr `if`s before the read (the
        # tutorial's `if STAGE == 1: lo, hi = ...`), each under its tests in the caller's names.
        for arms, pre in _arm_values(sub, body[:g.stmt_index]):
            for a in g.accesses:
                if a.every:
                    return a.why or f"{name} calls a helper syncopy cannot follow"
                guard = _guard_at_call(ks, (*arms, *a.guard), env)
                if guard is None:
                    continue  # an arm this call never compiles
                ptr = _subst(a.pointer, pre)
                mask = _subst(a.mask, pre) if a.mask else None
                names = _access_names(Access(ptr, mask))
                if names & local:
                    return f"{name} reads rows computed from {', '.join(sorted(names & local))}, which it assigns in an if or a loop"
                if sub.path != ks.path and any(imports.qualified(sub.module, n) is None
                                               or imports.qualified(sub.module, n) != imports.qualified(ks.module, n)
                                               for n in names - params if n not in ("None", "True", "False")):
                    return f"{name} reads rows computed from names its module binds otherwise than this file"
                # A descriptor handed in as it is has its fields in the caller's names already; one the
                # helper makes (or is handed from the host, read as its parameter) has them in its own.
                desc = a.desc if a.desc is None or a.desc in handed_descs else tuple(_subst(x, env) for x in a.desc)
                access = Access(_subst(ptr, env), _subst(mask, env) if mask else None, desc=desc, clamped=a.clamped, guard=guard)
                if access not in out:
                    out.append(access)
    return out


_MAX_ARMS = 16  # arm combinations of a helper's constexpr ifs followed before its values count as unknown


def _arms(stmt: cst.CSTNode, constexprs: set[str]) -> list[tuple[tuple[tuple[str, bool], ...], list]] | None:
    """The arms of an `if`/`elif`/`else` chain whose every test is constexpr (Triton compiles one arm),
    each as (the tests that select it, as Access.guard, its statements); None for any other statement."""
    if not isinstance(stmt, cst.If):
        return None
    out: list = []
    before: list[tuple[str, bool]] = []
    node = stmt
    while isinstance(node, cst.If):
        if not _is_constexpr_test(node.test, constexprs):
            return None
        test = _code(node.test.with_changes(lpar=[], rpar=[])).strip()
        out.append(((*before, (test, True)), _statements(node.body)))
        before.append((test, False))
        node = node.orelse
    out.append((tuple(before), _statements(node.body) if isinstance(node, cst.Else) else []))
    return out


def _statements(suite: cst.BaseSuite) -> list[cst.BaseStatement]:
    return list(suite.body) if isinstance(suite, cst.IndentedBlock) else [cst.SimpleStatementLine(body=list(suite.body))]


def _arm_values(sub: KernelSource, stmts: list[cst.CSTNode]) -> list[tuple[tuple[tuple[str, bool], ...], dict[str, str]]]:
    """What `stmts` (a helper's statements before a read) assign, as code, once for each combination of
    the arms of their constexpr `if`s, with the tests that select it: `if STAGE == 1: lo, hi = 0, x`
    gives lo = 0 under (STAGE == 1, True). Past _MAX_ARMS combinations an `if` assigns unknown values."""
    constexprs = _constexprs(sub)
    values: list[tuple[tuple, dict[str, str], dict]] = [((), {}, {})]
    for stmt in stmts:
        arms = _arms(stmt, constexprs)
        if arms is not None and len(values) * len(arms) <= _MAX_ARMS:
            split = []
            for guard, pre, unknown in values:
                for tests, body in arms:
                    pre_arm, unknown_arm = dict(pre), dict(unknown)
                    for s in body:
                        _effects(sub, s, pre_arm, unknown_arm)
                    split.append(((*guard, *tests), pre_arm, unknown_arm))
            values = split
            continue
        for _, pre, unknown in values:
            _effects(sub, stmt, pre, unknown)
    return [(guard, pre) for guard, pre, _ in values]


def _guard_at_call(ks: KernelSource, guard: tuple[tuple[str, bool], ...], env: dict[str, str]) -> tuple | None:
    """A helper's constexpr tests (Access.guard) at a call of it, in the caller's names (`env`: the
    call's arguments, `4 - STAGE` for STAGE): a test that is literals only after that is evaluated
    now (None where it rules the arm out, gone where it holds); one the caller's constexprs decide
    stays for Triton to decide when it compiles; any other is dropped (the wait then also covers the
    arm it would rule out: wider, never wrong)."""
    constexprs = _constexprs(ks)
    out = []
    for test, arm in guard:
        code = _subst(test, env)
        expr = cst.parse_expression(code)
        value = _static_value(code)
        if value is not None:
            if bool(value[0]) != arm:
                return None
        elif _is_constexpr_test(expr, constexprs):
            out.append((_code(expr.with_changes(lpar=[], rpar=[])).strip(), arm))
    return tuple(out)


_FOLD_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
                ast.Mod: operator.mod, ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
                ast.LShift: operator.lshift, ast.RShift: operator.rshift}
_FOLD_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
                 ast.Gt: operator.gt, ast.GtE: operator.ge}
_FOLD_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert, ast.Not: operator.not_}


def _static_value(code: str) -> tuple | None:
    """(value,) of an expression of literals (ints, bools, None) and arithmetic, bit, comparison and
    boolean operators, as Triton folds constexprs; None where it names anything or cannot be folded."""
    def fold(n: ast.AST):
        if isinstance(n, ast.Constant) and (n.value is None or type(n.value) in (int, bool)):
            return n.value
        if isinstance(n, ast.BinOp) and type(n.op) in _FOLD_BINARY:
            left, right = fold(n.left), fold(n.right)
            if isinstance(n.op, (ast.FloorDiv, ast.Mod)) and right == 0 or isinstance(n.op, (ast.LShift, ast.RShift)) and right < 0:
                raise ValueError(code)
            return _FOLD_BINARY[type(n.op)](left, right)
        if isinstance(n, ast.UnaryOp) and type(n.op) in _FOLD_UNARY:
            return _FOLD_UNARY[type(n.op)](fold(n.operand))
        if isinstance(n, ast.BoolOp):
            values = [fold(v) for v in n.values]
            return all(values) if isinstance(n.op, ast.And) else any(values)
        if isinstance(n, ast.Compare) and all(type(op) in _FOLD_COMPARE for op in n.ops):
            left, result = fold(n.left), True
            for op, right in zip(n.ops, n.comparators):
                right = fold(right)
                result = result and _FOLD_COMPARE[type(op)](left, right)
                left = right
            return result
        raise ValueError(code)

    try:
        return (fold(ast.parse(code.strip(), mode="eval").body),)
    except (ValueError, TypeError, SyntaxError, ArithmeticError):
        return None


def _binding_hint(tensor: str, dim: int, writes: bool = False) -> str:
    verb = "writes" if writes else "reads"
    return (
        f"add `binding: {{rows: <expression>}}` to the schedule, giving in the kernel's names the indices "
        f"along dim {dim} of '{tensor}' that one program {verb} (e.g. pid_m * BLOCK_M + tl.arange(0, BLOCK_M))"
    )


def block_pointers_removed() -> bool:
    """Has the Triton in use removed block pointers (3.9: `tl.make_block_ptr` only raises, fused or not)?"""
    import triton.language as tl

    make = getattr(tl, "make_block_ptr", None)
    return make is None or "removed" in (make.__doc__ or "")


def _block_pointer_advice(tensor: str, verb: str, name: str, access: str, hint: str) -> str:
    """What works on the Triton in use for a block pointer into the tensor: a tensor descriptor, whose
    rows inference follows; an explicit binding only where Triton still runs block pointers."""
    descriptor = (f"make it a tensor descriptor, desc = tl.make_tensor_descriptor({tensor}, shape=[...], strides=[...], "
                  f"block_shape=[...]), and use desc.{access}, whose rows syncopy follows")
    if block_pointers_removed():
        import triton

        return (f"'{tensor}' is {verb} through {name}, but Triton {triton.__version__} has removed block pointers (the kernel "
                f"cannot run even unfused); {descriptor}")
    return f"'{tensor}' is {verb} through {name}, whose rows inference cannot follow; {descriptor}, or {hint}"


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


#: Triton calls that make or use a tensor descriptor; on sm_90 its loads and stores are TMA copies.
DESCRIPTOR_CALLS = {"make_tensor_descriptor", "load_tensor_descriptor", "store_tensor_descriptor",
                    "_experimental_make_tensor_descriptor", "_experimental_descriptor_load", "_experimental_descriptor_store"}


def uses_descriptors(ks: KernelSource, func: cst.FunctionDef, derived: set[str], seen: frozenset = frozenset()) -> bool:
    """Whether `func` reaches the tensor (the names in `derived`) through a tensor descriptor: it
    makes or uses one over it, or hands it to a @triton.jit helper of this file that does. A helper
    defined elsewhere counts too: syncopy cannot look inside it, and a fence too many costs little."""
    local = helpers.local_names(func)
    for call in cu.calls_in(func.body):
        f = call.func
        if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.value.value in derived \
                and f.attr.value in _DESCRIPTOR_METHODS:  # a descriptor handed in (made on the host): `desc.load([...])`
            return True
        if not any(cu.names_in(a.value) & derived for a in call.args):
            continue
        if (cu.call_name(call) or "").rsplit(".", 1)[-1] in DESCRIPTOR_CALLS:
            return True
        name = helpers.helper_name(call, local)
        if name is None or name in seen:
            continue
        found = helpers.find(ks, name)
        if found is None:
            return True
        if found.builtin:
            continue
        helper = found.func
        env = helpers.bind_args(helper, call, ks)
        # Arguments we cannot match to parameters: any parameter may be the tensor.
        handed = helpers.local_names(helper) if env is None else \
            [p for p, code in env.items() if cu.names_in(cst.parse_expression(code)) & derived]
        inner = set().union(*(_derived_names(helper, p) for p in handed))
        if uses_descriptors(found.source, helper, inner, seen | {name}):
            return True
    return False


#: What a kernel calls on a tensor descriptor it was handed: `desc.load([...])` and its kin.
_DESCRIPTOR_METHODS = ("load", "store", "gather", "scatter", "atomic_add", "atomic_max", "atomic_min", "atomic_and",
                       "atomic_or", "atomic_xor")


def _used_as_descriptor(func: cst.FunctionDef, name: str) -> cst.Call | None:
    """The first call that uses `name` itself as a tensor descriptor (`name.load([...])`,
    `tl.load_tensor_descriptor(name, [...])`), or None."""
    for call in cu.calls_in(func.body):
        f = call.func
        if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.value.value == name \
                and f.attr.value in _DESCRIPTOR_METHODS:
            return call
        if (cu.call_name(call) or "").rsplit(".", 1)[-1] in ("load_tensor_descriptor", "store_tensor_descriptor"):
            d = cu.arg(call, 0, "desc")
            if isinstance(d, cst.Name) and d.value == name:
                return call
    return None


def host_descriptor(ks: KernelSource, func: cst.FunctionDef, tensor: str, dim: int) -> dict[str, Descriptor]:
    """{tensor: its Descriptor} where the communicated parameter is itself a tensor descriptor (the
    kernel calls `tensor.load([row, ...])`): one made on the host with
    triton.tools.tensor_descriptor.TensorDescriptor, which the launch remakes over the gathered tensor,
    row-major (runtime/launch/host_descriptors.py). Its reads are bounded by its own geometry: its
    shape, row stride and block rows, read from the descriptor in the kernel."""
    call = _used_as_descriptor(func, tensor)
    if call is None:
        return {}
    where = ks.location(call)
    if tensor in cu.assigned_in(func.body):
        raise InferenceError(
            f"'{tensor}' is read as a tensor descriptor made on the host but the kernel assigns '{tensor}' too, so syncopy "
            f"cannot tell which descriptor a read uses; read the one handed in under its own name", where)
    if dim != 0:
        raise InferenceError(
            f"'{tensor}' is a tensor descriptor made on the host but the schedule shards dim {dim}; syncopy gathers host "
            f"descriptors along their dim 0 only, so shard dim 0 (make the descriptor's rows the sharded dim)", where)
    t = cu.paren(tensor)
    return {tensor: Descriptor(tensor, tensor, f"{t}.shape[0]", f"{t}.strides[0]", f"{t}.block_shape[0]",
                               f"{t}.strides[0] - 1")}


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
           descs: dict[str, Descriptor] | None = None, writes: bool = False, depth: int = 0):
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
        if desc is None and not writes and isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) \
                and call.func.value.value in derived and call.func.attr.value in ("load", "gather"):
            # A descriptor over the tensor that inference did not see made (one handed back by a
            # helper that may pass it through): its rows cannot be told.
            out.append((call, _Every(f"'{call.func.value.value}' is a tensor descriptor syncopy did not see made"), None))
            continue
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
            if explicit and not block_pointers_removed():
                out.append((call, call, None))
                continue
            raise InferenceError(_block_pointer_advice(tensor, verb, name, access, hint), ks.location(call))
        head = name.split(".", 1)[0]
        if not name or head in ("tl", "triton", "math", "libdevice") or leaf in _PURE_METHODS or leaf in ("range", "min", "max", "len", "int", "float", "static_range"):
            continue
        # Python's own functions (`isinstance`) and Triton's under another name (`triton_cast = tl.cast`)
        # read nothing through a pointer; a helper that only makes a tensor descriptor is one (_descriptors).
        found = helpers.find(ks, name) if any(cu.names_in(a.value) & derived for a in call.args) else None
        if found is not None and found.builtin and not helpers.loads_data(found.as_builtin(call)) \
                or any(d.made_by == id(call) for d in descs.values()):
            continue
        if found is not None and found.builtin.startswith("tl.") and found.builtin.rsplit(".", 1)[-1] == "load" and not writes:
            # `my_load(p)` in a helper (the kernel's own are written as tl.load, helpers.unalias_builtins).
            ptr = cu.arg(call, 0, "pointer")
            if ptr is not None and cu.names_in(ptr) & derived:
                out.append((call, ptr, cu.arg(call, 1, "mask")))
                continue
        # A user helper handed a pointer into the tensor (or a descriptor over it) reads (or, on the
        # producer side, may write) through it.
        for a in call.args:
            if cu.names_in(a.value) & derived:
                handed = sorted(cu.names_in(a.value) & set(descs))
                if explicit:
                    out.append((call, a.value, None))
                    break
                # Follow the helper's own arithmetic; one we cannot read waits for (on the producer
                # side: counts against) every chunk.
                followed = _follow_helper(ks, call, derived, dim, depth, writes, descs)
                if isinstance(followed, str) and handed and not writes and found is None:
                    raise InferenceError(
                        f"'{tensor}' is read through the tensor descriptor '{handed[0]}' handed to {name}, which inference "
                        f"does not follow; load with {handed[0]}.load([row, col]) in the kernel or {hint}",
                        ks.location(call),
                    )
                if isinstance(followed, str):
                    out.append((call, _Every(followed), None))
                else:
                    out += [(call, _Followed(x), None) for x in followed]
                break
    return out


def written_pointers(ks: KernelSource) -> list[str]:
    """The kernel's parameters it stores into through a pointer computed from them (tl.store or an
    atomic, in the kernel's own body), in parameter order: the outputs whose rows a launch's grid
    writes (the runtime checks each one's extent against them)."""
    stores = [cu.arg(call, 0, "pointer") for call in cu.calls_in(ks.func.body)
              if (cu.call_name(call) or "").rsplit(".", 1)[-1] in cu.WRITE_CALLS]
    out = []
    for name in ks.params:
        derived = _derived_names(ks.func, name)
        if any(ptr is not None and cu.names_in(ptr) & derived for ptr in stores):
            out.append(name)
    return out


def written_bases(ks: KernelSource) -> list[str]:
    """Of written_pointers, the parameters a store's pointer starts from: a bare term of its sum (`C +
    rm * N + rn`, or `c_ptrs` after `c_ptrs = c_ptr + ...`), the descriptor a `desc.store` goes
    through, never a parameter the kernel multiplies, divides or compares (a size or a stride: `N`
    in `Z + N + i`). Where a store has no such term, all of written_pointers."""
    stores = [call for call in cu.calls_in(ks.func.body) if (cu.call_name(call) or "").rsplit(".", 1)[-1] in cu.WRITE_CALLS]
    candidates = written_pointers(ks)
    scalars = _scalar_names(ks.func)
    bases = {name: _based_on(ks.func, name) for name in candidates if name not in scalars}
    out: set[str] = set()
    for call in stores:
        func = call.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value not in ("tl", "triton"):
            terms = {func.value.value}  # desc.store(coords, value)
        else:
            ptr = cu.arg(call, 0, "pointer")
            terms = _additive_names(ptr) if ptr is not None else set()
        found = [name for name, based in bases.items() if terms & based]
        out.update(found if found else candidates)
    return [name for name in candidates if name in out]


def _scalar_names(func: cst.FunctionDef) -> set[str]:
    """Names an operand of `*`, `/`, `//`, `%` or a comparison somewhere in the kernel: sizes and
    strides, not pointers (a pointer is added to, never scaled or compared)."""
    found: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_BinaryOperation(self, n: cst.BinaryOperation) -> None:
            if isinstance(n.operator, (cst.Multiply, cst.Divide, cst.FloorDivide, cst.Modulo)):
                for side in (n.left, n.right):
                    if isinstance(side, cst.Name):
                        found.add(side.value)

        def visit_Comparison(self, n: cst.Comparison) -> None:
            for side in (n.left, *(c.comparator for c in n.comparisons)):
                if isinstance(side, cst.Name):
                    found.add(side.value)

    func.body.visit(V())
    return found


def _additive_names(expr: cst.BaseExpression) -> set[str]:
    """The names that are whole terms of a sum (`a + b * c - d`: a), a descriptor's or block pointer's base."""
    expr = expr.with_changes(lpar=[], rpar=[]) if hasattr(expr, "lpar") else expr
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        return _additive_names(expr.left) | _additive_names(expr.right)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Subtract):
        return _additive_names(expr.left)
    if isinstance(expr, cst.Name):
        return {expr.value}
    if isinstance(expr, cst.Call) and (cu.call_name(expr) or "").rsplit(".", 1)[-1] in ("make_tensor_descriptor", "make_block_ptr"):
        first = cu.arg(expr, 0, "base")
        return _additive_names(first) if first is not None else set()
    return set()


def _based_on(func: cst.FunctionDef, param: str) -> set[str]:
    """Names assigned a sum with a term based on `param` (a fixpoint): the pointers that start from it."""
    assigns: list[tuple[list, cst.BaseExpression]] = []

    class V(cst.CSTVisitor):
        def visit_Assign(self, n: cst.Assign) -> None:
            assigns.append(([t.target for t in n.targets], n.value))

        def visit_AnnAssign(self, n: cst.AnnAssign) -> None:
            if n.value is not None:
                assigns.append(([n.target], n.value))

    func.body.visit(V())
    based = {param}
    changed = True
    while changed:
        changed = False
        for targets, value in assigns:
            if _additive_names(value) & based:
                for t in targets:
                    new = set(cu.target_names(t)) - based
                    if new:
                        based |= new
                        changed = True
    return based


def _refuse_helper_stores(ks: KernelSource, func: cst.FunctionDef, derived: set[str], tensor: str, depth: int = 0) -> None:
    """An all-gathered input is read-only: a store through a pointer into it inside a @triton.jit helper
    it is handed to (of this file or an imported module, followed into the helpers that helper calls)
    is refused at the store, naming the helper, whether or not inference can follow the helper's rows."""
    if depth > 8:
        return
    local = helpers.local_names(func)
    for call in cu.calls_in(func.body):
        name = helpers.helper_name(call, local)
        found = helpers.find(ks, name) if name is not None else None
        helper = found.func if found is not None else None
        env = helpers.bind_args(helper, call, ks) if helper is not None else None
        if env is None:
            continue
        for param in [p for p, code in env.items() if cu.names_in(cst.parse_expression(code)) & derived]:
            mine = _derived_names(helper, param)
            for store in cu.calls_in(helper.body):
                name = cu.call_name(store) or ""
                ptr = cu.arg(store, 0, "pointer") if name.rsplit(".", 1)[-1] in cu.WRITE_CALLS else None
                if ptr is not None and cu.names_in(ptr) & mine:
                    raise KernelError(
                        f"the kernel writes into '{tensor}' ({name} in helper '{helper.name.value}', handed it as "
                        f"'{param}'); an all-gathered input is read-only, so write results to another argument",
                        found.source.location(store),
                    )
            _refuse_helper_stores(found.source, helper, mine, tensor, depth + 1)


def _literal_int(code: str) -> int | None:
    try:
        value = ast.literal_eval(code)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _iterations_before_last(start: str, stop: str, step: str) -> str | None:
    """Iterations of range(start, stop, step) before its last one (trips - 1): (stop - start - 1) // step
    for a positive step, (start - stop - 1) // -step for a negative literal one; None for a zero step.
    A step given by name (a block size) is taken as positive, as range() over tiles is written."""
    n = _literal_int(step)
    if n == 0:
        return None
    if n is not None and n < 0:
        span = f"{cu.paren(start)} - {cu.paren(stop)} - 1"
        return span if n == -1 else f"({span}) // {-n}"
    span = f"{cu.paren(stop)} - 1" if start == "0" else f"{cu.paren(stop)} - {cu.paren(start)} - 1"
    return span if step == "1" else f"({span}) // {cu.paren(step)}"


def _plus(a: str, b: str) -> str:
    if b == "0":
        return a
    return b if a == "0" else f"{a} + {cu.paren(b)}"


def _times(a: str, b: str) -> str:
    if b == "1":
        return a
    if a == "0" or b == "0":
        return "0"
    return f"{cu.paren(a)} * {cu.paren(b)}"


class _Unknown(Exception):
    def __init__(self, name: str, node: cst.CSTNode):
        self.name, self.node = name, node


class _Fallback(Exception):
    """The rows a read needs cannot be bounded before the statement holding it; `why` says why.
    `rows_at` (a read whose rows move with the loop the statement is): its pointer at the loop's
    first and second iterations, valid before the loop (see ReadGroup.rows_at)."""

    def __init__(self, why: str, rows_at: tuple[str, str] | None = None):
        self.why = why
        self.rows_at = rows_at


#: The iteration counter of the loop at nesting level i (0, 1, ... trips - 1) in symbolic pointers.
_ITER = "syncopy_k{}"
_MAX_LEVELS = 3  # corners grow as 2**levels


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


def _direct_steps(ks: KernelSource, body: cst.CSTNode, loop_assigned: set[str]) -> dict[str, str]:
    """`p += inc` (or `p = p + inc`) with a loop-invariant inc, written once directly in the loop body
    and assigned nowhere else in it: {p: inc}. A step inside a nested loop or a branch runs some other
    number of times per iteration, so such a name is not a step of this loop."""
    direct: dict[str, list] = {}
    elsewhere: set[str] = set()
    for stmt in body.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            elsewhere |= cu.assigned_in(stmt)
            continue
        for small in stmt.body:
            for name in cu.assigned_in(small):
                direct.setdefault(name, []).append(small)
    steps: dict[str, str] = {}
    for name, smalls in direct.items():
        if name in elsewhere or len(smalls) != 1:
            continue
        inc = persistent.step_of(smalls[0], name)
        if inc is not None and not (cu.names_in(inc) & loop_assigned):
            steps[name] = ks.code(inc)
    return steps


def _effects(ks: KernelSource, stmt: cst.CSTNode, env: dict[str, str], unknown: dict[str, cst.CSTNode]) -> None:
    """Apply a statement that does not contain the read to the substitution environment."""
    if isinstance(stmt, cst.SimpleStatementLine):
        for small in stmt.body:
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                name = small.targets[0].target.value
                env[name] = cu.substitute(ks.module, small.value, env)
                unknown.pop(name, None)
            elif isinstance(small, cst.Assign) and len(small.targets) == 1 and _pairs(small) is not None:
                # `lo, hi = 0, N`: every value is read before any name is bound.
                values = {t: cu.substitute(ks.module, v, env) for t, v in _pairs(small)}
                for name, value in values.items():
                    env[name] = value
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


def _pairs(assign: cst.Assign) -> list[tuple[str, cst.BaseExpression]] | None:
    """(name, value) of `a, b = x, y` (names on the left, as many values on the right, nothing starred)."""
    target, value = assign.targets[0].target, assign.value
    if not (isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple) and len(target.elements) == len(value.elements)):
        return None
    names = [e.value.value if isinstance(e, cst.Element) and isinstance(e.value, cst.Name) else None for e in target.elements]
    if None in names or len(set(names)) != len(names) or any(not isinstance(e, cst.Element) for e in value.elements):
        return None
    return [(n, e.value) for n, e in zip(names, value.elements)]


def _evaluate(ks: KernelSource, block: list[cst.CSTNode], read: cst.Call, env, unknown, state) -> bool:
    """Walk statements in execution order up to the read; fill env. Returns True once the read is reached.

    Each range loop around the read gets a symbolic iteration counter (`syncopy_k0`, outermost
    first): its variable becomes start + k * step and a pointer it steps once per iteration p + k * inc;
    state["levels"] collects each loop's last counter value (in the outer counters)."""
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
            if cu.contains(stmt.iter, read):
                return True  # evaluated once, before the loop
            try:
                start, stop, step = _range_bounds(ks, stmt)
            except _Unknown:
                raise _Fallback(f"the loop `for ... in {ks.code(stmt.iter)}` is not a range") from None
            start, stop, step = (cu.substitute(ks.module, cst.parse_expression(x), env) for x in (start, stop, step))
            done = _iterations_before_last(start, stop, step)
            level = len(state["levels"])
            outer = {_ITER.format(i) for i in range(level)}
            # Corners are the vertices of the iteration space only while each loop's trip count is
            # affine in the outer counters (a triangle, not a curve).
            if done is None or level >= _MAX_LEVELS or _affinity(cst.parse_expression(done), outer) is None:
                raise _Fallback(f"the loop `for ... in {ks.code(stmt.iter)}` cannot be bounded by its first and last iterations")
            state["levels"].append(done)
            k = _ITER.format(level)
            var = cu.target_names(stmt.target)
            loop_assigned = cu.assigned_in(stmt.body) | set(var)
            steps = {n: cu.substitute(ks.module, cst.parse_expression(inc), env)
                     for n, inc in _direct_steps(ks, stmt.body, loop_assigned).items()}
            for v in var:
                env[v] = _plus(start, _times(k, step))
                unknown.pop(v, None)
            if isinstance(stmt.target, cst.Name) and step == "1":
                state.setdefault("counters", {})[stmt.target.value] = (level, start, env[stmt.target.value])
            for name, inc in steps.items():
                env[name] = _plus(env.get(name, name), _times(k, inc))
            for name in loop_assigned - set(var) - set(steps):
                env.pop(name, None)
                unknown[name] = stmt
            return _evaluate(ks, list(stmt.body.body), read, env, unknown, state)
        if isinstance(stmt, cst.While):
            if cu.contains(stmt.test, read):
                raise _Unknown("while", stmt)
            for name in cu.assigned_in(stmt.body):
                env.pop(name, None)
                unknown[name] = stmt
            return _evaluate(ks, list(stmt.body.body), read, env, unknown, state)
        if isinstance(stmt, cst.If):
            if cu.contains(stmt.test, read):
                return True
            if cu.contains(stmt.body, read):
                if state.get("guards"):
                    _guard_last_iteration(stmt.test, env, unknown, state)
                return _evaluate(ks, list(stmt.body.body), read, env, unknown, state)
            if stmt.orelse is not None:
                body = stmt.orelse.body
                return _evaluate(ks, [body] if isinstance(body, cst.If) else list(body.body), read, env, unknown, state)
            return True
        if isinstance(stmt, cst.With):
            return _evaluate(ks, list(stmt.body.body), read, env, unknown, state)
        return True
    return False


def _guard_last_iteration(test: cst.BaseExpression, env: dict[str, str], unknown: dict, state) -> None:
    """Inside `if c < E:` (or `c <= E`, `E > c`, `E >= c`) where `c` is the counter of an enclosing
    `for c in range(start, N)` (step 1) as that loop set it, and E is the same in every iteration: the
    body's last iteration is min(the loop's last, E - 1), and its level in state["levels"] says so
    (Mamba's state passing stores `out_ptrs` under `if c < nchunks - 1`). Proven only for such a guard
    with the loop's start, its last iteration and E free of every loop counter (the iteration space
    stays a box, whose corners bound an affine pointer); any other test leaves the wider bound."""
    test = test.with_changes(lpar=[], rpar=[])
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return
    left, op, right = test.left, test.comparisons[0].operator, test.comparisons[0].comparator
    forms = {cst.LessThan: (left, right, " - 1"), cst.LessThanEqual: (left, right, ""),
             cst.GreaterThan: (right, left, " - 1"), cst.GreaterThanEqual: (right, left, "")}
    if type(op) not in forms:
        return
    counter, bound, tail = forms[type(op)]
    counter = counter.with_changes(lpar=[], rpar=[])
    found = state.get("counters", {}).get(counter.value) if isinstance(counter, cst.Name) else None
    if found is None or env.get(counter.value) != found[2]:
        return  # not a loop counter, or re-assigned in the loop before the test
    level, start, _ = found
    syms = {_ITER.format(i) for i in range(len(state["levels"]))}
    bound = cu.substitute(cst.Module(body=[]), bound, env)
    done = state["levels"][level]
    used = set().union(*(cu.names_in(cst.parse_expression(x)) for x in (bound, start, done)))
    if used & (syms | set(unknown)):
        return
    last = f"{cu.paren(bound)}{tail}" if start == "0" else f"{cu.paren(bound)}{tail} - {cu.paren(start)}"
    state["levels"][level] = f"min({done}, {last})"


def _affinity(node: cst.CSTNode, syms: set[str]) -> int | None:
    """0 if `node` does not use `syms`, 1 if it is affine in them (+, -, * by a factor free of them,
    broadcasting subscripts, casts), None otherwise (%, //, min, a load, a product of two counters...)."""
    if not (cu.names_in(node) & syms):
        return 0
    if isinstance(node, cst.Name):
        return 1
    if isinstance(node, cst.BinaryOperation):
        left, right = _affinity(node.left, syms), _affinity(node.right, syms)
        if left is None or right is None:
            return None
        if isinstance(node.operator, (cst.Add, cst.Subtract)):
            return max(left, right)
        if isinstance(node.operator, cst.Multiply) and not (left and right):
            return 1
        return None
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        return _affinity(node.expression, syms)
    if isinstance(node, cst.Subscript):
        if any(cu.names_in(e) & syms for e in node.slice):
            return None
        return _affinity(node.value, syms)
    if isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "to" and not any(cu.names_in(a.value) & syms for a in node.args):
            return _affinity(func.value, syms)
        leaf = (cu.call_name(node) or "").rsplit(".", 1)[-1]
        if leaf in ("multiple_of", "max_contiguous") and node.args and not any(cu.names_in(a.value) & syms for a in node.args[1:]):
            return _affinity(node.args[0].value, syms)
    return None


def _difference(term: cst.BaseExpression) -> str | None:
    """`a < b` (with any broadcasting subscripts around it) as the code of v with `term == (v < 0)`:
    a - b, or a - b - 1 for `<=` (integers); None for any other form of mask term."""
    subscripts = []
    while isinstance(term, cst.Subscript):
        subscripts.append(term)
        term = term.value.with_changes(lpar=[], rpar=[])
    if not (isinstance(term, cst.Comparison) and len(term.comparisons) == 1):
        return None
    left, op, right = _code(term.left).strip(), term.comparisons[0].operator, _code(term.comparisons[0].comparator).strip()
    forms = {cst.LessThan: (left, right, ""), cst.LessThanEqual: (left, right, " - 1"),
             cst.GreaterThan: (right, left, ""), cst.GreaterThanEqual: (right, left, " - 1")}
    if type(op) not in forms:
        return None
    a, b, tail = forms[type(op)]
    node = cst.parse_expression(f"({cu.paren(a)} - {cu.paren(b)}{tail})")
    for sub in reversed(subscripts):
        node = sub.with_changes(value=node, lpar=[], rpar=[])
    return _code(node)


def _conjuncts(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitAnd):
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _code(node: cst.CSTNode) -> str:
    return cu.code(cst.Module(body=[]), node)


def _corners(pointer: str, mask: str | None, levels: list[str], dim: int, desc) -> list[Access]:
    """Accesses at every corner of the iteration space (each loop at its first or last iteration):
    with rows affine in the counters, every element's offset is extreme at a corner, so the union of
    the corners' ranges holds every iteration's. Mask terms that change with the loop are dropped
    (their iterations may end anywhere, see issue 10 case 1) and offsets clamped to the tensor."""
    if not levels:
        return [Access(pointer, mask, desc)]
    syms = {_ITER.format(i) for i in range(len(levels))}
    # Stores (the producer side) are bounded exactly as reads are: an unproven bound is a _Fallback,
    # and the store's rows are then taken at the store itself (passes/producer_notify.py).
    if _affinity(cst.parse_expression(pointer), syms) != 1 and cu.names_in(cst.parse_expression(pointer)) & syms:
        raise _Fallback("the rows read are not affine in the loop counter")
    kept, moving = [], []
    if mask is not None:
        for term in _conjuncts(cst.parse_expression(mask)):
            (moving if cu.names_in(term) & syms else kept).append(term.with_changes(lpar=[], rpar=[]))
    kept = [_code(t).strip() for t in kept]
    dropped = bool(moving)
    if dropped and (dim != 0 or desc is not None):
        raise _Fallback("the mask changes with the loop")
    kept_mask = " & ".join(kept if len(kept) == 1 else map(cu.paren, kept)) if kept else None
    v = _difference(moving[0]) if len(moving) == 1 and len(levels) == 1 else None
    if v is not None and _affinity(cst.parse_expression(v), syms) is not None:
        first, last = {_ITER.format(0): "0"}, _last_corner(levels)
        return [Access(_at_corner(pointer, first), kept_mask, desc,
                       affine=(_at_corner(pointer, last), _at_corner(v, first), _at_corner(v, last), levels[0]))]
    out: list[Access] = []
    for bits in itertools.product((False, True), repeat=len(levels)):
        env: dict[str, str] = {}
        for i, last in enumerate(bits):
            env[_ITER.format(i)] = cu.substitute(cst.Module(body=[]), cst.parse_expression(levels[i]), env) if last else "0"
        access = Access(_at_corner(pointer, env), _at_corner(kept_mask, env) if kept_mask else None, desc, clamped=dropped)
        if access not in out:
            out.append(access)
    return out


def _moves_at_all(pointer: str, levels: int, loops: bool) -> bool:
    """With `loop_order` set: does the pointer change with its loop at all (a stepped pointer too)?"""
    return loops and bool(cu.names_in(cst.parse_expression(pointer)) & {_ITER.format(i) for i in range(levels)})


def _rows_move(pointer: str, desc, dim: int, levels: int, tiles: set[str] | None) -> bool:
    """Does a read in a loop sweep rows (along dim 0) that every program reads alike, so that a wait
    before the loop would wait for all of them (attention's key/value loop, a GEMM reducing along
    the communicated dim)? Seen where a loop counter, and no program id, indexes the first axis of a
    2-D block (`(start + tl.arange(0, BN))[:, None] * stride`) or a descriptor's row coordinate.
    Rows that also follow the program id (a tile's own row blocks) keep their wait before the loop:
    tiles are then reordered instead. A counter term outside the block (`k_ptrs + start_n * stride`, a
    pointer stepped by a stride) is `_walks_rows`'s to judge."""
    if dim != 0 or tiles is None:
        return False
    syms = {_ITER.format(i) for i in range(levels)}
    if desc is not None:
        names = cu.names_in(cst.parse_expression(pointer))
        return bool(names & syms) and not names & tiles and "program_id" not in pointer
    found = []

    class _Rows(cst.CSTVisitor):
        def visit_Subscript(self, node: cst.Subscript) -> None:
            parts = [e.slice for e in node.slice]
            if (len(parts) == 2 and isinstance(parts[0], cst.Slice) and parts[0].lower is None and parts[0].upper is None
                    and isinstance(parts[1], cst.Index) and isinstance(parts[1].value, cst.Name)
                    and parts[1].value.value == "None" and cu.names_in(node.value) & syms
                    and not cu.names_in(node.value) & tiles and "program_id" not in _code(node.value)):
                found.append(node)

    cst.parse_expression(pointer).visit(_Rows())
    return bool(found)


def _walks_rows(ks: KernelSource, pointer: str, dim: int, levels: int, tiles: set[str] | None,
                before: dict[str, str] | None) -> bool:
    """Does a read in a loop sweep the rows along `dim` through a counter term `_rows_move` does not
    look into: an offset `count * stride` added to a pointer made before the loop (FA2's
    `k_ptrs + start_n * stride_kn`) or a pointer stepped each iteration (`p += stride_t`, a scan or a
    recurrence)? The pointer is read with the names the kernel assigned before the loop inlined
    (`before`), as a sum of terms; a term's strides are the launch-time parameters it is scaled by.
    The counter's term sweeps the rows where its strides are
      - those of the first axis of a 2-D block no program id indexes (`offs_n[:, None] * stride_kn`),
        along dim 0, or along another dim where no program id indexes any axis of the block (the
        tile's rows are then scalar offsets: batch and head); or
      - those of no other term: the loop alone walks that axis, a position no block spans and no
        program id picks (Mamba's `states_ptrs += stride_states_chunk`).
    Strides written as constexprs (`p += H * K`) say nothing: the wait stays before the loop.
    Either answer is sound: it only decides whether each iteration waits for its own chunks."""
    if tiles is None:
        return False
    syms = {_ITER.format(i) for i in range(levels)}
    launched = set(ks.params) - _constexprs(ks)
    expr = cst.parse_expression(_subst(pointer, before) if before else pointer)
    terms = [_term(t, syms, tiles, launched) for t in _sum_terms(expr)]
    fixed = [t for t in terms if not t.counter]
    tiled_block = any(t.tiled and t.axis != "scalar" for t in fixed)
    for t in terms:
        if not (t.counter and t.axis == "scalar" and t.strides):
            continue
        same = [f for f in fixed if f.strides == t.strides]
        if not same:
            return True
        if any(f.axis == "rows" and not f.tiled for f in same) and (dim == 0 or not tiled_block):
            return True
    return False


def _constexpr_step(ks: KernelSource, pointer: str, levels: int, tiles: set[str] | None,
                    before: dict[str, str] | None) -> str:
    """The step of a loop's pointer written with constexprs only (flash-linear-attention's
    `p_k += H * K` over a contiguous [B, T, H, K]), as code; "" where there is none. Such a step says
    nothing of the axis it walks, so `_walks_rows` keeps the wait before the loop. A step that is the
    extent of a block of the pointer (a GEMM's `a_ptrs += BK` over `tl.arange(0, BK)`) walks along
    that block's own axis and is no such step."""
    if tiles is None:
        return ""
    syms = {_ITER.format(i) for i in range(levels)}
    constexprs = _constexprs(ks)
    expr = cst.parse_expression(_subst(pointer, before) if before else pointer)
    extents = [cu.names_in(a) for n in _walk(expr) if isinstance(n, cst.Call) and _code(n.func).endswith("arange")
               for a in n.args]
    for t in _sum_terms(expr):
        names = cu.names_in(t) - syms
        if not cu.names_in(t) & syms or not names or not names <= constexprs or names in extents:
            continue
        factors = [f for f in _factors(t) if not cu.names_in(f) & syms]
        return " * ".join(_code(f) for f in factors)
    return ""


@dataclass
class _Term:
    """One term of a pointer's sum: does it use a loop counter, a program id; which axis of a block it
    indexes (`rows` [:, None], `cols` [None, :], `block` 1-D, `scalar`); the launch-time parameters
    it is scaled by."""

    counter: bool
    tiled: bool
    axis: str
    strides: frozenset


def _sum_terms(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    node = node.with_changes(lpar=[], rpar=[]) if hasattr(node, "lpar") else node
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract)):
        return _sum_terms(node.left) + _sum_terms(node.right)
    return [node]


def _factors(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    node = node.with_changes(lpar=[], rpar=[]) if hasattr(node, "lpar") else node
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        return _factors(node.left) + _factors(node.right)
    return [node]


def _term(node: cst.BaseExpression, syms: set[str], tiles: set[str], launched: set[str]) -> _Term:
    code = _code(node)
    axes = [_axis(n) for n in _walk(node) if isinstance(n, cst.Subscript)]
    axis = "rows" if "rows" in axes else "cols" if "cols" in axes else "block" if "arange" in code else "scalar"
    strides = frozenset(f.value for f in _factors(node) if isinstance(f, cst.Name) and f.value in launched)
    return _Term(bool(cu.names_in(node) & syms), bool(cu.names_in(node) & tiles) or "program_id" in code, axis, strides)


def _axis(node: cst.Subscript) -> str:
    """'rows' for `x[:, None]`, 'cols' for `x[None, :]`, '' for any other subscript."""
    parts = [e.slice for e in node.slice]
    if len(parts) != 2:
        return ""
    full = [isinstance(p, cst.Slice) and p.lower is None and p.upper is None for p in parts]
    none = [isinstance(p, cst.Index) and isinstance(p.value, cst.Name) and p.value.value == "None" for p in parts]
    return "rows" if full[0] and none[1] else "cols" if none[0] and full[1] else ""


def _last_corner(levels: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for i, done in enumerate(levels):
        env[_ITER.format(i)] = _subst(done, env)
    return env


def _subst(code: str, env: dict[str, str]) -> str:
    return cu.substitute(cst.Module(body=[]), cst.parse_expression(code), env)


class _DropZeros(cst.CSTTransformer):
    """`0 * x` -> 0, `x + 0` / `0 + x` / `x - 0` -> x: a loop's first corner reads like the user's code."""

    @staticmethod
    def _zero(n: cst.CSTNode) -> bool:
        return isinstance(n, cst.Integer) and n.value == "0"

    def leave_BinaryOperation(self, original, updated):
        op, left, right = updated.operator, updated.left, updated.right
        keep = None
        if isinstance(op, cst.Multiply) and (self._zero(left) or self._zero(right)):
            keep = cst.Integer("0")
        elif isinstance(op, (cst.Add, cst.Subtract)) and self._zero(right):
            keep = left
        elif isinstance(op, cst.Add) and self._zero(left):
            keep = right
        if keep is None:
            return updated
        bare = keep.with_changes(lpar=[], rpar=[])
        if not updated.lpar or cu.is_atom(_code(bare)):
            return bare
        return keep.with_changes(lpar=updated.lpar, rpar=updated.rpar)

    def leave_Call(self, original, updated):
        # `tl.multiple_of(0, BN)` (a loop's `start = tl.multiple_of(start, BN)` at its first corner) is 0:
        # the hint changes no value, and compiled Triton refuses it on a literal.
        leaf = (cu.call_name(updated) or "").rsplit(".", 1)[-1]
        first = updated.args[0].value if updated.args else None
        if leaf in ("multiple_of", "max_contiguous") and isinstance(first, cst.Integer):
            return first
        return updated

    def leave_Subscript(self, original, updated):
        return updated

    def leave_ParenthesizedWhitespace(self, original, updated):
        return updated


def _at_corner(code: str, env: dict[str, str]) -> str:
    node = cst.parse_expression(code).visit(cu.Substitute(env)).visit(_DropZeros())
    return _code(node)


def _access_names(a: Access) -> set[str]:
    names = cu.names_in(cst.parse_expression(a.pointer)) | (cu.names_in(cst.parse_expression(a.mask)) if a.mask else set())
    for code in (*(a.desc or ()), *(a.affine or ())):
        names |= cu.names_in(cst.parse_expression(code))
    return names


def _covered(groups: list[ReadGroup], accesses: list[Access], body, index: int) -> bool:
    """A later read of the very same rows (same expressions, nothing they use reassigned since the
    earlier wait, live wherever the earlier wait was) needs no second wait."""
    for g in groups:
        if len(g.accesses) != len(accesses):
            continue
        if all(cu.same_expression(x.pointer, y.pointer) and x.desc == y.desc and set(x.guard) <= set(y.guard)
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


def _descriptors(ks: KernelSource, func: cst.FunctionDef, derived: set[str], tensor: str, dim: int,
                 base_name: str = BASE_NAME) -> dict[str, Descriptor]:
    """Tensor descriptors made over the communicated tensor: `d = tl.make_tensor_descriptor(...)`, or
    by a helper that does only that (helpers.descriptor_made: the attention tutorial's
    `desc_k = _maybe_make_tensor_desc(desc_k, shape=..., ...)`, whose base, the tensor itself, is
    then read from `base_name`, where the kernel keeps the tensor's start)."""
    found: list[tuple[cst.Assign, cst.Call, cst.Call]] = []

    class V(cst.CSTVisitor):
        def visit_Assign(self, n: cst.Assign) -> None:
            if not isinstance(n.value, cst.Call):
                return
            made = n.value if (cu.call_name(n.value) or "").rsplit(".", 1)[-1] == "make_tensor_descriptor" \
                else helpers.descriptor_made(ks, n.value)
            base = cu.arg(made, 0, "base") if made is not None else None
            if base is not None and cu.names_in(base) & derived:
                found.append((n, made, n.value))

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
    for assign, call, written in found:
        where = ks.location(written)
        targets = [t.target for t in assign.targets]
        if len(targets) != 1 or not isinstance(targets[0], cst.Name):
            raise InferenceError(f"assign the tensor descriptor of '{tensor}' to one name; {_binding_hint(tensor, dim)}", where)
        name = targets[0].value
        if call is not written and (cu.names_in(cu.arg(call, 0, "base")) & derived != {tensor}
                                    or counts.get(tensor, 0) > (name == tensor)):
            # A helper that passes a descriptor through unchanged is one only while it is handed the
            # pointer itself (no descriptor, nothing moved): otherwise it stays a helper call.
            continue
        # `K = make(K, ...)`: the descriptor is made from where the tensor starts, kept in base_name.
        own = {tensor: base_name} if name == tensor else {}
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
        used = set().union(*(cu.names_in(x) for x in lists)) - set(own)
        moved = sorted(n for n in used if counts.get(n, 0) > (0 if n in ks.params else 1))
        if counts.get(name, 0) > 1 or moved:
            what = f"'{name}' itself" if counts.get(name, 0) > 1 else ", ".join(moved)
            raise InferenceError(
                f"the tensor descriptor of '{tensor}' depends on {what}, which the kernel assigns more than once; make the "
                f"descriptor once from values that do not change, or {_binding_hint(tensor, dim)}", where)
        tail = " + ".join(cu.paren(f"{cu.paren(n)} - 1") if st == "1" else f"({cu.paren(n)} - 1) * {cu.paren(st)}"
                          for n, st in zip(shape[1:], strides[1:])) or "0"
        out[name] = Descriptor(name, cu.substitute(ks.module, lists[0], own), shape[0], strides[0], block[0], tail,
                               made_by=id(written) if call is not written else 0)
    return out


def _hoist(ks: KernelSource, block: list[cst.CSTNode], reads, before: set[str], tensor: str, dim: int,
           writes: bool = False, fallbacks: list | None = None, loops: bool = False,
           tiles: set[str] | None = None, prior: dict[str, str] | None = None) -> list[Access]:
    """The reads of the last statement of `block`, as expressions valid right before `block[0]`
    (every statement of `block` but the last runs in between and is inlined).

    A read whose rows cannot be bounded there (see `_Fallback`) goes to `fallbacks` as
    (call, pointer, mask, why, rows_at) when a list is given; otherwise it is an InferenceError.
    `loops` (the schedule sets `loop_order`): every read whose pointer changes with its loop waits
    per iteration, not only those `_rows_move` and `_walks_rows` recognise. `tiles`: the names derived
    from program ids; `prior`: what the kernel's statements before `block[0]` assign, as code."""
    accesses: list[Access] = []
    inner = set().union(*(cu.assigned_in(s) for s in block[:-1])) if len(block) > 1 else set()
    if not isinstance(block[-1], cst.SimpleStatementLine):
        inner |= cu.assigned_in(block[-1])
    assigned = set().union(*(cu.assigned_in(s) for s in block))
    for call, ptr, mask in reads:
        if isinstance(ptr, _Every):
            if Access("0", every=True, why=ptr.why) not in accesses:
                accesses.append(Access("0", every=True, why=ptr.why))
            continue
        env: dict[str, str] = {}
        unknown: dict[str, cst.CSTNode] = {}
        state = {"levels": [], "guards": writes}  # stores bound their loop's last iteration by a counter guard
        try:
            try:
                _evaluate(ks, block, call, env, unknown, state)
            except _Unknown as exc:
                raise InferenceError(
                    f"'{tensor}' is read in the test of a while loop, which runs again every iteration; read it into a "
                    f"name inside the loop body instead",
                    ks.location(call),
                ) from None
            clamped = False
            if isinstance(ptr, _DescRead):
                pointer, mask_code, desc = cu.substitute(ks.module, ptr.row, env), None, ptr.desc.args()
            elif isinstance(ptr, _Followed):
                pointer, clamped = _subst(ptr.access.pointer, env), ptr.access.clamped
                desc = tuple(_subst(x, env) for x in ptr.access.desc) if ptr.access.desc else None
                mask_code = _subst(ptr.access.mask, env) if ptr.access.mask else None
            else:
                pointer, desc = cu.substitute(ks.module, ptr, env), None
                mask_code = cu.substitute(ks.module, mask, env) if mask is not None else None
            used = _access_names(Access(pointer, mask_code, desc))
            bad = sorted(n for n in used if (n in unknown) or (n in inner and n not in before))
            if bad:
                raise _Fallback(f"{', '.join(bad)} changes inside the loop in a way inference cannot follow")
            levels = len(state["levels"])
            if not writes and levels and (_rows_move(pointer, desc, dim, levels, tiles) or _moves_at_all(pointer, levels, loops)
                                          or (desc is None and _walks_rows(ks, pointer, dim, levels, tiles, prior))):
                at = None
                if levels == 1 and isinstance(block[0], cst.For) and desc is None and len(block) == 1:
                    at = (_at_corner(pointer, {_ITER.format(0): "0"}), _at_corner(pointer, {_ITER.format(0): "1"}))
                raise _Fallback(f"each iteration reads other rows of '{tensor}', so each waits for its own chunks", at)
            corners = _corners(pointer, mask_code, state["levels"], dim, desc)
            step = _constexpr_step(ks, pointer, levels, tiles, prior) if not writes and levels and desc is None else ""
        except _Fallback as exc:
            if fallbacks is None:
                raise InferenceError(
                    f"the rows of '{tensor}' {'written' if writes else 'read'} here cannot be bounded before the loop: {exc.why}; "
                    f"{_binding_hint(tensor, dim, writes)}",
                    ks.location(call),
                ) from None
            fallbacks.append((call, ptr, mask, exc.why, exc.rows_at))
            continue
        # A helper's own constexpr tests (at its call, _guard_at_call) hold inside the caller's.
        guard = (*_constexpr_guard(ks, block[-1], call), *(ptr.access.guard if isinstance(ptr, _Followed) else ()))
        for access in corners:
            access.clamped = access.clamped or clamped
            access.guard = guard
            access.step = step
            if access not in accesses:
                accesses.append(access)
    return accesses


def _constexprs(ks: KernelSource) -> set[str]:
    """The kernel's `tl.constexpr` parameters it never assigns: values fixed per compiled specialisation."""
    p = ks.func.params
    declared = {x.name.value for x in (*p.posonly_params, *p.params, *p.kwonly_params)
                if x.annotation is not None and ks.code(x.annotation.annotation).endswith("constexpr")}
    return declared - cu.assigned_in(ks.func.body)


#: What a constexpr test may be made of: names of constexpr parameters, literals, and operators on them.
_STATIC_NODES = (cst.Name, cst.Integer, cst.Float, cst.BinaryOperation, cst.UnaryOperation, cst.BooleanOperation,
                 cst.Comparison, cst.ComparisonTarget, cst.BaseBinaryOp, cst.BaseUnaryOp, cst.BaseBooleanOp,
                 cst.BaseCompOp, cst.LeftParen, cst.RightParen, cst.BaseParenthesizableWhitespace)


def _is_constexpr_test(test: cst.BaseExpression, constexprs: set[str]) -> bool:
    """A test Triton evaluates when it compiles (its `if` keeps one arm): only constexpr parameters,
    literals (True, False, None, numbers) and operators."""
    return all(isinstance(n, _STATIC_NODES) for n in _walk(test)) \
        and cu.names_in(test) <= constexprs | {"True", "False", "None"}


def _constexpr_guard(ks: KernelSource, stmt: cst.CSTNode, call: cst.Call) -> tuple[tuple[str, bool], ...]:
    """The constexpr `if` tests on the way from `stmt` down to `call`, outermost first, with the arm
    the call is in (Access.guard)."""
    constexprs = _constexprs(ks)
    guard: list[tuple[str, bool]] = []
    node = stmt
    while not isinstance(node, cst.SimpleStatementLine):
        step = next(((branch, s) for branch, stmts in _blocks(node) for s in stmts if cu.contains(s, call)), None)
        if step is None:
            break  # in the statement's own header
        branch, inner = step
        if isinstance(node, cst.If) and _is_constexpr_test(node.test, constexprs):
            guard.append((_code(node.test.with_changes(lpar=[], rpar=[])).strip(), branch == "body"))
        node = inner
    return tuple(guard)


def _blocks(node: cst.CSTNode) -> list[tuple[str, list]]:
    out = []
    body = getattr(node, "body", None)
    if isinstance(body, cst.BaseSuite) and hasattr(body, "body") and not isinstance(node, cst.SimpleStatementLine):
        out.append(("body", list(body.body)))
    orelse = getattr(node, "orelse", None)
    if isinstance(orelse, cst.If):
        out.append(("orelse", [orelse]))
    elif orelse is not None:
        out.append(("orelse", list(orelse.body.body)))
    return out


def _site(anchor: cst.CSTNode, call: cst.Call) -> tuple[tuple[tuple[str, int], ...], cst.CSTNode]:
    """The path from `anchor` down to the innermost statement holding `call`, and that statement."""
    path: list[tuple[str, int]] = []
    node = anchor
    while not isinstance(node, cst.SimpleStatementLine):
        step = next(((branch, i, s) for branch, stmts in _blocks(node) for i, s in enumerate(stmts) if cu.contains(s, call)), None)
        if step is None:
            break  # the read is in the statement's own header (a loop's range, an if's test)
        path.append(step[:2])
        node = step[2]
    return tuple(path), node


def _fallback_group(ks: KernelSource, index: int, anchor: cst.CSTNode, call: cst.Call, ptr, mask, why: str,
                    rows_at: tuple[str, str] | None = None) -> ReadGroup:
    """A wait right before the statement holding the read, computed from its own pointer and mask."""
    path, site = _site(anchor, call)
    env: dict[str, str] = {}
    if isinstance(site, cst.SimpleStatementLine):
        for small in site.body:
            if cu.contains(small, call):
                break
            _effects(ks, cst.SimpleStatementLine(body=[small]), env, {})
    if isinstance(ptr, _DescRead):
        access = Access(cu.substitute(ks.module, ptr.row, env), None, ptr.desc.args())
    elif isinstance(ptr, _Followed):
        access = Access(_subst(ptr.access.pointer, env), _subst(ptr.access.mask, env) if ptr.access.mask else None,
                        clamped=ptr.access.clamped)
    else:
        access = Access(cu.substitute(ks.module, ptr, env), cu.substitute(ks.module, mask, env) if mask is not None else None)
    return ReadGroup(index, [access], ks.location(call).line, nested=path, why=why, rows_at=rows_at)


def _is_data(access: Access, data: set[str]) -> bool:
    """Do the rows of `access` depend on loaded values?"""
    if access.every:
        return False
    if _access_names(access) & data:
        return True
    exprs = [access.pointer, access.mask or "0", *(access.desc or ()), *(access.affine or ())]
    return any(helpers.loads_data(c) for e in exprs for c in cu.calls_in(cst.parse_expression(e)))


def _infer_loop(ks: KernelSource, binding: TensorBinding, loop: persistent.PersistentLoop, stmt, before: set[str],
                reads_of, tainted: set[str], rows: str | None, data: set[str]) -> list[ReadGroup]:
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
            if accs and all(fine(_access_names(a)) and not _is_data(a, data) for a in accs):
                tile_line = tile_line or line
                tile_accesses += [a for a in accs if a not in tile_accesses]
                continue
        fallbacks: list = []
        accs = _hoist(ks, [s], reads, outer | set().union(*(cu.assigned_in(x) for x in lbody[:j])), tensor, dim,
                      fallbacks=fallbacks)
        if accs and not _covered(local, accs, lbody, j):
            local.append(ReadGroup(j, accs, line))
        if fallbacks and flat and j == j_if:
            raise InferenceError(
                f"the rows of '{tensor}' read inside the block that starts each tile cannot be bounded ({fallbacks[0][3]}); "
                f"{_binding_hint(tensor, dim)}",
                ks.location(fallbacks[0][0]),
            )
        local += [_fallback_group(ks, j, s, *f) for f in fallbacks]
    groups = [ReadGroup(index, g.accesses, g.line, (g.stmt_index,), nested=g.nested, why=g.why) for g in local]
    if tile_accesses:
        groups.insert(0, ReadGroup(index, tile_accesses, tile_line, (j_if, tile_end), True))
        groups.sort(key=lambda g: g.inner)
    elif groups and not flat and not groups[0].nested:
        first = groups[0]
        fine = persistent.determined(loop, stmt, first.inner, tainted)
        first.tile_start = all(fine(_access_names(a)) and not _is_data(a, data) for a in first.accesses)
    return groups


def _decide_remap(ks, loop: persistent.PersistentLoop, stmt, tainted: set[str], helper_pid: str = "", data_rows: bool = False) -> None:
    carried = sorted(set(persistent.carried_state(loop, stmt, tainted)) | set(persistent.carried_values(loop, stmt))) \
        if loop.tile_start else []
    hidden = sorted(n for n, paths in persistent.step_paths(loop, stmt).items() if paths is None)
    test = persistent.loop_test_problem(loop, stmt, ks, tainted)
    loop.remap = loop.tile_start and not carried and not hidden and not test and not helper_pid
    if helper_pid:
        loop.why_not = loop.note = helper_pid
    elif data_rows:
        loop.why_not = loop.note = "the rows of its first read depend on loaded data, which changes from launch to launch"
    elif not loop.tile_start:
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
          before_line: int | None = None, loops: bool = False) -> TensorBinding:
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
        return _infer(ks, tensor, dim, rows, writes, before_line, loops=loops)
    except (KernelError, InferenceError):
        # Only a kernel that failed is asked whether `tensor:` names a scalar (an `M` used in
        # arithmetic): then that is the mistake to report, not whatever the search tripped on.
        _check_pointer(ks, tensor)
        raise


def _infer(ks: KernelSource, tensor: str, dim: int, rows: str | None, writes: bool, before_line: int | None,
           depth: int = 0, loops: bool = False, descs_in: dict[str, Descriptor] | None = None) -> TensorBinding:
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
    if not writes:
        _refuse_helper_stores(ks, func, derived, tensor)
    host = {} if tensor in (descs_in or {}) else host_descriptor(ks, func, tensor, dim)
    descs = {**host, **(descs_in or {}), **_descriptors(ks, func, derived, tensor, dim)}
    binding.descriptors = uses_descriptors(ks, func, derived)
    body = list(func.body.body)

    def reads_of(stmt):
        return _reads(ks, stmt, derived, tensor, dim, rows is not None, descs, writes, depth)

    def row_names(stmt) -> set[str]:
        out: set[str] = set()
        for call, ptr, _ in reads_of(stmt):
            if isinstance(ptr, _Followed):
                out |= _access_names(ptr.access)
            elif not isinstance(ptr, _Every):
                out |= cu.names_in(ptr.row if isinstance(ptr, _DescRead) else ptr)
            out |= {"<read>"}
        return out

    loop = None if writes else persistent.find(ks, func, body, row_names, derived)
    tainted = persistent.forward(func, set(), program_ids=True)
    data = helpers.data_names(ks, func)
    helper_pid = "" if writes else helpers.program_id_helper(ks)
    before: set[str] = set(ks.params)
    prior: dict[str, str] = {}  # what the statements so far assign, as code (_walks_rows reads pointers with it)
    for index, stmt in enumerate(body):
        if loop is not None and index == loop.index:
            if before_line is not None:
                raise KernelError(
                    f"binding.before_line is not supported for persistent kernels: the wait goes at the start of each tile, "
                    f"inside the loop at line {ks.location(stmt).line}; drop before_line",
                    ks.location(stmt),
                )
            groups = _infer_loop(ks, binding, loop, stmt, before, reads_of, tainted, rows, data)
            loop.tile_start = any(g.tile_start for g in groups)
            if rows is not None or loop.tile_start or not _hoistable(ks, stmt, reads_of, before, tensor, dim):
                binding.groups += groups
                binding.persistent = loop
                _decide_remap(ks, loop, stmt, tainted, helper_pid,
                              bool(groups) and any(_is_data(a, data) for a in groups[0].accesses))
                if rows is not None:
                    break
                before |= cu.assigned_in(stmt)
                _effects(ks, stmt, prior, {})
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
        fallbacks: list = []
        # Inside a followed helper no wait can go per iteration: its reads are bounded over its loops.
        accesses = _hoist(ks, [stmt], reads, before, tensor, dim, writes, fallbacks, loops and not depth,
                          None if depth else tainted, prior) if reads else []
        # A read of rows already waited for needs no second wait; every write counts, because the
        # announcement must follow the last one.
        if accesses and (writes or not _covered([g for g in binding.groups if not g.inner and not g.nested], accesses, body, index)):
            first = ks.location(reads[0][0])
            binding.groups.append(ReadGroup(index, accesses, first.line, at=(first.line, first.col)))
        binding.groups += [_fallback_group(ks, index, stmt, *f) for f in fallbacks]
        before |= cu.assigned_in(stmt)
        _effects(ks, stmt, prior, {})
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
    for g in binding.groups:
        g.data = any(_is_data(a, data) for a in g.accesses)
    if not writes:
        binding.no_remap = _why_no_remap(binding, helper_pid)
    binding.scales = _scales(ks, derived, tensor)
    return binding


def _scales(ks: KernelSource, derived: set[str], tensor: str) -> tuple[str, ...]:
    """The kernel's non-constexpr parameters that multiply something in the arithmetic of a pointer
    into the tensor (an assignment of a derived pointer, or a load's or store's pointer argument), or
    are a tensor descriptor's strides over it: where the launch passes the tensor's strides."""
    p = ks.func.params
    constexpr = {x.name.value for x in (*p.posonly_params, *p.params, *p.kwonly_params)
                 if x.annotation is not None and ks.code(x.annotation.annotation).endswith("constexpr")}
    exprs: list[cst.CSTNode] = []

    class V(cst.CSTVisitor):
        def visit_Assign(self, n: cst.Assign) -> None:
            if _pointer_names(n.value) & derived:
                exprs.append(n.value)

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            if set(cu.target_names(n.target)) & derived:
                exprs.append(n.value)

        def visit_Call(self, n: cst.Call) -> None:
            leaf = (cu.call_name(n) or "").rsplit(".", 1)[-1]
            first = cu.arg(n, 0, "pointer") if leaf in ("load", *cu.WRITE_CALLS) else cu.arg(n, 0, "base")
            if first is not None and _pointer_names(first) & derived:
                exprs.append(first)
                if leaf == "make_tensor_descriptor":
                    strides = cu.arg(n, 2, "strides")
                    exprs.extend([strides] if strides is not None else [])

    ks.func.body.visit(V())
    names: set[str] = set()
    for e in exprs:
        for node in _walk(e):
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
                names |= {side.value for side in (node.left, node.right) if isinstance(side, cst.Name)}
        if isinstance(e, (cst.List, cst.Tuple)):  # a descriptor's strides: each is one
            names |= {el.value.value for el in e.elements if isinstance(el.value, cst.Name)}
    return tuple(sorted(names & (set(ks.params) - constexpr - {tensor})))


def _walk(node: cst.CSTNode):
    yield node
    for child in node.children:
        yield from _walk(child)


def _why_no_remap(binding: TensorBinding, helper_pid: str) -> str:
    """Why the program ids of a (non-persistent) kernel must not be remapped: the first wait's range
    comes from a table probed once per launch shape, which only rows fixed by the shape may use, and
    a tile id a helper reads behind our back would not follow the remap."""
    if helper_pid:
        return helper_pid
    first = binding.groups[0]
    if first.nested:
        return "its first read waits inside its loop"
    if first.data:
        return "the rows of its first read depend on loaded data, which changes from launch to launch"
    return ""
