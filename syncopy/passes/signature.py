"""Pass: thread syncopy's arguments (context, signal pad, tile order, trace) through the signature."""
from __future__ import annotations

import libcst as cst

from syncopy.errors import KernelError
from syncopy.frontend import cstutil as cu
from syncopy.frontend.source import KernelSource
from syncopy.passes import names


def constexpr_spelling(func: cst.FunctionDef) -> str:
    """How this file spells `tl.constexpr` (we annotate our flag the same way)."""
    for p in func.params.params:
        if p.annotation is not None:
            text = cu.dotted(p.annotation.annotation) or ""
            if text.endswith("constexpr"):
                return text
    return "tl.constexpr"


def check_reserved(ks: KernelSource) -> None:
    used = set(ks.params) | cu.assigned_in(ks.func.body) | cu.names_in(ks.func.body)
    clash = sorted(n for n in used if n.lower().startswith("syncopy_"))
    if ks.linked:  # the link pass's names, and the ones its tile start reads (checked on the user's kernel before it ran)
        ours = {names.DEVICE, names.CTX, names.SIGNALS, names.TRACE, names.TRACE_FLAG}
        clash = [n for n in clash if not n.startswith(("syncopy_in_", "syncopy_out_")) and n not in ours]
    if clash:
        raise KernelError(
            f"kernel '{ks.name}' uses the name '{clash[0]}'; names starting with syncopy_ are reserved for the "
            "arguments syncopy adds, so rename it",
            ks.location(ks.func),
        )


def flags_for(binding) -> tuple[str, ...]:
    """The constexpr flags a fused kernel (and its probe) takes: the async-proxy flag only where the
    kernel uses tensor descriptors, so every other kernel's signature stays as it was."""
    return (names.TRACE_FLAG, names.TABLE_FLAG, *((names.ASYNC_PROXY_FLAG,) if binding.descriptors else ()))


def add_params(func: cst.FunctionDef, extra: tuple[str, ...] = names.EXTRA_PARAMS, flags: tuple[str, ...] = (names.TRACE_FLAG, names.TABLE_FLAG)) -> cst.FunctionDef:
    """Insert our parameters before the first parameter with a default (so the def stays valid), laid
    out like the user's: one line, one parameter per line, or the indentation of the line they join.
    The user's comments stay where they were: on their parameter's line, and the blank or comment
    lines between parameters; ours carry none."""
    params = list(func.params.params)
    at = next((i for i, p in enumerate(params) if p.default is not None), len(params))
    spelling = constexpr_spelling(func)
    new = [cst.Param(cst.Name(n)) for n in extra]
    new += [cst.Param(cst.Name(f), annotation=cst.Annotation(cst.parse_expression(spelling))) for f in flags]
    sep = _separator(func, params, at)
    new = [p.with_changes(comma=sep) for p in new]
    if params and at == len(params):
        params[-1], new[-1] = _append_after(params[-1], new[-1], sep)
    params[at:at] = new
    return func.with_changes(params=func.params.with_changes(params=params))


def _separator(func: cst.FunctionDef, params: list[cst.Param], at: int) -> cst.Comma:
    """The comma our parameters end with: the user's between two parameters next to where ours go
    (not a trailing one: it carries the closing line's indent), without its comments; with no such
    comma, a newline to the first parameter's indent if the signature starts on its own line."""
    between = [p.comma for p in params[:-1] if p.comma != cst.MaybeSentinel.DEFAULT]
    nearest = params[at - 1].comma if 0 < at < len(params) else (between[-1] if between else None)
    if nearest is not None:
        return nearest.with_changes(whitespace_after=_without_comments(nearest.whitespace_after))
    opening = func.whitespace_before_params
    if isinstance(opening, cst.ParenthesizedWhitespace):
        return cst.Comma(whitespace_after=_without_comments(opening))
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def _without_comments(ws):
    """`ws` with its line break but none of the comments or blank lines it holds."""
    if not isinstance(ws, cst.ParenthesizedWhitespace):
        return ws
    return ws.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])


def _append_after(last: cst.Param, ours: cst.Param, sep: cst.Comma) -> tuple[cst.Param, cst.Param]:
    """The user's last parameter and our last one when ours go at the end: the user's keeps what
    follows it on its line (`ACTIVATION: tl.constexpr  # note`, now after a comma); ours takes the
    way the list closes (a trailing comma or not, the closing paren on its own line or not)."""
    multiline = isinstance(sep.whitespace_after, cst.ParenthesizedWhitespace)
    trailing = last.comma
    if trailing != cst.MaybeSentinel.DEFAULT:  # `B,` then the closing paren
        closing = trailing.whitespace_after
        if multiline and isinstance(closing, cst.ParenthesizedWhitespace):
            kept = trailing.with_changes(whitespace_after=closing.with_changes(last_line=sep.whitespace_after.last_line))
            return last.with_changes(comma=kept), ours.with_changes(comma=trailing.with_changes(whitespace_after=_without_comments(closing)))
        return last.with_changes(comma=sep), ours.with_changes(comma=trailing)
    closing = last.whitespace_after_param  # `B` then the closing paren, maybe a comment and a line break between
    if multiline and isinstance(closing, cst.ParenthesizedWhitespace):
        kept = sep.with_changes(whitespace_after=closing.with_changes(last_line=sep.whitespace_after.last_line))
        return (last.with_changes(comma=kept, whitespace_after_param=cst.SimpleWhitespace("")),
                ours.with_changes(comma=cst.MaybeSentinel.DEFAULT, whitespace_after_param=_without_comments(closing)))
    return (last.with_changes(comma=sep, whitespace_after_param=cst.SimpleWhitespace("")),
            ours.with_changes(comma=cst.MaybeSentinel.DEFAULT, whitespace_after_param=closing))
