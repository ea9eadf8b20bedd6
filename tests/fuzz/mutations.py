"""Source mutations of a kernel file that keep its meaning: renamed arguments and locals, reordered
independent statements, extra (redundant) masks, an expression moved into a @triton.jit helper, a
second kernel in the file, comments and blank lines anywhere. Each works on the text (positions from
`ast` and `tokenize`), so the mutated file is what a user could have written.

`Mutant` carries the text and what a schedule and a launch need to follow it: the kernel's name and
the communicated argument's new name. Constexpr parameters keep their names (launches pass them by
keyword); positional arguments may be renamed freely.
"""
from __future__ import annotations

import ast
import dataclasses
import io
import keyword
import tokenize
from pathlib import Path

from hypothesis import strategies as st

from syncopy.schedule import Schedule


@dataclasses.dataclass(frozen=True)
class Mutant:
    text: str
    kernel: str  # the @triton.jit function to transform
    tensor: str  # its communicated argument
    applied: tuple[str, ...] = ()

    def but(self, what: str, **changes) -> "Mutant":
        return dataclasses.replace(self, applied=self.applied + (what,), **changes)


def kernel_def(text: str, name: str) -> ast.FunctionDef:
    return next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)


def _constexprs(fn: ast.FunctionDef) -> set[str]:
    return {a.arg for a in fn.args.args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)}


def _locals(fn: ast.FunctionDef) -> set[str]:
    """Names the kernel assigns (plain targets and for-loop variables)."""
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
    return out


def _used(text: str) -> set[str]:
    """Every name the file uses, defines or takes as a parameter: a fresh name is none of them."""
    out = set()
    for n in ast.walk(ast.parse(text)):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.FunctionDef):
            out |= {n.name, *(a.arg for a in n.args.args)}
    return out


# --------------------------------------------------------------------------------------------------
# Renaming
# --------------------------------------------------------------------------------------------------
def rename(text: str, kernel: str, old: str, new: str) -> str:
    """`old` -> `new` inside the kernel `kernel` (its signature and body): every NAME token but an
    attribute (`x.old`) and a keyword argument (`f(old=...)`)."""
    fn = kernel_def(text, kernel)
    first, last = fn.lineno, fn.end_lineno
    toks = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)]
    hits = []
    depth = 0
    for k, t in enumerate(toks):
        if t.type == tokenize.OP and t.string in "([{":
            depth += 1
        elif t.type == tokenize.OP and t.string in ")]}":
            depth -= 1
        if t.type != tokenize.NAME or t.string != old or not first <= t.start[0] <= last:
            continue
        before = toks[k - 1].string if k else ""
        after = toks[k + 1].string if k + 1 < len(toks) else ""
        if before == "." or (after == "=" and depth > 0):
            continue
        hits.append(t.start)
    lines = text.splitlines(keepends=True)
    for row, col in sorted(hits, reverse=True):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[col + len(old):]
    return "".join(lines)


names = st.from_regex(r"\A[a-z][a-z0-9_]{0,6}\Z").filter(lambda n: not keyword.iskeyword(n) and not n.startswith("syncopy"))
BUILTINS = {"tl", "triton", "range", "min", "max", "float", "int", "len", "print"}


def fresh(name: str, taken: set[str]) -> str:
    """`name`, with underscores appended until the file does not use it (no filter for hypothesis to give up on)."""
    while name in taken or name in BUILTINS:
        name += "_"
    return name


@st.composite
def renamed(draw, m: Mutant) -> Mutant:
    """One argument (not a constexpr) or local renamed to a fresh name."""
    fn = kernel_def(m.text, m.kernel)
    candidates = sorted(({a.arg for a in fn.args.args} - _constexprs(fn)) | _locals(fn))
    old = draw(st.sampled_from(candidates))
    new = fresh(draw(names), _used(m.text))
    return m.but(f"rename {old}->{new}", text=rename(m.text, m.kernel, old, new), tensor=new if old == m.tensor else m.tensor)


# --------------------------------------------------------------------------------------------------
# Reordering independent statements
# --------------------------------------------------------------------------------------------------
def _reads_writes(stmt: ast.stmt) -> tuple[set[str], set[str]]:
    reads, writes = set(), set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name):
            (writes if isinstance(node.ctx, ast.Store) else reads).add(node.id)
    if isinstance(stmt, ast.AugAssign):
        reads.add(stmt.target.id if isinstance(stmt.target, ast.Name) else "")
    return reads, writes


def _has_effect(stmt: ast.stmt) -> bool:
    """A store, an atomic, a call whose result is dropped: not moved past anything."""
    return isinstance(stmt, ast.Expr) or any(isinstance(n, ast.Attribute) and (n.attr.startswith(("store", "atomic", "debug")))
                                             for n in ast.walk(stmt))


def swappable_pairs(text: str, kernel: str) -> list[tuple[ast.stmt, ast.stmt]]:
    """Adjacent simple statements of one block (the kernel body or a loop body) that neither reads
    nor writes what the other writes."""
    fn = kernel_def(text, kernel)
    out = []
    for block in [fn.body] + [n.body for n in ast.walk(fn) if isinstance(n, (ast.For, ast.While, ast.If)) and n is not fn]:
        for a, b in zip(block, block[1:]):
            if not all(isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign)) for s in (a, b)):
                continue
            if _has_effect(a) or _has_effect(b):
                continue
            (ra, wa), (rb, wb) = _reads_writes(a), _reads_writes(b)
            if wa & (rb | wb) or wb & ra:
                continue
            out.append((a, b))
    return out


def swap(text: str, a: ast.stmt, b: ast.stmt) -> str:
    lines = text.splitlines(keepends=True)
    first = lines[a.lineno - 1:a.end_lineno]
    between = lines[a.end_lineno:b.lineno - 1]
    second = lines[b.lineno - 1:b.end_lineno]
    return "".join(lines[:a.lineno - 1] + second + between + first + lines[b.end_lineno:])


@st.composite
def reordered(draw, m: Mutant) -> Mutant:
    pairs = swappable_pairs(m.text, m.kernel)
    if not pairs:
        return draw(st.just(m))  # nothing to change here (a composite must draw)
    a, b = draw(st.sampled_from(pairs))
    return m.but(f"swap lines {a.lineno}/{b.lineno}", text=swap(m.text, a, b))


# --------------------------------------------------------------------------------------------------
# Extra masks, helpers, a second kernel, comments and blank lines
# --------------------------------------------------------------------------------------------------
def _segment(text: str, node: ast.AST) -> tuple[int, int]:
    """Character offsets [start, end) of `node` in `text`."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts[node.lineno - 1] + node.col_offset, starts[node.end_lineno - 1] + node.end_col_offset


@st.composite
def masked(draw, m: Mutant) -> Mutant:
    """One load's or store's mask `M` becomes a redundant spelling of itself: `(M) & (M)`, `(M) | (M)`, `((M) != 0)`."""
    fn = kernel_def(m.text, m.kernel)
    masks = [kw.value for n in ast.walk(fn) if isinstance(n, ast.Call) for kw in n.keywords if kw.arg == "mask"]
    if not masks:
        return draw(st.just(m))  # nothing to change here (a composite must draw)
    mask = draw(st.sampled_from(masks))
    lo, hi = _segment(m.text, mask)
    old = m.text[lo:hi]
    new = draw(st.sampled_from([f"({old}) & ({old})", f"({old}) | ({old})", f"(({old}) != 0)"]))
    return m.but(f"mask line {mask.lineno}", text=m.text[:lo] + new + m.text[hi:])


@st.composite
def helper(draw, m: Mutant) -> Mutant:
    """The value of one assignment moved into a @triton.jit helper that takes the names it reads."""
    fn = kernel_def(m.text, m.kernel)
    assigns = [n for n in ast.walk(fn) if isinstance(n, ast.Assign) and len(n.targets) == 1
               and any(isinstance(x, (ast.Call, ast.BinOp)) for x in ast.walk(n.value))]
    if not assigns:
        return draw(st.just(m))  # nothing to change here (a composite must draw)
    node = draw(st.sampled_from(assigns))
    params = sorted({x.id for x in ast.walk(node.value) if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Load)} - {"tl", "triton"})
    const = _constexprs(fn)
    name = fresh(f"h_{draw(names)}", _used(m.text))
    lo, hi = _segment(m.text, node.value)
    body = m.text[lo:hi]
    sig = ", ".join(f"{p}: tl.constexpr" if p in const else p for p in params)
    helper_src = f"@triton.jit\ndef {name}({sig}):\n    return {body}\n\n\n"
    text = m.text[:lo] + f"{name}({', '.join(params)})" + m.text[hi:]
    at = _segment(text, kernel_def(text, m.kernel).decorator_list[0])[0] - 1  # before the kernel's decorator
    return m.but(f"helper {name}", text=text[:at] + helper_src + text[at:])


OTHER_KERNEL = '''
@triton.jit
def {name}(P, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(P + o, tl.load(P + o, mask=o < n) * 2, mask=o < n)

'''


@st.composite
def second_kernel(draw, m: Mutant) -> Mutant:
    """Another @triton.jit kernel (a small one, or a copy of this one under another name) before or after it."""
    name = fresh(f"k_{draw(names)}", _used(m.text))
    fn = kernel_def(m.text, m.kernel)
    lines = m.text.splitlines(keepends=True)
    if draw(st.booleans()):
        src = OTHER_KERNEL.format(name=name)
    else:
        first = fn.decorator_list[0].lineno
        src = "\n" + "".join(lines[first - 1:fn.end_lineno]).replace(f"def {m.kernel}(", f"def {name}(", 1) + "\n"
    at = fn.decorator_list[0].lineno - 1 if draw(st.booleans()) else fn.end_lineno
    return m.but(f"second kernel {name}", text="".join(lines[:at]) + src + "".join(lines[at:]))


COMMENTS = ["# a comment", "# tl.program_id(0) in a comment", "#", "# syncopy: not ours", "    # indented comment", ""]


@st.composite
def commented(draw, m: Mutant) -> Mutant:
    """Comment lines, blank lines and trailing comments at random lines."""
    lines = m.text.splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(lines)))
        if draw(st.booleans()) and at < len(lines) and lines[at].strip() and not lines[at].rstrip().endswith("\\"):
            lines[at] = lines[at].rstrip("\n") + "  # trailing\n"
        else:
            lines.insert(at, draw(st.sampled_from(COMMENTS)) + "\n")
    text = "".join(lines)
    return m.but("comments", text=text)


MUTATIONS = [renamed, renamed, reordered, masked, helper, second_kernel, commented]


@st.composite
def mutants(draw, base: Mutant, max_steps: int = 4) -> Mutant:
    """`base` after 1 to `max_steps` random mutations (each keeps the file valid Python)."""
    m = base
    for _ in range(draw(st.integers(1, max_steps))):
        step = draw(st.sampled_from(MUTATIONS))
        nxt = draw(step(m))
        try:
            compile(nxt.text, "<mutant>", "exec")
        except SyntaxError:
            continue  # a comment inside a string, say: keep the last valid text
        m = nxt
    return m


KERNELS = Path(__file__).resolve().parents[1] / "kernels"
# The two kernels of the world fuzzer, and how tests/world/workers.py's Problem launches each.
BASES = {"gemm2d": Mutant((KERNELS / "gemm2d.py").read_text(), "gemm_2d", "a"),
         "rms": Mutant((KERNELS / "rownorm.py").read_text(), "rms_rows", "X")}


@st.composite
def mutated_cases(draw) -> tuple[str, Mutant, Schedule]:
    problem = draw(st.sampled_from(sorted(BASES)))
    m = draw(mutants(BASES[problem]))
    s = Schedule(pattern="all_gather", kernel=m.kernel, tensor=m.tensor, chunks_per_rank=draw(st.integers(1, 3)),
                 order=draw(st.sampled_from(["ring", "local_first", "bidirectional_ring"])))
    return problem, m, s


