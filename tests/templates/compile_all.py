"""`syncopy compile NAME --arch ARCH -o DIR/NAME-ARCH.ptx` for several templates and targets in one
process without the interpreter (one interpreter start and one import of torch, triton and syncopy
for them all, where a process each cost seconds): `python -m tests.templates.compile_all DIR
NAME:ARCH ...` writes next to each .ptx what the command wrote to stderr (.err) and returned (.rc)."""
from __future__ import annotations

import contextlib
import io
import sys
import traceback
from pathlib import Path


def main(out_dir: str, pairs: list[str]) -> None:
    from syncopy.cli import main as cli

    for pair in pairs:
        name, arch = pair.split(":")
        base = Path(out_dir) / f"{name}-{arch}"
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                rc = cli(["compile", name, "--arch", arch, "-o", f"{base}.ptx"])
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else 1
            except Exception:  # as the command's own process would: a traceback on stderr, exit status 1
                traceback.print_exc()
                rc = 1
        Path(f"{base}.err").write_text(err.getvalue())
        Path(f"{base}.rc").write_text(str(rc))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
