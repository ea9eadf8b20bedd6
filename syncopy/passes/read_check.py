"""Pass: read checker (checked mode). Every read of the communicated tensor verifies, from its own
pointers and mask, that the chunks it touches carry this launch's epoch; every store of a producer
verifies that its chunks were not announced yet. It runs after the other passes, on the fused
kernel, and knows nothing of the ranges inference found: it is an oracle for the waits they placed.

    # syncopy: checked: the chunks of A this read touches have arrived
    syncopy_device.check_read(syncopy_signals, syncopy_ctx, a_ptrs, mask, A, 42, True)
    a = tl.load(a_ptrs, mask=mask, other=0.0)

The literal (42) is the line of the read in the user's file. A violation goes through the error
slot that bounded waits use (device.py, "checked mode"), with the line in the flag word, and the
host raises `SyncopyReadError` naming file:line, rank, chunk and epoch (`violation`).

A @triton.jit helper of the kernel's file handed a pointer into the tensor is called through a
checked copy (`syncopy_checked_<name>`, next to the kernel), whose checks name the helper's lines;
a helper imported from another file is copied too where its copy runs among the kernel file's
globals (its checks name the line of the call), otherwise the transformed source says above the
call that it is not checked. A block pointer (`tl.make_block_ptr`) is refused in one line that
says what to use instead (a tensor descriptor, plain pointers).

Switched on by `syncopy.overlap(..., checked=True)`, `SYNCOPY_CHECKED=1` or `syncopy transform
--checked`.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import libcst as cst

from syncopy import device as dev
from syncopy.errors import KernelError, LaunchError, SyncopyReadError
from syncopy.frontend import cstutil as cu
from syncopy.frontend import helpers, imports
from syncopy.frontend import infer as inference
from syncopy.passes import names, signature
from syncopy.schedule.model import PRODUCER_PATTERNS

D = names.DEVICE
ENV = "SYNCOPY_CHECKED"
_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")


def enabled_by_env() -> bool:
    """Whether $SYNCOPY_CHECKED asks for checked mode (1/true/yes/on; unset, 0/false/no/off: not)."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in _ON or value in _OFF:
        return value in _ON
    raise LaunchError(f"{ENV}={os.environ[ENV]!r} is neither on nor off; set {ENV}=1 for checked mode or {ENV}=0 (or unset it)")


@dataclasses.dataclass(frozen=True)
class _Site:
    """One read (consumer) or store (producer) of the tensor: its check call, less the line."""

    call: cst.Call
    check: str  # the device function: check_read, check_store, check_desc_read, check_desc_store
    args: tuple[str, ...]  # code of the arguments after the context, up to the line
    after: tuple[str, ...] = ()  # after the line (DIM_OUTER)

    def statement(self, line: int, ctx: str = names.CTX) -> cst.BaseSmallStatement:
        args = ", ".join((names.SIGNALS, ctx, *self.args, str(line), *self.after))
        return cst.Expr(cst.parse_expression(f"{D}.{self.check}({args})"))


@dataclasses.dataclass(frozen=True)
class _Helper:
    """A user helper handed a pointer into the tensor: its accesses are not checked."""

    call: cst.Call
    name: str


def _code(node: cst.CSTNode) -> str:
    from syncopy.frontend.cstutil import code

    return code(cst.Module(body=[]), node)


class _Finder:
    """The reads (or stores) of the tensor in a function, in source order, told from the calls alone."""

    def __init__(self, func: cst.FunctionDef, tensor: str, base: str, dim: int, producer: bool,
                 descs: dict[str, inference.Descriptor], where, seeds: tuple[str, ...] = ()):
        # In a helper the seeds are the parameters handed a pointer into the tensor.
        self.derived = set().union(*(inference._derived_names(func, seed) for seed in (seeds or (tensor,))))
        self.tensor, self.base, self.producer, self.descs, self.where = tensor, base, producer, descs, where
        self.outer = "True" if dim == 0 else "False"
        self.local = helpers.local_names(func)

    def sites(self, node: cst.CSTNode) -> list[_Site | _Helper]:
        return [s for s in map(self._site, cu.calls_in(node)) if s is not None]

    def _site(self, call: cst.Call) -> _Site | _Helper | None:
        name = cu.call_name(call) or ""
        head, leaf = name.split(".", 1)[0], name.rsplit(".", 1)[-1]
        if head == D:
            return None
        method, desc, coords = inference._descriptor_of(call, self.descs)
        if desc is not None:
            return self._desc_site(call, name, method, desc, coords)
        ptr = cu.arg(call, 0, "pointer")
        touches = ptr is not None and bool(cu.names_in(ptr) & self.derived)
        if leaf == "load" and touches and not self.producer:
            return _Site(call, "check_read", (_code(ptr), self._mask(call, 1), self.base), (self.outer,))
        if leaf in cu.WRITE_CALLS and touches and self.producer:
            mask = "True" if leaf == "atomic_cas" else self._mask(call, 2)  # atomic_cas(ptr, cmp, val) has no mask
            return _Site(call, "check_store", (_code(ptr), mask, self.base), (self.outer,))
        if leaf == "make_block_ptr" and any(cu.names_in(a.value) & self.derived for a in call.args):
            raise KernelError(f"checked mode cannot check the accesses of '{self.tensor}' through {name} (the rows a block "
                              f"pointer touches after tl.advance are not known where it is used); use tl.make_tensor_descriptor("
                              f"{self.tensor}, ...) with desc.load([row, col]), or plain pointers ({self.tensor} + rows[:, None] * "
                              "stride + cols[None, :]), or launch without checked mode", self.where(call))
        helper = helpers.helper_name(call, self.local)
        if helper is not None and head not in ("tl", "triton", "math", "libdevice") \
                and any(cu.names_in(a.value) & self.derived for a in call.args):
            return _Helper(call, helper)
        return None

    def _desc_site(self, call, name, method, desc, coords) -> _Site | None:
        wanted = "store" if self.producer else "load"
        if method != wanted:
            if self.producer and method in ("load", "gather"):
                return None  # a producer reading its own partial: nothing communicated
            raise KernelError(f"checked mode cannot check {name} on the tensor descriptor of '{self.tensor}'; use "
                              f"{desc.name}.{wanted}([row, ...]), or launch without checked mode", self.where(call))
        if not (isinstance(coords, (cst.List, cst.Tuple)) and coords.elements):
            raise KernelError(f"checked mode needs {name} with a literal coordinate list ([row, col]) to tell its rows; "
                              "write the coordinates out, or launch without checked mode", self.where(call))
        base, block_rows, rows, row_stride, tail = desc.args()
        check = "check_desc_store" if self.producer else "check_desc_read"
        return _Site(call, check, (base, _code(coords.elements[0].value), block_rows, rows, row_stride, tail, self.base))

    @staticmethod
    def _mask(call: cst.Call, position: int) -> str:
        mask = cu.arg(call, position, "mask")
        return "True" if mask is None or (isinstance(mask, cst.Name) and mask.value == "None") else _code(mask)


def _headers(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The expressions a compound statement evaluates before its body: an if's test (its elifs'
    are checked in the else they become, `_Insert.leave_If`), a while's first test, a for's
    iterable; a simple statement is all header."""
    if isinstance(node, (cst.If, cst.While)):
        return [node.test]
    if isinstance(node, cst.For):
        return [node.iter]
    return [node]


class _Insert(cst.CSTTransformer):
    """Put each site's check right before the statement holding it. A read in a compound
    statement's header is checked where the header is evaluated: before an if (or for); an elif
    becomes `else:` + the checks + `if`, so they run only once the earlier tests were false; a
    while's test is checked before the loop and again at the end of its body, before each later
    test (Triton has no `continue` or `break`, so every later test follows the body's end)."""

    def __init__(self, checks: dict[int, cst.BaseSmallStatement], unchecked: dict[int, str], comments: dict[int, str],
                 renames: dict[int, tuple[str, tuple[tuple[str, str], ...]]] | None = None):
        self.checks, self.unchecked, self.comment_of = checks, unchecked, comments  # (the comment of each check)
        # helper call -> (its checked copy, (the base, the context) of each listed tensor handed to it there)
        self.renames = renames or {}
        self.elifs: set[int] = set()

    def leave_Call(self, original, updated):
        if id(original) not in self.renames:
            return updated
        clone, handed = self.renames[id(original)]
        args = list(updated.args)
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        tight = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
        extra = [(names.SIGNALS, names.SIGNALS)]
        for j, (base, ctx) in enumerate(handed):
            extra += [(_ctx_param(j), ctx), (_base_param(j), base)]
        for key, value in extra:
            args.append(cst.Arg(cst.parse_expression(value), keyword=cst.Name(key), equal=tight,
                                comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))))
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(func=cst.Name(clone), args=args)

    def _found(self, nodes: list[cst.CSTNode]) -> tuple[list[cst.BaseSmallStatement], list[str]]:
        calls = [id(c) for n in nodes for c in cu.calls_in(n)]
        return [self.checks[c] for c in calls if c in self.checks], list(dict.fromkeys(self.unchecked[c] for c in calls if c in self.unchecked))

    def _said(self, nodes: list[cst.CSTNode]) -> list[str]:
        """The comments of the checks found in `nodes`, each once (one per listed tensor checked there)."""
        return list(dict.fromkeys(self.comment_of[id(c)] for n in nodes for c in cu.calls_in(n) if id(c) in self.checks))

    def _comments(self, unchecked, said) -> list[cst.EmptyLine]:
        texts = [f"# syncopy: checked mode cannot look inside {h}: its accesses of this tensor are not checked" for h in unchecked]
        return [cst.EmptyLine(comment=cst.Comment(t)) for t in (*texts, *said)]

    def _prepend(self, original, updated):
        checks, unchecked = self._found(_headers(original))
        if not checks and not unchecked:
            return updated
        leading = [*updated.leading_lines, *self._comments(unchecked, self._said(_headers(original)))]
        if not checks:
            return updated.with_changes(leading_lines=leading)
        lines = [cst.SimpleStatementLine([c]) for c in checks]
        lines[0] = lines[0].with_changes(leading_lines=leading)
        return cst.FlattenSentinel([*lines, updated.with_changes(leading_lines=[])])

    def leave_SimpleStatementLine(self, original, updated):
        return self._prepend(original, updated)

    def leave_SimpleStatementSuite(self, original, updated):
        # `if c: x = tl.load(p)`: the checks go first on the same line.
        checks, _ = self._found([original])
        semi = cst.Semicolon(whitespace_after=cst.SimpleWhitespace(" "))
        return updated.with_changes(body=[*(c.with_changes(semicolon=semi) for c in checks), *updated.body])

    def visit_If(self, node: cst.If) -> None:
        if isinstance(node.orelse, cst.If):
            self.elifs.add(id(node.orelse))

    def leave_If(self, original, updated):
        updated = self._elif_checked(original, updated)
        # An elif's own checks went into the else it became (its parent's leave_If).
        return updated if id(original) in self.elifs else self._prepend(original, updated)

    def _elif_checked(self, original, updated):
        """`elif t:` whose test reads the tensor becomes `else:` + its checks + `if t:`."""
        if not isinstance(original.orelse, cst.If):
            return updated
        checked = self._prepend(original.orelse, updated.orelse)
        if checked is updated.orelse:
            return updated
        # Only comments to add (a helper that cannot be checked): an elif keeps them as the else's.
        inner = checked.nodes if isinstance(checked, cst.FlattenSentinel) else [checked]
        return updated.with_changes(orelse=cst.Else(body=cst.IndentedBlock(body=list(inner))))

    def leave_While(self, original, updated):
        checks, _ = self._found([original.test])
        if checks:
            again = [cst.SimpleStatementLine([c]) for c in checks]
            again[0] = again[0].with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(c + " (the next test)"))
                                                            for c in self._said([original.test])])
            body = updated.body
            if isinstance(body, cst.SimpleStatementSuite):  # `while t: x += 1`
                body = cst.IndentedBlock(body=[cst.SimpleStatementLine(body.body)])
            updated = updated.with_changes(body=body.with_changes(body=[*body.body, *again]))
        return self._prepend(original, updated)

    def leave_For(self, original, updated):
        return self._prepend(original, updated)


#: The line a check reports is the user's line plus LISTED_LINES times its tensor's place in the list
#: (`tensor: [K, V]`), so the host names the tensor too; 0 for the first (and only) one.
LISTED_LINES = 1 << 20
CHECK_BASE = "syncopy_check_base"  # a checked helper's parameter: the tensor's base, which its checks measure from
CLONE_PREFIX = "syncopy_checked_"


def _comment(tensor: str, producer: bool) -> str:
    what = "store" if producer else "read"
    return (f"# syncopy: checked: the chunks of {tensor} this {what} touches "
            f"{'are not announced yet' if producer else 'have arrived'}")


class _Clones:
    """Checked copies of the @triton.jit helpers that are handed a pointer into the tensor: the same
    function with a check before each of its accesses and three more parameters (signal pad,
    context, the tensor's base). One per (helper, parameters handed the pointer); helpers they call
    are copied the same way. A helper of the kernel's file is checked at its own lines; one imported
    from another file (frontend/imports.py) at the line of the kernel file's call into it (a
    violation names a line of the kernel's file), and only where its copy runs among the kernel
    file's globals as it runs among its own (same imports): otherwise it is left unchecked."""

    def __init__(self, ks, tensor: str, dim: int, producer: bool, made: dict | None = None, index: int = 0, notes: list | None = None):
        self.ks, self.tensor, self.dim, self.producer = ks, tensor, dim, producer
        # Shared by the listed tensors' copies (one name each); `index` is the tensor's place in the list.
        # (file, helper, ((tensor, parameters handed it), ...)) -> (copy's name, copy)
        self.made: dict[tuple, tuple[str, cst.FunctionDef | None]] = {} if made is None else made
        self.offset = index * LISTED_LINES
        self.refused: dict[str, str] = {}  # helper call name -> why its copy would not run here
        self.notes = [] if notes is None else notes  # every helper call left unchecked, the copies' too (shared)

    def functions(self) -> list[cst.FunctionDef]:
        return [f for _, f in self.made.values() if f is not None]

    def _find(self, name: str, origin) -> tuple | None:
        """(file, function) of the helper a call `name` in the file `origin` runs."""
        defs = helpers.jit_helpers(origin)
        if name in defs:
            return origin, defs[name]
        return imports.imported_helper(origin, name)

    def copy_for(self, handed: list[_Handed]) -> str | None:
        """The name of the checked copy to call at one call site (a call in the file `origin`, at the
        kernel file's line `line`), handed pointers into the listed tensors of `handed` (one entry each,
        in list order); None: the helper cannot be copied."""
        site, origin = handed[0].site, handed[0].origin
        found = self._find(site.name, origin)
        env = helpers.bind_args(found[1], site.call, found[0]) if found is not None else None
        if env is None:
            return None
        src, helper = found
        params = [tuple(p for p, code in env.items() if cu.names_in(cst.parse_expression(code)) & h.derived) for h in handed]
        key = (src.path, helper.name.value, tuple((h.clones.tensor, p) for h, p in zip(handed, params)))
        if key not in self.made:
            variants = sum(1 for _, name, _ in self.made if name == helper.name.value)
            clone = f"{CLONE_PREFIX}{helper.name.value}" + (f"_{variants}" if variants else "")
            self.made[key] = (clone, None)  # recursion: a helper that calls itself gets the same copy
            foreign = src.path != self.ks.path
            func = self._copy(src, helper, handed, params, clone, foreign)
            unbound = imports.foreign_names(func, src.module, self.ks.module) if foreign else []
            if unbound:
                del self.made[key]
                self.refused[site.name] = f"it uses {', '.join(unbound)}, which this file does not import as {Path(src.path).name} does"
                return None
            self.made[key] = (clone, func)
        return self.made[key][0]

    def _copy(self, src, helper: cst.FunctionDef, handed: list[_Handed], params: list[tuple[str, ...]], clone: str,
              foreign: bool) -> cst.FunctionDef:
        """The checked copy: each listed tensor handed to it checked from its own base and context
        (parameters j of _base_param and _ctx_param, in the order of `handed`)."""
        edits = _Edits(one_tensor_a_read=True)
        for j, (h, seeds) in enumerate(zip(handed, params)):
            c = h.clones
            finder = _Finder(helper, c.tensor, _base_param(j), c.dim, c.producer, {}, src.location, seeds=seeds)
            lines = [h.line if foreign else src.location(s.call).line + c.offset for s in finder.sites(helper.body)]
            edits.add(helper, finder, lines, c, _comment(c.tensor, c.producer), _base_param(j), src, _ctx_param(j))
        edits.finish()
        self.notes.extend(edits.unchecked.values())
        func = helper.visit(_Insert(edits.checks, edits.unchecked, edits.comments, edits.renames))
        extra = [p for j in range(len(handed)) for p in (_ctx_param(j), _base_param(j))]
        func = signature.add_params(func, extra=(names.SIGNALS, *extra), flags=())
        return func.with_changes(name=cst.Name(clone), leading_lines=[])


def _ctx_param(j: int) -> str:
    """A checked copy's parameter for the context of the j-th listed tensor handed to it."""
    return names.CTX if j == 0 else f"{names.CTX}_{j}"


def _base_param(j: int) -> str:
    """A checked copy's parameter for the base of the j-th listed tensor handed to it (its checks measure from it)."""
    return CHECK_BASE if j == 0 else f"{CHECK_BASE}_{j}"


@dataclasses.dataclass(frozen=True)
class _Handed:
    """A helper call handed a pointer into one listed tensor: what its checked copy needs of that tensor."""

    site: _Helper
    derived: frozenset
    clones: _Clones
    origin: object
    line: int
    base: str
    ctx: str
    where: object
    desc: str = ""  # a tensor descriptor over the tensor the call hands on (its reads are not checked in a copy)


class _Edits:
    """The checks, helper renames and notes `_Insert` puts into one function, gathered tensor by
    tensor (a kernel that reads several listed tensors checks each through its own context block)."""

    def __init__(self, one_tensor_a_read: bool = False):
        self.checks: dict[int, cst.BaseSmallStatement] = {}
        self.unchecked: dict[int, str] = {}
        self.renames: dict[int, tuple[str, tuple[tuple[str, str], ...]]] = {}
        self.comments: dict[int, str] = {}
        self.pending: dict[int, list[_Handed]] = {}  # helper call -> each listed tensor handed to it
        # In a helper's copy a read whose pointer comes from two listed tensors' parameters could be
        # checked as either; it is refused (`one_tensor_a_read`) rather than checked from the wrong base.
        self.one_tensor_a_read = one_tensor_a_read
        self.tensor_of: dict[int, str] = {}

    def add(self, func: cst.FunctionDef, finder: _Finder, lines: list[int], clones: _Clones, comment: str, base: str,
            origin, ctx: str = names.CTX, where: list | None = None) -> None:
        """`where`: the user's location of each site, where `finder.where` cannot tell (a rewritten kernel).
        Helper calls are copied once every listed tensor was added (`finish`): one copy checks them all."""
        sites = finder.sites(func.body)
        for k, s in enumerate(sites):
            if isinstance(s, _Site):
                other = self.tensor_of.setdefault(id(s.call), finder.tensor)
                if self.one_tensor_a_read and other != finder.tensor:
                    raise KernelError(
                        f"checked mode cannot tell whether this read of a helper reads {other} or {finder.tensor}: its pointer "
                        f"is computed from parameters handed both; hand each listed tensor in a parameter of its own and read "
                        f"each through its own, or launch without checked mode", finder.where(s.call))
                self.checks[id(s.call)] = s.statement(lines[k], ctx)
                self.comments[id(s.call)] = comment
                continue
            at = where[k] if where is not None else finder.where(s.call)
            # (a helper that makes the descriptor, `desc_k = _maybe_make_tensor_desc(desc_k, ...)`, is handed the pointer)
            descs = sorted(set().union(*(cu.names_in(a.value) for a in s.call.args)) & set(finder.descs)) \
                if helpers.descriptor_made(origin, s.call) is None else []
            self.pending.setdefault(id(s.call), []).append(
                _Handed(s, frozenset(finder.derived), clones, origin, lines[k], base, ctx, at, descs[0] if descs else ""))

    def finish(self) -> None:
        """Each pending helper call pointed at its checked copy, or noted as unchecked."""
        for call, handed in self.pending.items():
            clones = handed[0].clones
            name = handed[0].site.name
            descs = [h.desc for h in handed if h.desc]
            if descs:  # its copy would check nothing: say so at the call
                which = f"the tensor descriptor {descs[0]}" if len(descs) == 1 else f"the tensor descriptors {' and '.join(descs)}"
                self.unchecked[call] = (f"{name} (it is handed {which}, and checked mode checks reads through a descriptor "
                                        "only in the kernel itself)")
                continue
            clone = clones.copy_for(handed)
            if clone is None:
                why = clones.refused.get(name, "not a @triton.jit function it can find in this file or its imports")
                self.unchecked[call] = f"{name} ({why})"
            else:
                self.renames[call] = (clone, tuple((h.base, h.ctx) for h in handed))
        self.pending = {}


def apply(t):
    """`t` (a passes.Transformed) with a check before every read (or store) of its tensors, in the
    kernel and in checked copies of the helpers it hands a pointer into them. Each listed tensor
    (`tensor: [K, V]`) is checked from its own base, through its own context block."""
    ks = t.source
    producer = t.schedule.pattern in PRODUCER_PATTERNS
    made: dict = {}
    notes: list[str] = []
    edits = _Edits()
    for binding in sorted((t.binding, *t.others), key=lambda b: t.schedule.tensors.index(b.tensor)):
        index = t.schedule.tensors.index(binding.tensor)
        tensor = binding.tensor
        # (a descriptor made on the host, read as the parameter itself, is checked from its own geometry)
        descs = {**inference.host_descriptor(ks, ks.func, tensor, binding.dim),
                 **inference._descriptors(ks, ks.func, inference._derived_names(ks.func, tensor), tensor, binding.dim, binding.base)} \
            if binding.dim == 0 else {}
        original = _Finder(ks.func, tensor, binding.base, binding.dim, producer, descs, ks.location).sites(ks.func.body)
        finder = _Finder(t.func, tensor, binding.base, binding.dim, producer, descs, lambda n: ks.location(ks.func))
        # A user name the passes make depend on the tensor (a loop variable set from the arrival order,
        # computed from the tensor's rows) still points where it did: only the user's own pointers count.
        first = _Finder(ks.func, tensor, binding.base, binding.dim, producer, descs, ks.location)
        finder.derived = {n for n in finder.derived if n in first.derived or n.startswith(("syncopy_", "SYNCOPY_"))}
        clones = _Clones(ks, tensor, binding.dim, producer, made, index, notes)
        lines = [line + index * LISTED_LINES for line in _lines(ks, original, finder.sites(t.func.body))]
        edits.add(t.func, finder, lines, clones, _comment(tensor, producer), binding.base, ks, names.ctx_of(index),
                  [ks.location(s.call) for s in original])
    edits.finish()
    notes.extend(edits.unchecked.values())
    func = t.func.visit(_Insert(edits.checks, edits.unchecked, edits.comments, edits.renames))
    out = dataclasses.replace(t, func=func, checked=True, stages=dict(t.stages), checked_helpers=clones.functions(),
                              unchecked=tuple(dict.fromkeys(notes)))
    out.stages["fused"] = "\n\n".join(out.code(f) for f in (*out.checked_helpers, out.func))
    return out


def _lines(ks, original: list, fused: list) -> list[int]:
    """The user's line of each fused site: the passes add no reads or stores of their own and keep
    the user's in order, so the k-th site of the fused kernel is the k-th of the original one."""
    kinds = [type(s).__name__ + getattr(s, "check", "") for s in original]
    if kinds != [type(s).__name__ + getattr(s, "check", "") for s in fused]:
        raise KernelError("checked mode lost track of the kernel's accesses of its communicated tensor in the rewritten "
                          "kernel (an internal error); launch without checked mode and report the kernel", ks.location(ks.func))
    return [ks.location(s.call).line for s in original]


def violation(ctx, words: list[int], file: str) -> SyncopyReadError | None:
    """The checked-mode violation in a launch's error words (flag, rank, unit, epoch word), if any."""
    flag, rank, unit, word = words
    if flag < dev.CHECK_BASE.value:
        return None
    line, store = divmod(flag - dev.CHECK_BASE.value, 2)
    index, line = divmod(line, LISTED_LINES)
    plan = ctx.plan
    # Consumers wait per unit (explicit slices), producers count per chunk.
    chunk = divmod(plan.chunk_of_flag(unit) if hasattr(plan, "chunk_of_flag") else unit, plan.chunks_per_rank)
    tensor = ctx.schedule.tensors[index] if ctx.schedule is not None else "the tensor"
    return SyncopyReadError(file, line, rank, chunk, ctx.unwrap(word), tensor, bool(store))


def raise_if_violated(ctx, file: str) -> None:
    """Raise the checked-mode violation the kernel left in `ctx`'s signal pad (read on the host)."""
    err = violation(ctx, [int(x) for x in ctx.signals[: dev.SIG_HEADER].tolist()], file)
    if err is not None:
        raise err


def unchecked_lines(t) -> list[str]:
    """One located line per helper call whose accesses of a communicated tensor checked mode cannot
    check (`t.unchecked`)."""
    ks = t.source
    return [f"{ks.location(ks.func)}: '{ks.name}': checked mode cannot look inside {note}: what it reads or stores of the "
            "communicated tensor is not checked" for note in t.unchecked]


def report_unchecked(t) -> None:
    """Warn once per build (SyncopyUncheckedWarning) for each `unchecked_lines` line: a user who
    turned checked mode on must not take silence for a clean bill (the rewritten source says so at
    the call too)."""
    import warnings

    from syncopy.errors import SyncopyUncheckedWarning

    for line in unchecked_lines(t):
        warnings.warn(line, SyncopyUncheckedWarning, stacklevel=2)
