"""Golden tests: whole kernel files before and after `syncopy transform` (see test_golden.py)."""
