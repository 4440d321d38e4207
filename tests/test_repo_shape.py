"""Size and documentation discipline (STYLE.md): small modules, each stating what it takes and guarantees."""

import ast

import pytest

from tests.conftest import REPO

MAX_LINES = 800
MODULES = sorted(p for pkg in ("compiler", "tileagent", "evaluator") for p in (REPO / pkg).rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_module_is_small_and_documented(path):
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_LINES, f"{path} has more than {MAX_LINES} lines"
    if path.name not in ("__main__.py",):
        assert ast.get_docstring(ast.parse(text)), f"{path} has no module docstring"


def test_every_diagnostic_code_is_documented():
    from tileagent.compiler.diagnostics import CODES

    doc = (REPO / "docs" / "dsl.md").read_text()
    missing = [code for code in CODES if f"`{code}`" not in doc]
    assert not missing, f"codes missing from docs/dsl.md: {missing}"


def test_every_package_folder_is_installed_under_the_tileagent_namespace():
    import tomllib

    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {"tileagent": "tileagent", "compiler": "tileagent.compiler", "evaluator": "tileagent.evaluator"}
    found = {folders[init.relative_to(REPO).parts[0]] + "".join("." + p for p in init.relative_to(REPO).parts[1:-1])
             for top in folders for init in (REPO / top).rglob("__init__.py")}
    data_only = {"tileagent.tasks"}  # tasks/: package data (no __init__.py), listed so that a wheel ships it
    assert found == set(meta["packages"]) - data_only
    assert all(meta["package-dir"][p] and (REPO / meta["package-dir"][p]).is_dir() for p in data_only)
    assert not any(name.split(".")[0] in ("compiler", "evaluator") for name in meta["packages"])


def test_python_source_is_parsed_under_the_shared_lock():
    """A batch parses references and candidates on several threads; CPython 3.11's AST conversion is not thread-safe
    (compiler/python_ast.py), so every product parse goes through its lock."""
    direct = [f"{p.relative_to(REPO)}:{n}" for p in MODULES if p.name != "python_ast.py"
              for n, line in enumerate(p.read_text().splitlines(), 1) if "ast.parse(" in line.replace("python_ast.", "")]
    assert not direct, f"ast.parse outside compiler/python_ast.py: {direct}"
