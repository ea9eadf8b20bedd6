"""Pass: loop order. A loop whose iterations read other rows of the communicated tensor waits inside,
per iteration (infer.py, consumer_wait.py). Where the analysis proves that the order of its
iterations cannot change what the kernel computes (below; docs/how-it-works.md, "Proven or as
written", states the same whitelist for users), it runs them in chunk-arrival order, this rank's
own rows first, as the tile reorder does for programs:

    syncopy_n = syncopy_device.trip_count(0, hi, BN)
    syncopy_r0 = syncopy_device.first_row(<the read's pointer at the first iteration>, K, syncopy_ctx)
    syncopy_r1 = syncopy_device.first_row(<... at the second iteration>, K, syncopy_ctx)
    for syncopy_t in range(0, syncopy_n):
        start = 0 + syncopy_device.arrival_iteration(syncopy_t, syncopy_n, syncopy_r0, syncopy_r1, syncopy_ctx) * BN
        <the loop's body, its per-iteration waits included>

Proven (the whitelist): `for v in range(...)` directly in the kernel's body, no break, continue or
return, no store, atomic or print anywhere in it (nor in the @triton.jit helpers it calls, which
must be this file's), its variable neither assigned in it nor read after it, and every value it
carries from one iteration to the next (assigned in it and defined before it, read after it, or
read before its assignment) one of:
  - an accumulator updated once, directly in the loop's body, by an associative and commutative
    reduction (`x += t`, `x -= t`, `x = x + t`, `x *= t`, `|`, `&`, `^`, `x = tl.dot(a, b, x)`)
    whose term reads no value the loop carries (through its temporaries too), and read nowhere
    else in the loop;
  - a running max or min (`x = tl.maximum(x, t)`, or `x_new = tl.maximum(x, t)` ... `x = x_new`)
    whose term reads no value the loop carries, read by nothing else in the loop;
  - the online-softmax rescale, recognised exactly: `m_new = tl.maximum(m, tl.max(s, 1))`; the
    first-block guard `m_safe = tl.where(m_new == float("-inf"), c, m_new)` (c a finite literal;
    `!=` with the branches swapped, either side of the comparison); `alpha = tl.exp(m - m_safe)`;
    `p = tl.exp(s - m_safe[:, None])`; accumulators `x = x * alpha[:, None] + t` (or `* alpha`,
    either operand order at both levels) whose term is `tl.sum(p, 1)`, `tl.dot(p, v)` or `p * w`
    (`p.to(...)` too); then `m = m_new`, in that order. `tl.exp2` for both exps, or axis 0 with
    `[None, :]` (no tl.dot then), are the same form. s, v and
    w read nothing the loop carries; m, m_new, m_safe, alpha and p feed nothing else. Without the
    guard, a block whose scores are all -inf run first gives exp(-inf - -inf) = NaN (the kernel of
    templates/ag_attention is guarded). Only Triton's own functions match (`tl.`, `triton.language.`,
    their `.math`), never a helper of the same name.
Anything else keeps the written order (each iteration still waits for its own chunks, at its read),
and a comment before the loop says why (`syncopy explain KERNEL.py -s S.yaml` lists it). The
schedule's `loop_order: arrival` where this is not proven is refused in one located line;
`as_written` keeps the order without looking.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

import libcst as cst

from syncopy.errors import KernelError
from syncopy.frontend import cstutil as cu
from syncopy.frontend import helpers
from syncopy.frontend.infer import ReadGroup, TensorBinding
from syncopy.frontend.source import KernelSource
from syncopy.passes import names

D = names.DEVICE
T, N, R0, R1 = "syncopy_t", "syncopy_n", "syncopy_r0", "syncopy_r1"
_RANGES = {"range", "tl.range", "triton.language.range"}
_SIDE_EFFECTS = ("store", "atomic_", "device_print", "device_assert", "scatter")
_EXPS = {"exp", "exp2"}
_TL = {f"{m}{sub}" for m in cu.TL_MODULES for sub in ("", ".math")}
# Updates `x = x <op> t` / `x <op>= t` that reduce associatively and commutatively (`-`: a sum of -t).
_AUG = (ast.Add, ast.Sub, ast.Mult, ast.BitOr, ast.BitAnd, ast.BitXor)
_COMMUTATIVE = (ast.Add, ast.Mult, ast.BitOr, ast.BitAnd, ast.BitXor)
NO_GUARD = ("rescaled by exp(max before - max after) without the first-block guard: a block whose scores are "
            "all -inf, run first, makes exp(-inf - -inf) = NaN; guard the new max as templates/ag_attention does "
            "(`m_safe = tl.where(m_new == float(\"-inf\"), 0.0, m_new)`, subtracted in both exps)")


@dataclass
class ArrivalLoop:
    """A top-level loop to run in arrival order: where its iterations' rows begin, read through which binding."""

    rows_at: tuple[str, str]
    binding: TensorBinding


@dataclass
class WrittenLoop:
    """A top-level loop that keeps its written order because its reorder is not proven: why (a clause)."""

    why: str


def plan(ks: KernelSource, body: list[cst.BaseStatement], bindings: tuple[TensorBinding, ...],
         forced: str | None) -> dict[int, ArrivalLoop | WrittenLoop]:
    """How each top-level loop (by index in `body`) over moving rows runs: in arrival order where
    that is proven, else as written with the reason. Raises for `loop_order: arrival` that is not
    proven; `as_written` keeps every loop as written (no reason to give)."""
    moving = _moving_loops(bindings)
    if forced is not None and not moving:
        raise KernelError(f"loop_order: {forced} is set but no loop of kernel '{ks.name}' reads other rows of "
                          f"'{bindings[0].tensor}' at each iteration; drop loop_order", ks.location(ks.func))
    out: dict[int, ArrivalLoop | WrittenLoop] = {}
    if forced == "as_written":
        return out
    before_names = set(ks.params)
    for index, stmt in enumerate(body):
        if index in moving:
            group, binding = moving[index]
            after = set().union(*(cu.names_in(s) for s in body[index + 1:]))
            problem = why_not(ks, stmt, before_names, after, group)
            if not problem:
                out[index] = ArrivalLoop(group.rows_at, binding)
            elif forced == "arrival":
                line = ks.location(stmt).line
                raise KernelError(f"loop_order: arrival, but the loop at line {line} {problem}, so its iterations must keep "
                                  "their order; set loop_order: as_written (or drop it)", ks.location(stmt))
            else:
                out[index] = WrittenLoop(problem)
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


def why_not(ks: KernelSource, stmt: cst.CSTNode, before: set[str], after: set[str], group: ReadGroup) -> str:
    """'' where the loop's iterations are proven to run in any order (the module's whitelist), else
    what stops them (as a clause). `before`: the names defined before the loop; `after`: those the
    kernel uses after it."""
    if group.rows_at is None or not isinstance(stmt, cst.For):
        return "is nested in another statement (only a loop directly in the kernel's body is reordered)"
    if not isinstance(stmt.target, cst.Name) or stmt.orelse is not None:
        return "does not bind one name (or has an else branch)"
    it = stmt.iter
    if not (isinstance(it, cst.Call) and cu.call_name(it) in _RANGES and 1 <= len(it.args) <= 3
            and all(a.keyword is None for a in it.args)):
        return "is not `for ... in range(...)`"
    if len(it.args) == 3 and not _positive_step(ks, it.args[2].value):
        return f"steps by {ks.code(it.args[2].value)}, which is not a positive literal or constexpr"
    effect = _side_effect(ks, stmt.body)
    if effect:
        return effect
    loop = ast.parse(ks.code(stmt.with_changes(leading_lines=[]))).body[0]
    if any(isinstance(n, (ast.Break, ast.Continue, ast.Return)) for n in ast.walk(loop)):
        return "leaves early (break, continue or return)"
    var = stmt.target.value
    flow = _Flow(loop.body)
    if var in flow.defs or var in after:
        return f"assigns its variable '{var}' in its body or reads it after the loop"
    flow.carried = sorted((set(flow.defs) & (before | after | flow.exposed)) - {var})
    return flow.problem()


def _positive_step(ks: KernelSource, step: cst.BaseExpression) -> bool:
    if isinstance(step, cst.Integer):
        return int(step.value, 0) > 0
    return isinstance(step, cst.Name) and step.value in _constexprs(ks)


def _constexprs(ks: KernelSource) -> set[str]:
    params = (*ks.func.params.posonly_params, *ks.func.params.params, *ks.func.params.kwonly_params)
    return {p.name.value for p in params if p.annotation is not None and "constexpr" in ks.code(p.annotation.annotation)}


def _leaf(call: cst.Call) -> str:
    f = call.func
    return f.attr.value if isinstance(f, cst.Attribute) else f.value if isinstance(f, cst.Name) else ""


def _has_effect(call: cst.Call) -> bool:
    return _leaf(call).startswith(_SIDE_EFFECTS)


def _side_effect(ks: KernelSource, body: cst.CSTNode) -> str:
    """'' if nothing in the loop, nor in a helper it calls, writes memory or prints; else the clause."""
    for call in cu.calls_in(body):
        if _has_effect(call):
            return f"calls {cu.call_name(call) or _leaf(call)} (a side effect whose order may matter)"
    local = helpers.local_names(ks.func)
    for call in cu.calls_in(body):
        name = helpers.helper_name(call, local)
        if name is None:
            continue
        helper = helpers.find(ks, name)
        if helper is None:
            return (f"calls {name}, which is not a @triton.jit function of this file or of a module it imports (syncopy "
                    "cannot see whether it stores)")
        if helper.builtin:
            if _has_effect(helper.as_builtin(call)):
                return f"calls {name} ({helper.builtin}: a side effect whose order may matter)"
            continue
        if any(_has_effect(c) for c in cu.calls_in(helper.func.body)) or helpers.helper_does(helper.source, helper.func, _has_effect):
            return (f"calls the helper {name}, which stores, prints or calls what syncopy cannot see (a side effect "
                    "whose order may matter)")
    return ""


# --- what the loop carries, from the loop's own text (Python's ast: shapes are easy to match) -------

@dataclass
class _Def:
    node: ast.AST          # the assignment (Assign, AugAssign, AnnAssign, For, NamedExpr, With)
    top: int               # index of the top-level statement of the loop body holding it
    reads: set[str]        # names its value reads, the enclosing conditions' names included
    direct: bool           # a single-target statement directly in the loop's body


def _loads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _targets(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


def _stored_and_read(target: ast.AST) -> set[str]:
    """An augmented assignment's target names: read as well as written."""
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _call_leaf(node: ast.AST) -> str:
    """'maximum' for `tl.maximum(...)` (triton.language, tl.math): a Triton function, never a user's
    helper of the same name; '' for anything else."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return ""
    return node.func.attr if ast.unparse(node.func.value) in _TL else ""


def _is_name(node: ast.AST, name: str | None = None) -> bool:
    return isinstance(node, ast.Name) and (name is None or node.id == name)


@dataclass
class _Flow:
    """Every assignment in a loop body, who reads what, and which names are read before assigned."""

    body: list[ast.stmt]
    defs: dict[str, list[_Def]] = field(default_factory=dict)
    readers: dict[str, list[ast.AST]] = field(default_factory=dict)
    exposed: set[str] = field(default_factory=set)
    carried: list[str] = field(default_factory=list)

    def __post_init__(self):
        for top, stmt in enumerate(self.body):
            self._collect(stmt, top, set(), True)
        defined: set[str] = set()
        for stmt in self.body:
            if isinstance(stmt, ast.AugAssign):
                reads = _loads(stmt.value) | _stored_and_read(stmt.target)
            elif isinstance(stmt, ast.Assign):
                reads = _loads(stmt.value) | set().union(*(_loads(t) for t in stmt.targets))
            else:
                reads = _loads(stmt)
            self.exposed |= (reads - defined) & set(self.defs)
            if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                defined |= set(_targets(stmt))

    def _define(self, targets: list[ast.AST], d: _Def) -> None:
        for t in targets:
            for name in _targets(t):
                self.defs.setdefault(name, []).append(d)

    def _read(self, names_read: set[str], node: ast.AST) -> None:
        for name in names_read:
            self.readers.setdefault(name, []).append(node)

    def _collect(self, node: ast.AST, top: int, control: set[str], direct: bool) -> None:
        for n in ast.walk(node):  # `(y := ...)` anywhere: an assignment too, never a plain one
            if isinstance(n, ast.NamedExpr):
                self._define([n.target], _Def(n, top, _loads(n.value) | control, False))
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            value = node.value if node.value is not None else ast.Constant(None)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            reads = _loads(value) | (_stored_and_read(node.target) if isinstance(node, ast.AugAssign) else set())
            reads |= set().union(*(_loads(t) for t in targets))  # subscript and attribute targets read names
            single = len(targets) == 1 and _is_name(targets[0])
            self._define(targets, _Def(node, top, reads | control, direct and single))
            self._read(reads, node)
        elif isinstance(node, (ast.If, ast.While)):
            test = _loads(node.test)
            self._read(test, node)
            for child in (*node.body, *node.orelse):
                self._collect(child, top, control | test, False)
        elif isinstance(node, ast.For):
            it = _loads(node.iter)
            self._read(it, node)
            self._define([node.target], _Def(node, top, it | control, False))
            for child in (*node.body, *node.orelse):
                self._collect(child, top, control | it, False)
        elif isinstance(node, ast.With):
            used = set().union(*(_loads(item.context_expr) for item in node.items))
            self._read(used, node)
            bound = [i.optional_vars for i in node.items if i.optional_vars is not None]
            self._define(bound, _Def(node, top, used | control, False))
            for child in node.body:
                self._collect(child, top, control, False)
        else:
            self._read(_loads(node), node)

    # -- queries

    def single(self, name: str) -> _Def | None:
        """The one assignment of `name`, if it has exactly one and that one is a plain statement of the body."""
        mine = self.defs.get(name, [])
        return mine[0] if len(mine) == 1 and mine[0].direct else None

    def carried_in(self, names_read: set[str]) -> set[str]:
        """The carried values `names_read` depend on, through the body's assignments (and the
        conditions they sit under)."""
        found: set[str] = set()
        seen: set[str] = set()
        todo = list(names_read)
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            if n in self.carried:
                found.add(n)
            else:
                for d in self.defs.get(n, []):
                    todo.extend(d.reads)
        return found

    def read_only_by(self, name: str, nodes: list[ast.AST]) -> bool:
        return all(any(r is n for n in nodes) for r in self.readers.get(name, []))

    # -- the whitelist

    def problem(self) -> str:
        proven: set[str] = set()
        for m in self.carried:
            done, problem = self._softmax(m)
            if problem:
                return f"carries '{problem[0]}' from iteration to iteration ({problem[1]})"
            proven |= done
        for x in self.carried:
            if x not in proven:
                problem = self._accumulator(x)
                if problem:
                    return f"carries '{x}' from iteration to iteration ({problem})"
        return ""

    def _accumulator(self, x: str) -> str:
        """'' if x is a reduction (a sum-like update or a running max/min) that reads no carried value."""
        mine = self.defs.get(x, [])
        if len(mine) != 1:
            return "assigned more than once"
        d = mine[0]
        if not d.direct:
            return "updated inside a nested statement"
        node = d.node
        terms, reduced = self._sum_terms(node, x), None
        if terms is None:
            reduced = self._max_terms(x, node)
            if reduced is None:
                return self._not_a_sum(node, x)
            terms, via = reduced
        others = sorted(self.carried_in(set().union(*(_loads(t) for t in terms))) - {x})
        if others:
            return f"its update reads '{others[0]}', which also changes from iteration to iteration"
        if x in set().union(*(_loads(t) for t in terms)):
            return "not a sum into it"
        allowed = [node] if reduced is None else [via]
        if not self.read_only_by(x, allowed):
            kind = "a running max or min" if reduced is not None else "an accumulator"
            return f"{kind} read outside its own update"
        if reduced is not None and via is not node and not self.read_only_by(node.value.id, [node]):
            return f"a running max or min whose new value '{node.value.id}' is read elsewhere in the loop"
        return ""

    def _not_a_sum(self, node: ast.AST, x: str) -> str:
        v = getattr(node, "value", None)
        if isinstance(node, ast.Assign) and isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add):
            for mine in (v.left, v.right):
                if isinstance(mine, ast.BinOp) and isinstance(mine.op, ast.Mult) and x in _loads(mine):
                    factor = mine.right if _is_name(mine.left, x) else mine.left
                    return (f"rescaled by {ast.unparse(factor)}, which is not the online-softmax rescale "
                            "exp(max before - max after)")
        return "not a sum into it"

    @staticmethod
    def _sum_terms(node: ast.AST, x: str) -> list[ast.AST] | None:
        """The terms an associative, commutative update of x adds in, or None."""
        if isinstance(node, ast.AugAssign) and _is_name(node.target, x) and isinstance(node.op, _AUG):
            return [node.value]
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and _is_name(node.targets[0], x)):
            return None
        v = node.value
        if isinstance(v, ast.BinOp):
            if _is_name(v.left, x) and isinstance(v.op, (*_COMMUTATIVE, ast.Sub)):
                return [v.right]
            if _is_name(v.right, x) and isinstance(v.op, _COMMUTATIVE):
                return [v.left]
        if _call_leaf(v) == "dot":
            acc = next((k.value for k in v.keywords if k.arg == "acc"), v.args[2] if len(v.args) > 2 else None)
            if _is_name(acc, x) and len(v.args) >= 2:
                return list(v.args[:2])
        return None

    def _max_terms(self, x: str, node: ast.AST):
        """(terms, the node that reads x) for `x = tl.maximum(x, t)` or `x = y` after `y = tl.maximum(x, t)`."""
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            return None
        v, via = node.value, node
        if _is_name(v):
            d = self.single(v.id)
            if d is None or not isinstance(d.node, ast.Assign) or v.id in self.carried or d.top >= self.defs[x][0].top:
                return None
            v, via = d.node.value, d.node
        if _call_leaf(v) in ("maximum", "minimum") and len(v.args) == 2 and not v.keywords:
            a, b = v.args
            if _is_name(a, x):
                return [b], via
            if _is_name(b, x):
                return [a], via
        return None

    # -- the online softmax

    def _softmax(self, m: str) -> tuple[set[str], tuple[str, str] | None]:
        """For a running max `m` with accumulators rescaled by a factor: the accumulators (and m) the
        online-softmax form proves, or (set(), (accumulator, clause)) where the form is not recognised.
        (set(), None) where m has no rescaled accumulator (m is then an ordinary running max)."""
        upd = self.single(m)
        if upd is None or not (isinstance(upd.node, ast.Assign) and _is_name(upd.node.value)):
            return set(), None
        mn = upd.node.value.id
        mn_def = self.single(mn)
        if mn_def is None or mn in self.carried or not isinstance(mn_def.node, ast.Assign):
            return set(), None
        mx = mn_def.node.value
        if not (_call_leaf(mx) == "maximum" and len(mx.args) == 2 and any(_is_name(a, m) for a in mx.args)):
            return set(), None
        rescaled = [x for x in self.carried if x != m and self._rescale(x) is not None]
        if not rescaled:
            return set(), None
        scores, axis = self._scores(mx, m)
        if scores is None:
            return set(), (rescaled[0], f"rescaled while its running max '{m}' is not `tl.maximum({m}, tl.max(scores, "
                                        "axis))` over the scores its terms exponentiate")
        factors, weights, guards = [], [], []
        for x in rescaled:
            got = self._rescaled_by(x, m, mn, scores, axis)
            if isinstance(got, str):
                return set(), (x, got)
            factors.append(got[0])
            guards.append(got[1])
            weights += got[2]
        # Who reads what: the max, its new value, the guarded value, the factor and the weights feed
        # nothing but the rescale; the factor is taken before the max moves on.
        node = lambda name: self.single(name).node
        x_defs = [node(x) for x in rescaled]
        checks = [(m, [mn_def.node, *map(node, factors)]), (mn, [*map(node, guards), upd.node]),
                  *((g, [*map(node, factors), *map(node, weights)]) for g in guards),
                  *((a, x_defs) for a in factors), *((w, x_defs) for w in weights)]
        for name, allowed in checks:
            if not self.read_only_by(name, allowed):
                return set(), (m, f"an online-softmax max whose '{name}' is also read elsewhere in the loop")
        if not all(mn_def.top < self.single(g).top < self.single(a).top < upd.top for g, a in zip(guards, factors)):
            return set(), (m, "an online-softmax max, but not in its order (new max, guard, factor, then the max moves on)")
        return {m, *rescaled}, None

    def _rescale(self, x: str):
        """(factor, term) for `x = x * f + t` (either operand order at both levels), else None."""
        d = self.single(x)
        if d is None or not isinstance(d.node, ast.Assign) or not isinstance(d.node.value, ast.BinOp):
            return None
        v = d.node.value
        if not isinstance(v.op, ast.Add):
            return None
        for scaled, term in ((v.left, v.right), (v.right, v.left)):
            if isinstance(scaled, ast.BinOp) and isinstance(scaled.op, ast.Mult):
                if _is_name(scaled.left, x) and x not in _loads(scaled.right):
                    return scaled.right, term
                if _is_name(scaled.right, x) and x not in _loads(scaled.left):
                    return scaled.left, term
        return None

    def _rescaled_by(self, x: str, m: str, mn: str, scores: str, axis):
        """(factor name, guard name, weight names) where x = x * exp(m - guard(mn)) + (a term linear in
        exp(scores - guard(mn))), else the clause that says what differs."""
        factor, term = self._rescale(x)
        not_rescale = f"rescaled by {ast.unparse(factor)}, which is not the online-softmax rescale exp(max before - max after)"
        # A reduced term (tl.sum(p, axis)) has the max's shape: the factor as it is; any other term
        # has the scores' shape: the factor broadcast along the reduced axis.
        if _call_leaf(term) == "sum":
            alpha = factor.id if _is_name(factor) else None
        else:
            alpha = factor.value.id if isinstance(factor, ast.Subscript) and _is_name(factor.value) and _broadcast(factor, axis) \
                else None
        a_def = self.single(alpha) if alpha is not None and alpha not in self.carried else None
        sub = _exp_of_difference(a_def.node.value) if a_def is not None and isinstance(a_def.node, ast.Assign) else None
        if sub is None or not _is_name(sub[1], m):
            return not_rescale
        exp, _, safe = sub
        guard = self.single(safe.id) if _is_name(safe) and safe.id not in self.carried else None
        if guard is None or not isinstance(guard.node, ast.Assign) or not _guards(guard.node.value, mn):
            return NO_GUARD
        weights = self._weights(term, scores, axis, safe.id, exp, mn)
        return weights if isinstance(weights, str) else (alpha, safe.id, weights)

    def _scores(self, mx: ast.Call, m: str):
        """(scores name, axis) for `tl.maximum(m, tl.max(s, axis))` with s reading nothing carried."""
        r = mx.args[1] if _is_name(mx.args[0], m) else mx.args[0]
        if _call_leaf(r) != "max" or not r.args or not _is_name(r.args[0]):
            return None, None
        # The axis is required: a whole-block max broadcast against a running max of rows would
        # rescale each row by another row's factor, which no shape check here can rule out.
        axis = next((k.value for k in r.keywords if k.arg == "axis"), r.args[1] if len(r.args) > 1 else None)
        if not (isinstance(axis, ast.Constant) and axis.value in (0, 1, -1)):
            return None, None
        s = r.args[0].id
        if s in self.carried or self.carried_in({s}):
            return None, None
        return s, axis.value

    def _weights(self, term: ast.AST, scores: str, axis, ms: str, exp: str, mn: str) -> list[str] | str:
        """The weight names p (`p = exp(scores - ms[...])`) a rescaled term is linear in, or the clause."""
        def weight(node):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to":
                others.extend([*node.args, *(k.value for k in node.keywords)])
                node = node.func.value
            return node.id if _is_name(node) else None

        others: list[ast.AST] = []
        leaf = _call_leaf(term)
        if leaf == "sum" and term.args:
            p = weight(term.args[0])
            t_axis = next((k.value for k in term.keywords if k.arg == "axis"), term.args[1] if len(term.args) > 1 else None)
            if not (isinstance(t_axis, ast.Constant) and t_axis.value == axis):
                p = None
        elif leaf == "dot" and len(term.args) == 2 and not term.keywords and axis in (1, -1):
            p = weight(term.args[0])
            others.append(term.args[1])
        elif isinstance(term, ast.BinOp) and isinstance(term.op, ast.Mult):
            p, other = weight(term.left), term.right
            if p is None:
                p, other = weight(term.right), term.left
            others.append(other)
        else:
            p = weight(term)
        bad = f"rescaled, but its term {ast.unparse(term)} is not linear in the softmax weights exp(scores - max)"
        if p is None or p in self.carried or self.carried_in(set().union(*(_loads(o) for o in others))):
            return bad
        d = self.single(p)
        sub = _exp_of_difference(d.node.value) if d is not None and isinstance(d.node, ast.Assign) else None
        if sub is None or not _is_name(sub[1], scores):
            return bad
        e, _, shift = sub
        base = shift.value if isinstance(shift, ast.Subscript) else shift
        if _is_name(base, mn):
            return NO_GUARD
        if not _is_name(base, ms) or e != exp:
            return bad
        if not isinstance(shift, ast.Subscript) or not _broadcast(shift, axis):
            return bad
        return [p]


def _exp_of_difference(node: ast.AST):
    """('exp' | 'exp2', a, b) for `tl.exp(a - b)` / `tl.exp2(a - b)` (tl.math too), else None."""
    if _call_leaf(node) in _EXPS and len(node.args) == 1 and not node.keywords:
        arg = node.args[0]
        if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Sub):
            return _call_leaf(node), arg.left, arg.right
    return None


def _broadcast(node: ast.Subscript, axis: int) -> bool:
    """`v[:, None]` (axis 1 or -1), `v[None, :]` (axis 0)."""
    s = node.slice
    if not isinstance(s, ast.Tuple) or len(s.elts) != 2:
        return False
    kinds = ["none" if isinstance(e, ast.Constant) and e.value is None else
             "all" if isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None else "?"
             for e in s.elts]
    want = {1: ["all", "none"], -1: ["all", "none"], 0: ["none", "all"]}
    return kinds == want[axis]


def _neg_inf(node: ast.AST) -> bool:
    text = ast.unparse(node).replace(" ", "").replace("'", '"')
    return text in ('float("-inf")', '-float("inf")', "-math.inf", "-float(\"infinity\")")


def _guards(node: ast.AST, mn: str) -> bool:
    """`tl.where(mn == -inf, c, mn)` or `tl.where(mn != -inf, mn, c)` (the comparison either way round), c a finite literal."""
    if _call_leaf(node) != "where" or len(node.args) != 3 or node.keywords:
        return False
    cond, a, b = node.args
    if not (isinstance(cond, ast.Compare) and len(cond.ops) == 1):
        return False
    left, right = cond.left, cond.comparators[0]
    if not ((_is_name(left, mn) and _neg_inf(right)) or (_is_name(right, mn) and _neg_inf(left))):
        return False
    literal = lambda n: isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and abs(n.value) != float("inf") \
        or isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub) and literal(n.operand)
    if isinstance(cond.ops[0], ast.Eq):
        return literal(a) and _is_name(b, mn)
    if isinstance(cond.ops[0], ast.NotEq):
        return _is_name(a, mn) and literal(b)
    return False


def rewrite(ks: KernelSource, loop: cst.BaseStatement, how: ArrivalLoop | WrittenLoop) -> list[cst.BaseStatement]:
    """The loop, run in chunk-arrival order (see the module docstring), with what it needs before it;
    or, kept as written, with a comment that says why."""
    if isinstance(how, WrittenLoop):
        note = cst.EmptyLine(comment=cst.Comment(f"# syncopy: this loop keeps its written order (each iteration waits for "
                                                 f"its own chunks): it {how.why}"))
        return [loop.with_changes(leading_lines=[*loop.leading_lines, note])]
    args = [ks.code(a.value) for a in loop.iter.args]
    start, stop, step = (["0", args[0], "1"] if len(args) == 1 else [*args, "1"] if len(args) == 2 else args)
    b, var = how.binding, loop.target.value
    r0, r1 = how.rows_at
    first_row = "first_row" if b.dim == 0 else "first_row_along"  # rows along an inner dim wrap at its size
    pre = [
        f"{N} = {D}.trip_count({start}, {stop}, {step})\n",
        f"{R0} = {D}.{first_row}({r0}, {b.base}, {b.ctx})\n",
        f"{R1} = {D}.{first_row}({r1}, {b.base}, {b.ctx})\n",
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
