"""The version of syncopy (pyproject.toml says the same): what a transformed file records and checks."""
__version__ = "0.1.0"
