"""Small libcst helpers shared by the frontend and the passes."""
from __future__ import annotations

from typing import Iterator

import libcst as cst

# Calls that write memory: dropped from probe kernels, rejected on the communicated tensor.
WRITE_CALLS = frozenset(
    {"store", "store_tensor_descriptor", "atomic_add", "atomic_xchg", "atomic_cas", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor"}
)
TL_MODULES = frozenset({"tl", "triton.language", "language"})


def dotted(node: cst.CSTNode) -> str | None:
    """'tl.load' for Attribute(Name('tl'), 'load'), 'range' for Name('range'), else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr.value}" if inner else None
    return None


def call_name(call: cst.Call) -> str | None:
    return dotted(call.func)


def names_in(node: cst.CSTNode) -> set[str]:
    """Every variable name read in an expression (attribute names and keywords excluded)."""
    found: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Attribute(self, n: cst.Attribute) -> bool:
            n.value.visit(self)
            return False

        def visit_Arg(self, n: cst.Arg) -> bool:
            n.value.visit(self)
            return False

        def visit_Name(self, n: cst.Name) -> None:
            found.add(n.value)

    node.visit(V())
    return found


def target_names(target: cst.CSTNode) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for el in target.elements for n in target_names(el.value)]
    return []


def assigned_in(node: cst.CSTNode) -> set[str]:
    """Names assigned anywhere inside `node` (assignments, augmented assignments, loop targets)."""
    out: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Assign(self, n: cst.Assign) -> None:
            for t in n.targets:
                out.update(target_names(t.target))

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            out.update(target_names(n.target))

        def visit_AnnAssign(self, n: cst.AnnAssign) -> None:
            out.update(target_names(n.target))

        def visit_For(self, n: cst.For) -> None:
            out.update(target_names(n.target))

    node.visit(V())
    return out


def calls_in(node: cst.CSTNode) -> Iterator[cst.Call]:
    found: list[cst.Call] = []

    class V(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> None:
            found.append(n)

    node.visit(V())
    return iter(found)


def contains(node: cst.CSTNode, needle: cst.CSTNode) -> bool:
    hit = False

    class V(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            nonlocal hit
            if n is needle:
                hit = True
            return not hit

    node.visit(V())
    return hit


def arg(call: cst.Call, position: int, keyword: str) -> cst.BaseExpression | None:
    positional = [a for a in call.args if a.keyword is None and a.star == ""]
    for a in call.args:
        if a.keyword is not None and a.keyword.value == keyword:
            return a.value
    return positional[position].value if len(positional) > position else None


class Substitute(cst.CSTTransformer):
    """Replace variable names by (parenthesised) expressions; attribute names and keywords stay."""

    def __init__(self, env: dict[str, str]):
        self.env = env

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        code = self.env.get(original.value)
        return cst.parse_expression(paren(code)) if code is not None else updated

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)


def is_atom(code: str) -> bool:
    """True when `code` needs no parentheses as an operand (a name, number, call, subscript...)."""
    try:
        node = cst.parse_expression(code)
    except cst.ParserSyntaxError:
        return False
    return isinstance(node, (cst.Name, cst.Integer, cst.Float, cst.Attribute, cst.Call, cst.Subscript)) or bool(node.lpar)


def paren(code: str) -> str:
    return code if is_atom(code) else f"({code})"


def same_expression(a: str, b: str) -> bool:
    """Equal up to parentheses and spacing."""
    import ast

    return ast.dump(ast.parse(a, mode="eval")) == ast.dump(ast.parse(b, mode="eval"))


def code(module: cst.Module, node: cst.CSTNode) -> str:
    """`node`'s source text, parseable on its own: an expression written over several lines inside a
    call's parentheses (`mask=a &\n b`, as yapf and black wrap them) is wrapped in parentheses, which
    keep it one expression wherever the text goes (a wait's argument, a parse of its own)."""
    text = module.code_for_node(node)
    if "\n" in text and isinstance(node, cst.BaseExpression):
        return f"({text})"
    return text


def substitute(module: cst.Module, expr: cst.BaseExpression, env: dict[str, str]) -> str:
    if not env:
        return code(module, expr)
    return code(module, expr.visit(Substitute(env)))


def spread(body: cst.CSTNode, names: set[str], taints) -> set[str]:
    """`names` grown by every assignment (plain, augmented, annotated) and loop target in `body`
    whose value `taints(value, names)` says depends on them: a flow-insensitive fixpoint."""
    class V(cst.CSTVisitor):
        changed = False

        def _value(self, value: cst.CSTNode, targets: list[str]) -> None:
            if not set(targets) <= names and taints(value, names):
                names.update(targets)
                self.changed = True

        def visit_Assign(self, n: cst.Assign) -> None:
            self._value(n.value, [x for t in n.targets for x in target_names(t.target)])

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            self._value(n.value, target_names(n.target))

        def visit_AnnAssign(self, n: cst.AnnAssign) -> None:
            if n.value is not None:
                self._value(n.value, target_names(n.target))

        def visit_For(self, n: cst.For) -> None:
            self._value(n.iter, target_names(n.target))

    v = V()
    while True:
        v.changed = False
        body.visit(v)
        if not v.changed:
            return names
