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


EVALUATE_FN = "evaluator.worker:evaluate"  # what the eval worker runs per request (tests substitute a fake)
_NOT_CORRECT = {"mismatch", "guard_violation", "compile_error", "candidate_error", "timeout", "crash",
                "internal_error"}


def _parse_overrides(items: list[str]) -> dict:
    """``k=v`` items -> {k: v}; ``k=a,b`` -> {k: [a, b]} (one config per value)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            err_console.print(f"[red]error:[/] --config expects key=value, got {item!r}")
            raise typer.Exit(EXIT_BAD_INPUT)
        values = [_parse_params([f"{key}={v}"])[key] for v in value.split(",")]
        out[key] = values if len(values) > 1 else values[0]
    return out


def _ms(t) -> str:
    return f"{t.median_ms:.4f} ±{t.iqr_ms:.4f}" if t is not None else "-"


def _eval_table(result, title: str) -> Table:
    timed = any(c.candidate is not None for c in result.configs)
    cols = ["config", "correct", "max err"] + (["ms ±IQR", "eager ms", "compile ms", "x eager", "x compile",
                                                   "% roofline"] if timed else [])
    table = Table(title=title)
    for col in cols:
        table.add_column(col, justify="left" if col in ("config", "correct") else "right", no_wrap=True)
    for c in result.configs:
        row = [" ".join(f"{k}={v}" for k, v in c.config.items()), "[green]yes[/]" if c.correct else "[red]no[/]",
               f"{c.max_abs_err:.2e}" if c.max_abs_err is not None else "-"]
        if timed:
            row += [_ms(c.candidate), _ms(c.eager), _ms(c.compiled),
                    f"{c.speedup_eager:.2f}" if c.speedup_eager else "-",
                    f"{c.speedup_compiled:.2f}" if c.speedup_compiled else "-",
                    f"{c.roofline_pct:.0f}% {c.bound}" if c.roofline_pct is not None else "-"]
        table.add_row(*row)
    return table


@app.command(name="eval", help="Check a candidate kernel against a reference, config by config, in an isolated "
                               "worker; on CUDA also time it against eager and torch.compile.\n\n"
                               "Example: tileagent eval my_rmsnorm.py tasks/rmsnorm_silu.py --config M=1000\n\n"
                               "Exit codes: 0 correct on every config; 1 not correct (mismatch, guard, compile error, "
                               "crash, timeout); 2 bad input (missing file, bad reference, bad arguments).")
def eval_(kernel: Path = typer.Argument(..., help="the candidate: a .py file defining class ModelNew"),
          reference: Path = typer.Argument(..., help="the reference: a KernelBench-format .py file"),
          config: list[str] = typer.Option([], "--config", "-c", help="set a config key in every config of the "
                                           "grid, as key=value (key=a,b: one config per value)"),
          device: str = typer.Option("auto", help="auto, cpu, cuda or cuda:N"),
          json_out: Path | None = typer.Option(None, "--json", help="write the result record (JSON) here"),
          no_timing: bool = typer.Option(False, "--no-timing", help="check correctness only"),
          seeds: int = typer.Option(5, help="random seeds per config and input distribution"),
          compile_timeout: float = typer.Option(120.0, help="seconds to load the reference and the candidate"),
          run_timeout: float = typer.Option(120.0, help="seconds to check (or time) one config"),
          verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    from evaluator.records import EvalRequest
    from evaluator.worker import EvalWorker

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    for path in (kernel, reference):
        if not path.is_file():
            err_console.print(f"[red]error:[/] no such file: {path}")
            raise typer.Exit(EXIT_BAD_INPUT)
    request = EvalRequest(kernel_path=str(kernel.resolve()), reference_path=str(reference.resolve()),
                          overrides=_parse_overrides(config), device=device, seeds=seeds, timing=not no_timing,
                          compile_timeout_s=compile_timeout, run_timeout_s=run_timeout)
    with console.status(f"evaluating {kernel.name} against {reference.name}"):
        with EvalWorker(device, evaluate_fn=EVALUATE_FN) as worker:
            result = worker.evaluate(request)
    if json_out is not None:
        json_out.write_text(result.model_dump_json(indent=2))
    if result.configs:
        console.print(_eval_table(result, f"{kernel.name} vs {reference.name} on {result.device}"))
    for c in result.configs:
        for note in c.notes:
            console.print(f"[yellow]note[/] ({', '.join(f'{k}={v}' for k, v in c.config.items())}): {note}",
                          markup=True, highlight=False)
    if result.status == "ok":
        timed = "" if result.timing_available else " (timing unavailable on this device)"
        console.print(f"[green]correct[/] on {len(result.configs)} config(s){timed}")
        return
    err_console.print(f"[red]{result.status}:[/] {result.message}", highlight=False)
    raise typer.Exit(EXIT_CHECK_FAILED if result.status in _NOT_CORRECT else EXIT_BAD_INPUT)


@app.command(help="Compile a DSL program's kernel and show a stage: the tile IR, the inferred layouts, the lowered "
                  "per-thread IR or the CUDA source; compile errors print with their code, line and hint.\n\n"
                  "Example: tileagent compile prompts/examples/softmax.py -p M=1024 -p N=2048 --show layouts")
def compile(program: Path = typer.Argument(..., help="a .py file defining a @tileagent.jit kernel factory"),  # noqa: A001
            kernel: str = typer.Option(None, "--kernel", "-k", help="the factory's name, when the file has several"),
            param: list[str] = typer.Option([], "--param", "-p", help="keyword for the factory, as key=value"),
            show: str = typer.Option("tile", help="tile | layouts | thread | cuda"),
            target: str = typer.Option("sim", help="sim (CPU, lowered as for CUDA), cuda or cpu")) -> None:
    from compiler.jit import JITImpl

    module = _load_module(program)
    factories = {name: obj for name, obj in vars(module).items() if isinstance(obj, JITImpl)}
    if kernel is not None and kernel not in factories:
        err_console.print(f"[red]error:[/] {program} has no @jit factory named {kernel!r}; it has: "
                          f"{', '.join(factories) or 'none'}")
        raise typer.Exit(EXIT_BAD_INPUT)
    if kernel is None and len(factories) != 1:
        err_console.print(f"[red]error:[/] {program} has {len(factories)} @jit factories ({', '.join(factories)}); "
                          f"pick one with --kernel")
        raise typer.Exit(EXIT_BAD_INPUT)
    factory = factories[kernel] if kernel else next(iter(factories.values()))
    if show not in ("tile", "layouts", "thread", "cuda"):
        err_console.print(f"[red]error:[/] --show must be tile, layouts, thread or cuda, not {show!r}")
        raise typer.Exit(EXIT_BAD_INPUT)
    import tileagent

    try:
        built = tileagent.compile(factory.fn(**_parse_params(param)), out_idx=factory.out_idx, target=target,
                                  pass_configs=factory.pass_configs)
        text = {"tile": lambda: built.get_ir("tile"), "layouts": lambda: str(built.layouts()),
                "thread": lambda: built.get_ir("thread"), "cuda": built.get_kernel_source}[show]()
    except CompileError as e:
        err_console.print(str(e), markup=False, highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except TypeError as e:
        err_console.print(f"[red]error:[/] calling {factory.fn.__name__}: {e}")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    console.print(text, markup=False, highlight=False, soft_wrap=True)


@app.command(help="Print the version.")
def version() -> None:
    from compiler import __version__

    console.print(__version__)


if __name__ == "__main__":
    app()
