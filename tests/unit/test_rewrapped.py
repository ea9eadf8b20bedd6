"""Any valid Python the kernel is written in (issue 31, item 4): every golden kernel re-wrapped as
formatters wrap code (a newline after each comma, `&`, `|`, `+` inside brackets, as yapf and black do
at narrow widths; and at a few of them) transforms to the same fused kernel, statement for statement
(its `ast`), as the kernel written on one line; and an internal failure is one located line."""
from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import libcst as cst
import pytest

from syncopy.errors import KernelError
from syncopy.frontend.source import from_file
from syncopy.passes import transform
from syncopy.schedule import load_schedule

GOLDEN = Path(__file__).parents[1] / "golden"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "schedule.yaml").is_file())
BREAKS = {",", "&", "|", "+"}


def rewrap(text: str, kernel: str, every: int = 1) -> str:
    """`text` with a newline (indented under its bracket) after every `every`-th comma or `&`, `|`, `+`
    inside brackets of the kernel's body: the same tokens, so the same program."""
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == kernel)
    first, last = fn.body[0].lineno, fn.end_lineno
    depth, seen, cuts = 0, 0, []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type != tokenize.OP:
            continue
        if tok.string in "([{":
            depth += 1
        elif tok.string in ")]}":
            depth -= 1
        elif depth > 0 and tok.string in BREAKS and first <= tok.start[0] <= last:
            seen += 1
            if seen % every == 0:
                cuts.append(tok.end)
    lines = text.splitlines(keepends=True)
    for row, col in reversed(cuts):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + "\n" + " " * (len(line) - len(line.lstrip()) + 8) + line[col:].lstrip(" ")
    return "".join(lines)


def _fused_ast(path: Path, schedule) -> str:
    t = transform(from_file(str(path), schedule.kernel), schedule)
    return ast.dump(ast.parse(t.code(t.func)))


@pytest.mark.parametrize("every", [1, 3])
@pytest.mark.parametrize("case", CASES)
def test_a_rewrapped_kernel_transforms_to_the_same_fused_kernel(case, every, tmp_path):
    schedule = load_schedule(GOLDEN / case / "schedule.yaml")
    text = (GOLDEN / case / "kernel.py").read_text()
    wrapped = rewrap(text, schedule.kernel, every)
    assert wrapped != text or every > 1, "nothing was wrapped"
    compile(wrapped, "wrapped", "exec")  # still Python
    (tmp_path / "kernel.py").write_text(wrapped)
    assert _fused_ast(tmp_path / "kernel.py", schedule) == _fused_ast(GOLDEN / case / "kernel.py", schedule)


def test_an_internal_failure_is_one_located_line_that_says_it_is_syncopys(tmp_path, monkeypatch):
    from syncopy.frontend import infer

    def broken(*args, **kwargs):
        raise cst.ParserSyntaxError("expected one of +, -", lines=["x"], raw_line=1, raw_column=0)
    monkeypatch.setattr(infer, "_access_names", broken)
    case = "gemm_2d_launch"
    schedule = load_schedule(GOLDEN / case / "schedule.yaml")
    with pytest.raises(KernelError) as got:
        transform(from_file(str(GOLDEN / case / "kernel.py"), schedule.kernel), schedule)
    text = str(got.value)
    assert text.startswith(f"{GOLDEN / case / 'kernel.py'}:") and "\n" not in text
    assert f"internal error in syncopy while transforming '{schedule.kernel}' (ParserSyntaxError: " in text
    assert "this is syncopy's fault, not your kernel's: please report it with the kernel file and the schedule" in text
