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
    """Insert our parameters before the first parameter with a default (so the def stays valid)."""
    params = list(func.params.params)
    at = next((i for i, p in enumerate(params) if p.default is not None), len(params))
    spelling = constexpr_spelling(func)
    new = [cst.Param(cst.Name(n)) for n in extra]
    new += [cst.Param(cst.Name(f), annotation=cst.Annotation(cst.parse_expression(spelling))) for f in flags]
    if params:
        # Keep the user's comma/whitespace style: copy a separator *between* two parameters (the
        # last parameter's comma, if any, is a trailing one and carries the closing line's indent).
        between = [p.comma for p in params[:-1] if p.comma != cst.MaybeSentinel.DEFAULT]
        nearest = params[at - 1].comma if 0 < at < len(params) else (between[-1] if between else cst.MaybeSentinel.DEFAULT)
        comma = nearest if nearest != cst.MaybeSentinel.DEFAULT else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        new = [p.with_changes(comma=comma) for p in new]
        if at == len(params):
            last = params[-1]
            trailing = last.comma
            params[-1] = last.with_changes(comma=comma)
            new[-1] = new[-1].with_changes(comma=trailing)
    params[at:at] = new
    return func.with_changes(params=func.params.with_changes(params=params))
