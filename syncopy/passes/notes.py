"""What the passes decided, as the `# syncopy:` notes of a transformed kernel say it: each note at the
line of the user's file it stands before (`syncopy explain KERNEL.py`), and the fallbacks among them
that cost overlap, said once per operator or refused under `strict` (issue 31: no silent fallback)."""
from __future__ import annotations


def kernel_notes(t) -> list[tuple[int | None, str]]:
    """(line of the user's file, comment) for every distinct `# syncopy:` comment of transformed
    kernel `t` (passes/transformed.py), in source order. The line is that of the first user line the
    comment stands before (the passes keep every user line as it was); None where none follows."""
    ks = t.source
    user = ks.module.code.splitlines()
    at = ks.location(ks.func.body).line - ks.line_offset - 1  # module lines are matched in order from the body on
    fused = t.code().splitlines()
    out: list[tuple[int | None, str]] = []
    for i, line in enumerate(fused):
        text = line.strip()
        if not text.startswith("# syncopy:") or any(text[2:] == seen for _, seen in out):
            continue
        where = None
        for later in fused[i + 1:]:
            if later.strip() and not later.strip().startswith("#"):
                hit = next((j for j in range(at, len(user)) if user[j] == later), None)
                if hit is not None:
                    where, at = hit + 1 + ks.line_offset, hit
                    break
        out.append((where, text[2:]))
    return out


#: The `# syncopy:` notes of a fallback that costs overlap (SyncopyFallbackWarning).
FALLBACKS = ("wait for every chunk", "tiles keep their", "one wait before the loop")


def fallbacks(t) -> list[tuple[int | None, str]]:
    """(line, note) of each fallback of transformed kernel `t` that costs overlap: a tile that waits
    for every chunk, tiles kept in their launch order, a loop whose pointer steps by constexprs only
    (one wait before it for every iteration's rows)."""
    return [(line, note[len("syncopy: "):]) for line, note in kernel_notes(t) if note[len("syncopy: "):].startswith(FALLBACKS)]


def report_fallbacks(t, strict: bool) -> None:
    """Warn once (SyncopyFallbackWarning) for each fallback of `t` that costs overlap, or, `strict`,
    refuse the first in one located line (KernelError)."""
    import warnings

    from syncopy.errors import KernelError, SourceLocation, SyncopyFallbackWarning

    ks = t.source
    for line, note in fallbacks(t):
        where = f"{ks.path}:{line}" if line is not None else str(ks.location(ks.func))
        if strict:
            raise KernelError(f"'{ks.name}' would run with less overlap than asked: {note} (strict=True refuses what "
                              "costs overlap; `syncopy explain KERNEL.py --schedule S.yaml` lists every decision)",
                              SourceLocation(ks.path, line, 1) if line is not None else ks.location(ks.func))
        warnings.warn(f"{where}: '{ks.name}': {note} (pass strict=True to refuse this)", SyncopyFallbackWarning, stacklevel=2)
