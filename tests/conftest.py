"""Test setup: the Triton interpreter runs kernels on CPU, and generated modules go to a temp cache."""
import os
import tempfile

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("SYNCOPY_CACHE_DIR", tempfile.mkdtemp(prefix="syncopy-test-cache-"))
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
