"""The template library of a source checkout: templates/ sits next to syncopy/ in the repository,
and installs as syncopy.templates (pyproject.toml's package-dir maps it for wheels and editable
installs). A checkout used straight from sys.path (PYTHONPATH=the repository, or a copy of it on a
device machine) has no such mapping: this finder gives it one, and stands aside wherever the package
carries its own templates/ (a wheel)."""
from __future__ import annotations

import sys
from importlib.abc import MetaPathFinder
from importlib.util import spec_from_file_location
from pathlib import Path

PACKAGE = "syncopy.templates"


class TemplatesBesidePackage(MetaPathFinder):
    def __init__(self, folder: Path):
        self.folder = folder

    def find_spec(self, fullname, path=None, target=None):
        if fullname != PACKAGE:
            return None
        return spec_from_file_location(PACKAGE, self.folder / "__init__.py", submodule_search_locations=[str(self.folder)])


def install(package_dir: Path) -> None:
    """Let `import syncopy.templates` find `package_dir/../templates` when syncopy/ has none of its own."""
    folder = package_dir.parent / "templates"
    if (package_dir / "templates").is_dir() or not (folder / "__init__.py").is_file():
        return
    # First in line: an editable install's finder made for another checkout must not answer instead.
    if not any(isinstance(f, TemplatesBesidePackage) for f in sys.meta_path):
        sys.meta_path.insert(0, TemplatesBesidePackage(folder))
