"""Only what pyproject.toml cannot say: the package list is syncopy's packages, found as they come,
plus the template library (templates/, mapped to syncopy.templates by pyproject's package-dir),
which a find under syncopy/ cannot see."""
from setuptools import find_packages, setup

setup(packages=find_packages(include=["syncopy", "syncopy.*"]) + ["syncopy.templates"])
