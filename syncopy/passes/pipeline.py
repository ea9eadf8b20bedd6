"""The pass pipeline: signature -> consumer wait (all_gather) or producer notify (reduce_scatter,
all_reduce) -> tile reorder (+ probe kernel). `transform` returns every stage's artifact so `--dump-dir`
can write them and tests can look at them."""
from __future__ import annotations


import libcst as cst

from syncopy.errors import KernelError, SyncopyError
from syncopy.frontend import cstutil as cu
from syncopy.frontend import helpers
from syncopy.frontend import infer as inference
from syncopy.frontend import persistent as persistent_flow
from syncopy.frontend import scope
from syncopy.frontend.source import KernelSource
from syncopy.passes import consumer_wait, loop_order, names, probe, producer_notify, signature, tile_reorder
from syncopy.passes.transformed import Transformed
from syncopy.schedule.model import IMPLEMENTED_PATTERNS, PRODUCER_PATTERNS, Schedule


def transform(ks: KernelSource, schedule: Schedule) -> Transformed:
    """Run the passes for `schedule` on the kernel in `ks`. A failure that is no refusal of the
    kernel (a SyncopyError) is syncopy's own: one located line saying so and how to report it."""
    try:
        return _transform(helpers.unalias_builtins(helpers.inline_program_ids(ks)), schedule)
    except SyncopyError:
        raise
    except Exception as exc:  # an internal failure: never a traceback out of syncopy's own code for a user
        what = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise KernelError(f"internal error in syncopy while transforming '{ks.name}' ({type(exc).__name__}"
                          f"{': ' + what if what else ''}); this is syncopy's fault, not your kernel's: please report it "
                          "with the kernel file and the schedule (`syncopy transform ... --dump-dir DIR` shows how far it got)",
                          ks.location(ks.func)) from exc


def _transform(ks: KernelSource, schedule: Schedule) -> Transformed:
    if schedule.pattern not in IMPLEMENTED_PATTERNS:
        raise KernelError(
            f"pattern '{schedule.pattern}' is not implemented yet (implemented: {', '.join(IMPLEMENTED_PATTERNS)}); "
            "use pattern: all_gather",
            ks.location(ks.func),
        )
    signature.check_reserved(ks)
    rows = schedule.binding.rows if schedule.binding else None
    before_line = schedule.binding.before_line if schedule.binding else None
    if schedule.pattern in PRODUCER_PATTERNS:
        return _producer(ks, schedule, rows, before_line)
    loops = schedule.loop_order is not None
    binding = inference.infer(ks, schedule.tensors[0], schedule.dim, rows, before_line=before_line, loops=loops)
    others = _other_bindings(ks, schedule, binding)
    stages = {"kernel": ks.code(ks.func), "binding": "".join(_describe(b) for b in (binding, *others))}
    binding, others = _read_first(binding, others)
    if any(o.descriptors for o in others):
        # A listed tensor read through tensor descriptors fences its waits with the kernel's async-proxy
        # flag, which the kernel takes where the tensor it reads first is one such (signature.flags_for).
        binding.descriptors = True
    if binding.persistent is not None:
        from syncopy.passes import persistent

        if schedule.loop_order is not None:
            raise KernelError(f"loop_order applies to kernels with one program per tile, but '{ks.name}' loops over its tiles "
                              f"(line {ks.location(ks.func.body.body[binding.persistent.index]).line}); drop loop_order",
                              ks.location(ks.func))
        return persistent.transform(ks, schedule, binding, stages)

    func = ks.func
    body = list(func.body.body)
    start = inference.body_start(func)
    # Tiles are remapped (and their chunk ranges tabulated by the probe) only if the kernel asks
    # for its program id; a kernel that never does has nothing to reorder.
    no_remap = next((b.no_remap for b in (binding, *others) if b.no_remap), "")
    remaps = tile_reorder.remap_program_ids(ks, body)[1] and not no_remap
    notes = (f"# syncopy: tiles keep their launch order: {no_remap}",) if no_remap else ()
    arrival = loop_order.plan(ks, body, (binding, *others), schedule.loop_order)
    rewrites = {i: (lambda stmt, a=a: loop_order.rewrite(ks, stmt, a)) for i, a in arrival.items()}
    waited = consumer_wait.insert_waits(body, binding, table=remaps, notes=notes, others=tuple(others), loops=rewrites)
    remapped_body, remapped = tile_reorder.remap_program_ids(ks, waited) if remaps else (waited, False)
    head = [_keep_base(b) for b in (binding, *others) if b.copy_base]
    if remapped:
        head.append(tile_reorder.preamble())
    new_body = remapped_body[:start] + head + remapped_body[start:]
    fused = signature.add_params(func.with_changes(body=func.body.with_changes(body=new_body)), flags=signature.flags_for(binding))

    first = binding.groups[0]
    prefix = [_keep_base(binding)] if binding.copy_base else []
    prefix += body[start:first.stmt_index]
    probe_fn = probe.build(signature.add_params(func, flags=signature.flags_for(binding)), prefix, consumer_wait.range_statements(binding, first)) if remapped else None
    t = Transformed(ks, schedule, binding, fused, probe_fn, remapped, stages, others=others)
    stages["fused"] = t.code()
    if probe_fn is not None:
        stages["probe"] = t.code(probe_fn)
    return t


def _other_bindings(ks: KernelSource, schedule: Schedule, main: inference.TensorBinding) -> list[inference.TensorBinding]:
    """The bindings of the listed tensors after the first; each wait reads its own context block."""
    if len(schedule.tensors) == 1:
        return []
    for what, refused in (("binding:", schedule.binding is not None), ("a persistent kernel", main.persistent is not None)):
        if refused:
            raise KernelError(f"a list of communicated tensors ({', '.join(schedule.tensors)}) cannot be combined with {what} "
                              "yet; name one tensor", ks.location(ks.func))
    out = []
    for i, name in enumerate(schedule.tensors[1:], start=1):
        b = inference.infer(ks, name, schedule.dim, loops=schedule.loop_order is not None)
        if b.persistent is not None:
            raise KernelError(f"'{name}' is read in a persistent loop; a list of communicated tensors needs one program per tile; "
                              "name one tensor", ks.location(ks.func))
        b.ctx = names.ctx_of(i)
        out.append(b)
    # Each listed tensor its own base (a kernel that moves its pointers, `X += row * N`, measures the
    # rows it reads from where each argument started, not from where the first listed one did).
    for b in (main, *out):
        if b.copy_base:
            b.base = names.base_of(b.tensor)
            _rename_base(b)
    return out


def _rename_base(b: inference.TensorBinding) -> None:
    """A descriptor made from the tensor's own start (`K = make(K, ...)`) reads it from the base name
    inference wrote (infer.BASE_NAME): the listed tensor's own one now."""
    for g in b.groups:
        for a in g.accesses:
            if a.desc is not None and inference.BASE_NAME in cu.names_in(cst.parse_expression(a.desc[0])):
                a.desc = (cu.substitute(cst.Module(body=[]), cst.parse_expression(a.desc[0]), {inference.BASE_NAME: b.base}),
                          *a.desc[1:])


def _read_first(main: inference.TensorBinding, others: list[inference.TensorBinding]) \
        -> tuple[inference.TensorBinding, list[inference.TensorBinding]]:
    """The listed tensor the kernel reads first, and the others: the first one's first wait starts the
    tile and is the one the tile order table stands for, whatever the order of the list (each wait
    keeps its own context block, so the list order says only which block is whose). Within one
    statement, the read written first (line, then column: the same however the statement is wrapped);
    the kernel is the same for every order of the list."""
    if not others:
        return main, others
    ordered = sorted((main, *others), key=lambda b: (b.groups[0].stmt_index, b.groups[0].at, b.groups[0].line, b.tensor))
    return ordered[0], ordered[1:]


def _keep_base(b: inference.TensorBinding) -> cst.BaseStatement:
    """`syncopy_base = X` before anything moves X: where the tensor starts, for its waits."""
    return cst.parse_statement(f"{b.base} = {b.tensor}\n")


def _producer(ks: KernelSource, schedule: Schedule, rows: str | None, before_line: int | None = None) -> Transformed:
    """reduce_scatter / all_reduce: announce each chunk once every tile writing it has stored.

    Every tile is remapped (tiles finish in the order their chunks are sent) and counted, so the
    probe is required: it tells the runtime how many tiles write each chunk."""
    binding = inference.infer(ks, schedule.tensor, schedule.dim, rows, writes=True, before_line=before_line)
    stages = {"kernel": ks.code(ks.func), "binding": _describe(binding, "notify after")}
    func = ks.func
    body = list(func.body.body)
    start = inference.body_start(func)
    prefix = [cst.parse_statement(f"{inference.BASE_NAME} = {binding.tensor}\n")] if binding.copy_base else []
    prefix += producer_notify.probe_body(body, binding, start)
    pointers = persistent_flow.forward(func, set(scope.pointer_params(ks)))
    fresh = producer_notify.depends_on_data(prefix, ks.module, pointers)
    notified = producer_notify.insert_notifies(body, binding, table=True, fresh=fresh)
    remapped_body, remapped = tile_reorder.remap_program_ids(ks, notified)
    if not remapped and helpers.program_id_helper(ks):
        raise KernelError(
            f"kernel '{ks.name}' takes its program id only from a helper ({helpers.program_id_helper(ks)}), which the "
            "tile remap cannot reach; call tl.program_id(axis) in the kernel itself",
            ks.location(func),
        )
    if not remapped:
        raise KernelError(
            f"kernel '{ks.name}' never calls tl.program_id, so every program would write the same rows of "
            f"{schedule.named}; {'an' if schedule.pattern[0] in 'aeiou' else 'a'} {schedule.pattern} kernel must split its output over programs",
            ks.location(func),
        )
    head: list[cst.BaseStatement] = []
    if binding.copy_base:
        head.append(cst.parse_statement(f"{inference.BASE_NAME} = {binding.tensor}\n"))
    head.append(tile_reorder.preamble("run tiles in chunk-send order"))
    head.append(cst.parse_statement(f"{names.DEVICE}.trace_tile_start({names.SIGNALS}, {names.TRACE}, {names.CTX}, {names.TRACE_FLAG})\n"))
    new_body = remapped_body[:start] + head + remapped_body[start:]
    fused = signature.add_params(func.with_changes(body=func.body.with_changes(body=new_body)), flags=signature.flags_for(binding))
    probe_fn = probe.build(signature.add_params(func, flags=signature.flags_for(binding)), prefix, [])
    if probe_fn is None:
        raise KernelError(
            f"kernel '{ks.name}' uses the value of an atomic before its stores into {schedule.named}; syncopy "
            "cannot run its address arithmetic alone to count the tiles per chunk; compute the addresses first",
            ks.location(func),
        )
    t = Transformed(ks, schedule, binding, fused, probe_fn, True, stages, fresh_probe=fresh)
    stages["fused"] = t.code()
    stages["probe"] = t.code(probe_fn)
    return t


def _describe(b: inference.TensorBinding, where: str = "wait before") -> str:
    lines = [f"tensor {b.tensor} dim {b.dim} base {b.base}"]
    for g in b.groups:
        lines.append(f"{where} line {g.line}" + (f" (inside its loop: {g.why})" if g.nested else "") + ":")
        lines += [("  every chunk" if a.every else f"  rows of {a.pointer}" + (f" where {a.mask}" if a.mask else ""))
                  + "".join(f" if {t}" if arm else f" if not ({t})" for t, arm in a.guard)
                  for a in g.accesses]
    if b.no_remap:
        lines.append(f"tiles not remapped ({b.no_remap})")
    if b.explicit_rows:
        lines.append(f"explicit rows: {b.explicit_rows}")
    return "\n".join(lines) + "\n"

