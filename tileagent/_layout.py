"""Where ``tileagent.compiler`` and ``tileagent.evaluator`` come from.

The source tree keeps the compiler and the evaluator in the top-level folders ``compiler/`` and ``evaluator/``; an
installed wheel puts them inside the ``tileagent`` package (pyproject's ``package-dir``), so no generic top-level name
(``compiler``, ``evaluator``) lands in site-packages. Running from a checkout (``PYTHONPATH=.``, an editable install),
the two folders sit beside ``tileagent/`` instead: this adds them to the package's search path, so that
``import tileagent.compiler`` finds ``compiler/`` in both layouts and nothing else becomes importable.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

SUBPACKAGES = ("compiler", "evaluator")


class _SiblingFinder(importlib.abc.MetaPathFinder):
    """Finds ``tileagent.<name>`` (and its submodules through the package's own path) in the checkout's ``<name>/``."""

    def __init__(self, root: Path):
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        prefix, _, name = fullname.partition(".")
        if prefix != "tileagent" or name not in SUBPACKAGES:
            return None
        folder = self.root / name
        return importlib.util.spec_from_file_location(fullname, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])


def mount_sibling_packages(package_path: list[str]) -> None:
    """Make ``tileagent.compiler`` / ``tileagent.evaluator`` importable when they are not inside the package."""
    here = Path(package_path[0])
    if all((here / name / "__init__.py").is_file() for name in SUBPACKAGES):
        return  # installed layout
    root = here.parent
    if not all((root / name / "__init__.py").is_file() for name in SUBPACKAGES):
        raise ImportError(f"tileagent: neither {here}/compiler nor {root}/compiler exists; reinstall tileagent")
    if not any(isinstance(f, _SiblingFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SiblingFinder(root))
