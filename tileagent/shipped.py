"""The reference tasks shipped with TileAgent, found from any directory.

In: a task name (``rmsnorm_silu``, ``rmsnorm_silu.py``) or a path. Out: the task file's path (``find_task``,
``resolve_reference``), the shipped names (``task_names``) and one line about each (``describe``).
Where: ``$TILEAGENT_TASKS`` when set; else the ``tasks/`` folder of the checkout this package runs from (an editable
install or ``PYTHONPATH``); else the installed package data ``tileagent/tasks/`` (a wheel maps ``tasks/`` there,
pyproject's ``package-dir``).
Guarantees: a path that exists always wins over a shipped task of the same name; an unknown name raises
``UnknownTask`` listing the shipped names.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from tileagent.compiler import python_ast


class UnknownTask(FileNotFoundError):
    """Neither a file nor a shipped task (the message lists the shipped tasks)."""


def tasks_dir() -> Path:
    """Where the shipped tasks are (see the module docstring)."""
    env = os.environ.get("TILEAGENT_TASKS")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    installed = here / "tasks"
    return installed if installed.is_dir() else here.parent / "tasks"


def task_names() -> list[str]:
    """The shipped tasks' names, sorted."""
    d = tasks_dir()
    return sorted(p.stem for p in d.glob("*.py") if not p.name.startswith("_")) if d.is_dir() else []


def find_task(name: str) -> Path | None:
    """The shipped task called ``name`` (with or without ``.py``), or None."""
    stem = name[:-3] if name.endswith(".py") else name
    if not stem.isidentifier():
        return None
    path = tasks_dir() / f"{stem}.py"
    return path if path.is_file() else None


def resolve_reference(text: str | Path) -> Path:
    """``text`` as a reference file: an existing path, else a shipped task's name (``rmsnorm_silu``, or
    ``tasks/rmsnorm_silu.py`` typed outside the checkout). Raises UnknownTask."""
    path = Path(text)
    if path.is_file():
        return path
    if path.parent in (Path("."), Path("tasks")):
        found = find_task(path.name)
        if found is not None:
            return found
    names = ", ".join(task_names()) or "none found"
    raise UnknownTask(f"no such file: {text} (and no shipped task of that name; shipped: {names}; "
                      f"`tileagent tasks` lists them)")


def describe(path: Path) -> str:
    """The first line of the task's module docstring ('' when it has none)."""
    try:
        doc = ast.get_docstring(python_ast.parse(Path(path).read_text())) or ""
    except (OSError, SyntaxError):
        return ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


__all__ = ["UnknownTask", "describe", "find_task", "resolve_reference", "task_names", "tasks_dir"]
