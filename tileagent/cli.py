"""The ``tileagent`` command line (typer + rich).

Exit codes: 0 success; 1 the program ran but its check failed; 2 bad input (file, arguments, compile error).
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from compiler.diagnostics import CompileError

app = typer.Typer(help="TileAgent: verified GPU kernels from PyTorch references, in a TileLang-compatible DSL.",
                  no_args_is_help=True, add_completion=False)
console = Console()
err_console = Console(stderr=True)

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _load_module(path: Path):
    if not path.is_file():
        err_console.print(f"[red]error:[/] no such file: {path}")
        raise typer.Exit(EXIT_BAD_INPUT)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
    except CompileError as e:
        err_console.print(str(e))
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except SyntaxError as e:
        err_console.print(f"[red]error:[/] {path}:{e.lineno}: syntax error: {e.msg}")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    return module


def _parse_params(params: list[str]) -> dict:
    out = {}
    for p in params:
        key, sep, value = p.partition("=")
        if not sep:
            err_console.print(f"[red]error:[/] --param expects key=value, got {p!r}")
            raise typer.Exit(EXIT_BAD_INPUT)
        try:
            out[key] = int(value)
        except ValueError:
            out[key] = {"true": True, "false": False}.get(value.lower(), value)
    return out


@app.command(help="Run a DSL program's check(): build its kernel, run it, compare with its torch reference.\n\n"
                  "Example: tileagent run prompts/examples/rmsnorm_silu.py --device cpu -p M=1000 -p C=320")
def run(program: Path = typer.Argument(..., help="a .py file defining check(device=..., **sizes)"),
        device: str = typer.Option("cpu", help="cpu (the interpreter) or cuda"),
        param: list[str] = typer.Option([], "--param", "-p", help="keyword for check(), as key=value"),
        show_ir: bool = typer.Option(False, "--show-ir", help="print the kernel's tile IR"),
        verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    module = _load_module(program)
    check = getattr(module, "check", None)
    if check is None:
        err_console.print(f"[red]error:[/] {program} defines no check() function")
        raise typer.Exit(EXIT_BAD_INPUT)
    kwargs = _parse_params(param)
    start = time.perf_counter()
    try:
        kernel = check(device=device, **kwargs)
    except CompileError as e:
        err_console.print(str(e))
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except AssertionError as e:
        err_console.print(f"[red]mismatch:[/] {e}")
        raise typer.Exit(EXIT_CHECK_FAILED) from None
    elapsed = time.perf_counter() - start
    if show_ir and kernel is not None:
        console.print(kernel.get_ir("tile"), markup=False, highlight=False, soft_wrap=True)
    table = Table(title=f"{program.name}")
    for col in ("device", "parameters", "result", "wall time"):
        table.add_column(col)
    table.add_row(device, ", ".join(f"{k}={v}" for k, v in kwargs.items()) or "defaults",
                  "[green]matches reference[/]", f"{elapsed:.2f} s")
    console.print(table)


@app.command(help="Print the version.")
def version() -> None:
    from compiler import __version__

    console.print(__version__)


if __name__ == "__main__":
    app()
