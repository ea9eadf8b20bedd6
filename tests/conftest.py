"""Test setup: the Triton interpreter runs kernels on CPU, and generated modules go to a temp cache."""
import os
import tempfile

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("SYNCOPY_CACHE_DIR", tempfile.mkdtemp(prefix="syncopy-test-cache-"))
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
# The watchdog's stderr line about a failed launch nobody raised (runtime/streams/watchdog.py) would land in
# whatever test runs a second later; tests/unit/test_watchdog.py turns it on where it is the subject.
os.environ.setdefault("SYNCOPY_ASYNC_ERRORS", "off")


def pytest_collection_finish(session):
    """The shared CPU worlds (tests/world/shared.py) run the jobs of the selected tests' files only, and
    the one compiling process of tests/ptx (subprocess_compile.py) compiles for those files only."""
    import sys

    selected = {item.module.__name__ for item in session.items if getattr(item, "module", None) is not None}
    for name in ("tests.world.shared", "tests.ptx.subprocess_compile"):
        registry = sys.modules.get(name)
        if registry is not None:
            registry.selected_modules = selected
