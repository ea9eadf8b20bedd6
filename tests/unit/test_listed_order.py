"""Issue 30 part B without ranks: with several communicated tensors (`tensor: [A, B]`) every listed
tensor waits on its own rows, measured from its own base pointer, through its own context block, and
is checked in checked mode; the order of the list changes nothing but which context block is whose.
The kernels are tests/kernels/listed.py's (CPU worlds: tests/world/test_listed_tensors.py).

Before the fix a kernel that moves its pointers (`A += row0 * N`) measured every listed tensor's
rows from `syncopy_base`, the first listed tensor's start (or from a name never assigned where the
first listed tensor is not moved: NameError at the first launch), and checked mode checked the
first listed tensor only.
"""
from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

from syncopy.frontend.source import from_file
from syncopy.passes import names, read_check, transform
from syncopy.schedule import loads
from tests.kernels import listed
from tests.world.listed_workers import CASES

KERNELS = Path(listed.__file__)
ORDERS = [(kernel, order) for kernel, (tensors, _) in CASES.items() for order in itertools.permutations(tensors)]
IDS = [f"{kernel}[{','.join(order)}]" for kernel, order in ORDERS]
MOVED = {"swiglu_fwd": {"A", "B"}, "dequant_rows": {"Q", "S"}, "layernorm_residual": {"X", "RESIDUAL"},
         "layernorm_scaled": {"X", "RESIDUAL"}}  # the listed tensors each kernel moves (`X += row * N`)


def _schedule(order) -> object:
    return loads(f"pattern: all_gather\ntensor: [{', '.join(order)}]\ndim: 0\nchunks_per_rank: 2\n")


def _transformed(kernel: str, order, checked: bool = False):
    t = transform(from_file(KERNELS, kernel), _schedule(order))
    return read_check.apply(t) if checked else t


def _calls(code: str, name: str) -> list[list[str]]:
    """The arguments (as code) of every call of syncopy_device.<name> in `code`."""
    tree = ast.parse(code)
    return [[ast.unparse(a) for a in node.args] for node in ast.walk(tree)
            if isinstance(node, ast.Call) and ast.unparse(node.func) == f"{names.DEVICE}.{name}"]


def _ctx(order, tensor: str) -> str:
    return names.ctx_of(list(order).index(tensor)).strip("()")


@pytest.mark.parametrize("kernel, order", ORDERS, ids=IDS)
def test_every_listed_tensor_waits_from_its_own_base_through_its_own_block(kernel, order):
    code = _transformed(kernel, order).code()
    seen = set()
    ranges = [(a[0], a[-3], a[-2]) for name in ("chunk_range", "chunk_range_masked", "chunk_range_affine") for a in _calls(code, name)]
    ranges += [(a[0], a[-2], a[-1]) for a in _calls(code, "desc_chunk_range")]  # (descriptor base, ..., base, ctx)
    for pointer, base, ctx in ranges:
        args = (pointer, base, ctx)
        tensor = next(t for t in order if re.search(rf"\b{t}\b", pointer))
        assert base == (names.base_of(tensor) if tensor in MOVED.get(kernel, ()) else tensor), (tensor, args)
        assert ctx.strip("()") == _ctx(order, tensor), (tensor, args)
        seen.add(tensor)
    assert seen == set(order)
    # Every base a wait measures from is assigned before anything moves the tensor.
    for tensor in MOVED.get(kernel, ()):
        assert f"    {names.base_of(tensor)} = {tensor}\n" in code
    assert "syncopy_base " not in code and "syncopy_base," not in code
    # No wait is taken to cover another tensor's rows (unproven): each listed tensor after the one read
    # first waits before its own first read, and says so.
    for tensor in order:
        note = f"# syncopy: {tensor} waits for its own rows: no earlier wait is proven to cover them"
        assert (note in code) == (tensor != CASES[kernel][0][0]), (tensor, code)


@pytest.mark.parametrize("kernel", list(CASES))
def test_the_order_of_the_list_changes_only_whose_block_is_whose(kernel):
    """Every order of the list gives the same kernel once each context block is named by its tensor:
    the same waits in the same places, the same tile that starts a tile (and that the table stands
    for: the tensor read first), the same remap."""
    def normalised(order) -> str:
        def named(line: str) -> str:
            if line.lstrip().startswith("def ") or "trace_tile_start(" in line:  # (the trace reads block 0's epoch)
                return line
            line = re.sub(r"\(syncopy_ctx \+ (\d+)\)", lambda m: f"<ctx of {order[int(m.group(1)) // names.CTX_WORDS]}>", line)
            return re.sub(r"\bsyncopy_ctx\b", f"<ctx of {order[0]}>", line)

        return "\n".join(named(line) for line in _transformed(kernel, order).code().splitlines())

    texts = {order: normalised(order) for order in itertools.permutations(CASES[kernel][0])}
    first = next(iter(texts.values()))
    assert all(text == first for text in texts.values()), kernel
    # The tile starts at the wait for the tensor the kernel reads first; the table stands for it.
    read_first = CASES[kernel][0][0]
    lines = first.splitlines()
    table = next(i for i, line in enumerate(lines) if "if SYNCOPY_TABLE:" in line) if "if SYNCOPY_TABLE:" in first else None
    if table is not None:
        assert re.search(rf"\b{read_first}\b", lines[table + 3]), lines[table - 1:table + 5]


@pytest.mark.parametrize("kernel, order", [("layernorm_scaled", o) for o in itertools.permutations(("ROWSCALE", "X", "RESIDUAL"))],
                         ids=lambda v: ",".join(v) if isinstance(v, tuple) else v)
def test_three_listed_tensors_make_a_kernel_that_defines_every_name_it_uses(kernel, order):
    # Formerly: NameError: name 'syncopy_base' is not defined, at the first launch.
    tree = ast.parse(_transformed(kernel, order).code())
    func = tree.body[0]
    params = {a.arg for a in func.args.args}
    assigned = {t.id for node in ast.walk(func) if isinstance(node, (ast.Assign, ast.AugAssign))
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) for t in ast.walk(t)
                if isinstance(t, ast.Name)}
    used = {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    missing = {n for n in used - params - assigned if n.startswith("syncopy_") and n != names.DEVICE}
    assert not missing


@pytest.mark.parametrize("kernel, order", ORDERS, ids=IDS)
def test_checked_mode_checks_every_listed_tensor_from_its_own_base_and_block(kernel, order):
    t = _transformed(kernel, order, checked=True)
    checks = [(a[1], a[2], a[4], int(a[5])) for a in _calls(t.stages["fused"], "check_read")]
    checks += [(a[1], a[2], a[8], int(a[9])) for a in _calls(t.stages["fused"], "check_desc_read")]  # (.., desc base, row, .., base, line)
    text = KERNELS.read_text().splitlines()
    per_tensor = {}
    for ctx, pointer, base, line in checks:
        args = (ctx, pointer, base, line)
        index, line = divmod(line, read_check.LISTED_LINES)
        tensor = order[index]
        assert re.search(rf"\b({tensor}|{tensor.lower()}_desc|P|Q)\b", text[line - 1]), (tensor, args, text[line - 1])
        if pointer.startswith("P ") or kernel == "swiglu_pair" and pointer.startswith("Q "):  # in a helper's checked copy
            # (swiglu_pair's _silu_mul is handed both: one (context, base) pair each, in list order)
            j = index if kernel == "swiglu_pair" else 0
            assert base == read_check._base_param(j) and ctx == read_check._ctx_param(j), (tensor, args)
        else:
            assert re.search(rf"\b{tensor}\b", pointer), (tensor, args)
            assert ctx.strip("()") == _ctx(order, tensor)
            assert base == (names.base_of(tensor) if tensor in MOVED.get(kernel, ()) else tensor)
        per_tensor[tensor] = per_tensor.get(tensor, 0) + 1
    # One check per load of each listed tensor in the user's kernel.
    source = ast.parse(KERNELS.read_text())
    func = next(n for n in source.body if isinstance(n, ast.FunctionDef) and n.name == kernel)
    loads_of = {tensor: sum(1 for n in ast.walk(func) if isinstance(n, ast.Call) and (
        ast.unparse(n.func) == "tl.load" and re.search(rf"\b{tensor}\b", ast.unparse(n.args[0]))
        or ast.unparse(n.func) == f"{tensor.lower()}_desc.load"
        or ast.unparse(n.func) == "_rows_of" and ast.unparse(n.args[0]) == tensor
        or ast.unparse(n.func) == "_silu_mul" and tensor in map(ast.unparse, n.args[:2]))) for tensor in order}
    assert per_tensor == loads_of
    assert f"# syncopy: checked: the chunks of {order[-1]} this read touches have arrived" in t.stages["fused"]
    # A helper handed a listed tensor is called through a checked copy with that tensor's block and base.
    for tensor in order:
        if kernel == "swiglu_helper":
            assert re.search(rf"= syncopy_checked__rows_of(_1)?\({tensor}, row0, M, N, BR, syncopy_signals=syncopy_signals, "
                             rf"syncopy_ctx={re.escape(names.ctx_of(order.index(tensor)))}, syncopy_check_base={tensor}\)",
                             t.stages["fused"]), tensor


def test_a_violation_names_the_listed_tensor_whose_read_it_was():
    from syncopy import device as dev

    class plan:
        chunks_per_rank = 2

    class ctx:
        schedule = _schedule(("ROWSCALE", "X", "RESIDUAL"))

        @staticmethod
        def unwrap(word):
            return word

    ctx.plan = plan
    flag = dev.CHECK_BASE.value + 2 * (2 * read_check.LISTED_LINES + 97)
    err = read_check.violation(ctx, [flag, 1, 3, 4], "k.py")
    assert err.render() == ("k.py:97: rank 1 read chunk (1, 1) of RESIDUAL before it arrived (epoch 4); if the schedule "
                            "gives binding.rows, make it cover every row this line touches; otherwise report the kernel "
                            "and schedule (syncopy's wait or count missed this access)")
    first = read_check.violation(ctx, [dev.CHECK_BASE.value + 2 * 97, 1, 3, 4], "k.py")
    assert "of ROWSCALE before" in first.render()


TWO_IN_ONE_HELPER = '''\
import triton
import triton.language as tl


@triton.jit
def _silu_mul(P, Q, offs, m):
    a = tl.load(P + offs, mask=m, other=0.0)
    return a * tl.sigmoid(a) * tl.load(Q + offs, mask=m, other=0.0)


@triton.jit
def swiglu_pair(A, B, Y, M, N: tl.constexpr, BR: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    offs = r[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(Y + offs, _silu_mul(A, B, offs, r[:, None] < M), mask=r[:, None] < M)
'''


@pytest.mark.parametrize("order", [("A", "B"), ("B", "A")], ids=",".join)
def test_a_helper_handed_two_listed_tensors_waits_for_both_and_one_checked_copy_checks_each(tmp_path, order):
    path = tmp_path / "pair.py"
    path.write_text(TWO_IN_ONE_HELPER)
    t = transform(from_file(path, "swiglu_pair"), _schedule(order))
    code = t.code()
    assert "wait for the chunks of A" in code and "wait for the chunks of B" in code
    checked = read_check.apply(t).stages["fused"]
    # One copy, the listed tensors' (context, base) pairs in list order; each read checked from its own.
    ctx = {order[0]: "syncopy_ctx", order[1]: "(syncopy_ctx + 8)"}
    assert ("tl.store(Y + offs, syncopy_checked__silu_mul(A, B, offs, r[:, None] < M, syncopy_signals=syncopy_signals, "
            f"syncopy_ctx={ctx[order[0]]}, syncopy_check_base={order[0]}, syncopy_ctx_1={ctx[order[1]]}, "
            f"syncopy_check_base_1={order[1]}), mask=r[:, None] < M)") in checked, checked
    assert ("def syncopy_checked__silu_mul(P, Q, offs, m, syncopy_signals, syncopy_ctx, syncopy_check_base, syncopy_ctx_1, "
            "syncopy_check_base_1):") in checked
    param = {order[0]: ("syncopy_ctx", "syncopy_check_base", 0), order[1]: ("syncopy_ctx_1", "syncopy_check_base_1", 1)}
    for tensor, pointer, line in (("A", "P", 7), ("B", "Q", 8)):
        c, base, index = param[tensor]
        assert (f"    # syncopy: checked: the chunks of {tensor} this read touches have arrived\n"
                f"    syncopy_device.check_read(syncopy_signals, {c}, {pointer} + offs, m, {base}, "
                f"{line + index * read_check.LISTED_LINES}, True)\n") in checked, checked
    assert checked.count("syncopy_device.check_read(") == 2


def test_a_helpers_read_through_a_parameter_handed_two_listed_tensors_is_refused_in_checked_mode_in_one_line(tmp_path):
    from syncopy.errors import KernelError

    path = tmp_path / "pair.py"
    path.write_text(TWO_IN_ONE_HELPER.replace("_silu_mul(A, B, offs, r[:, None] < M)", "_silu_mul(A, A + (B - A), offs, r[:, None] < M)"))
    t = transform(from_file(path, "swiglu_pair"), _schedule(("A", "B")))
    with pytest.raises(KernelError) as err:
        read_check.apply(t)
    assert str(err.value) == (f"{path}:8:32: checked mode cannot tell whether this read of a helper reads A or B: its "
                              "pointer is computed from parameters handed both; hand each listed tensor in a parameter of "
                              "its own and read each through its own, or launch without checked mode")
