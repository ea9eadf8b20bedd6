"""Emit: Python source (file rewrite, standalone cached module) and, in ptx.py, PTX for checks."""
from syncopy.emit.source import cache_dir, dump, load, rewrite_file, standalone_module

__all__ = ["rewrite_file", "standalone_module", "load", "dump", "cache_dir"]
