"""The ``tileagent`` command line (typer + rich).

Exit codes: 0 success; 1 the program ran but its check failed; 2 bad input (file, arguments, compile error).
``generate`` and ``batch`` (the agent, docs/agent.md): 0 target met (on the CPU: correct on every config, not timed);
3 correct on every config but not faster than the target; 4 no correct kernel for some or all configs; 2 bad input;
130 interrupted (Ctrl-C: the message says how to ``--resume``).
Bad input is caught before any work (before a worker starts or a run directory is made): the device, the drafter's
settings, the reference (loaded in a throw-away process, ``evaluator.probe``), the configs and the ``--json`` folder.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import time
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from tileagent.compiler.diagnostics import CompileError
from tileagent.configs import key as cfgs_key
from tileagent.evaluator.records import RUN_TIMEOUT_S
from tileagent.display import CLIConsole, setup_logging
from tileagent.drafter_flags import drafter_options, make_drafter

app = typer.Typer(help="TileAgent: verified GPU kernels from PyTorch references, in a TileLang-compatible DSL.\n\n"
                       "Start with `tileagent tasks` (the shipped references) and `tileagent generate rmsnorm_silu`. "
                       "Shell completion: `tileagent --install-completion`.",
                  no_args_is_help=True, add_completion=True, context_settings={"help_option_names": ["-h", "--help"]})
console = CLIConsole()
err_console = CLIConsole(stderr=True)

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT = 0, 1, 2
EXIT_NOT_FASTER, EXIT_NO_CORRECT = 3, 4


def _load_module(path: Path):
    if not path.is_file():
        err_console.print(f"[red]error:[/] no such file: {escape(str(path))}")
        raise typer.Exit(EXIT_BAD_INPUT)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
    except CompileError as e:
        err_console.print(str(e), markup=False, highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except SyntaxError as e:
        err_console.print(f"[red]error:[/] {escape(f'{path}:{e.lineno}: syntax error: {e.msg}')}")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    return module


def _parse_params(params: list[str]) -> dict:
    """``key=value`` pairs: an int, else a float (``z_coef=1e-4``), else true / false, else the text (a dtype)."""
    out = {}
    for p in params:
        key, sep, value = p.partition("=")
        if not sep:
            err_console.print(f"[red]error:[/] --param expects key=value, got {p!r}")
            raise typer.Exit(EXIT_BAD_INPUT)
        for parse in (int, float):
            try:
                out[key] = parse(value)
                break
            except ValueError:
                out[key] = {"true": True, "false": False}.get(value.lower(), value)
    return out


@app.command(help="Run a DSL program's check(): build its kernel, run it, compare with its torch reference.\n\n"
                  "Example: tileagent run prompts/examples/rmsnorm_silu.py --device cpu -p M=1000 -p C=320")
def run(program: Path = typer.Argument(..., help="a .py file defining check(device=..., **sizes)"),
        device: str = typer.Option("auto", help="auto (cuda when available, else cpu), cpu (the interpreter), cuda "
                                   "or cuda:N"),
        param: list[str] = typer.Option([], "--param", "-p", help="keyword for check(), as key=value"),
        show_ir: bool = typer.Option(False, "--show-ir", help="print the kernel's tile IR"),
        verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    setup_logging(err_console, verbose)
    device = _check_device(device)
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
        err_console.print(str(e), markup=False, highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except AssertionError as e:
        err_console.print(f"[red]mismatch:[/] {escape(str(e))}")
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


EVALUATE_FN = "tileagent.evaluator.worker:evaluate"  # what the eval worker runs per request (tests substitute a fake)
_NOT_CORRECT = {"mismatch", "guard_violation", "compile_error", "candidate_error", "timeout", "crash",
                "internal_error"}


def _bad(message: str) -> typer.Exit:
    err_console.print(f"[red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(EXIT_BAD_INPUT)


def _deprecated(old: str, new: str) -> None:
    err_console.print(f"[yellow]note:[/] {old} is deprecated; use {new} (same meaning)", highlight=False)


def _check_device(device: str) -> str:
    """``--device`` checked against what torch sees, before any work: 'auto' -> 'cuda' or 'cpu'; 'cuda' / 'cuda:N'
    need that GPU. Raises the exit-2 error otherwise."""
    import re

    if device in ("auto", "cpu"):
        if device == "cpu":
            return "cpu"
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    match = re.fullmatch(r"cuda(?::(\d+))?", device)
    if match is None:
        raise _bad(f"--device must be auto, cpu, cuda or cuda:N, got {device!r}")
    import torch

    if not torch.cuda.is_available():
        raise _bad(f"--device {device}: no CUDA GPU is visible to torch (torch.cuda.is_available() is False); use "
                   f"--device cpu or --device auto")
    count, index = torch.cuda.device_count(), int(match.group(1) or 0)
    if index >= count:
        raise _bad(f"--device {device}: torch sees {count} GPU(s) (cuda:0 to cuda:{count - 1})")
    return device


def _json_target(path: Path | None) -> None:
    """``--json PATH``: its folder is created now (before the run); a PATH that cannot be written is refused."""
    if path is None:
        return
    if path.is_dir():
        raise _bad(f"--json {path}: is a folder; give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _bad(f"--json {path}: cannot create the folder {path.parent} ({e.strerror or e})") from None
    if not os.access(path.parent, os.W_OK):
        raise _bad(f"--json {path}: the folder {path.parent} is not writable")


@contextlib.contextmanager
def _resumable(command: str, root: Path):
    """Ctrl-C inside: once the run at ``root`` is on disk (its event log), say how to resume it; exit 130."""
    try:
        yield
    except KeyboardInterrupt:
        saved = (root / "events.jsonl").exists()
        err_console.print(f"interrupted: the run so far is saved in {root}; continue it with: tileagent {command} "
                          f"--resume {root}" if saved else "interrupted", highlight=False, soft_wrap=True)
        raise typer.Exit(130) from None


def _reference(reference: Path, timeout_s: float):
    """The reference, imported and sanity-run in a throw-away process (``evaluator.probe``); exit 2 naming it."""
    from tileagent.evaluator import probe
    from tileagent.evaluator.errors import SpecError

    if not reference.is_file():
        raise _bad(f"no such file: {reference}")
    try:
        summary = probe.probe_reference(reference, timeout_s)
    except SpecError as e:
        raise _bad(f"{reference}: {e}") from None
    for warning in summary.warnings:
        err_console.print(f"[yellow]warning:[/] {escape(f'{reference}: {warning}')}", highlight=False, soft_wrap=True)
    return summary


def _select_configs(summary, selections: list[str], axes: list[tuple[str, str]]) -> list[dict]:
    """The reference's configs, narrowed by ``--configs`` and with ``--grid`` axes set over each; every key and
    value checked against the reference (exit 2 naming the flag)."""
    from tileagent import configs as cfgs
    from tileagent.evaluator.errors import SpecError
    from tileagent.evaluator.worker import expand_configs

    try:
        base = cfgs.select(summary.configs, selections)
        overrides = {}
        for flag, item in axes:
            key, values = cfgs.check_axis(item, flag, summary.configs, summary.accepts)
            overrides[key] = values
        chosen = expand_configs(base, None, overrides)
        for config in chosen:
            summary.check_config(config, f"config {config}")
    except (cfgs.ConfigSelectionError, SpecError) as e:
        raise _bad(str(e)) from None
    return chosen


def _cpu_note(chosen, device: str, reference: Path) -> None:
    if not device.startswith("cuda"):
        from tileagent.cpu_note import cpu_note

        for line in cpu_note(chosen, reference):
            console.print(line, highlight=False)


def _ms(t) -> str:
    return f"{t.median_ms:.4f} ±{t.iqr_ms:.4f}" if t is not None else "-"


def _eval_progress(status, start: float):
    """``EvalWorker.on_progress`` for ``tileagent eval``: the phase in the spinner; on a non-terminal (a log, CI) a
    line per phase with the seconds so far, so that a slow or stuck evaluation shows where it is."""
    from tileagent.display import PHASES

    def report(kind: str, f: dict) -> None:
        if kind != "phase" or f.get("config") is None:
            return
        what = f"{PHASES.get(f['phase'], f['phase'])} {cfgs_key(f['config'])}"
        status.update(f"evaluating: {what}")
        if not console.is_terminal:
            console.print(f"{time.monotonic() - start:6.1f} s  {what}", highlight=False)

    return report


def _eval_table(result, title: str, serves: dict[str, list[str]]) -> Table:
    """One row per config checked: the grid's configs it stands for (on the CPU) and the sizes the interpreter ran it
    at where smaller; error sizes only for a correct config (a failed one's are those of the checks before)."""
    timed = any(c.candidate is not None for c in result.configs)
    cols = ["config", "correct", "max abs err", "rel L2 err"] + (
        ["ms ±IQR", "eager ms", "compile ms", "x eager", "x compile", "% roofline"] if timed else [])
    table = Table(title=title)
    for col in cols:
        table.add_column(col, justify="left" if col in ("config", "correct") else "right", no_wrap=True)
    for c in result.configs:  # named by the grid's configs it stands for, not by its free dims' CPU sizes mixed with
        # the other sizes as stated (played LLM session 39: "B=2 S=1024 V=151936 (for B=8 S=1024 V=151936)")
        stands_for = serves.get(cfgs_key(c.config))
        label = "; ".join(stands_for) if stands_for else cfgs_key(c.config)
        at = c.evaluated_at or (c.config if stands_for else None)
        label += f" (checked at {cfgs_key(at)})" if at else ""
        errors = [f"{v:.2e}" if v is not None and c.correct else "-" for v in (c.max_abs_err, c.rel_l2)]
        row = [label, "[green]yes[/]" if c.correct else "[red]no[/]", *errors]
        if timed:
            row += [_ms(c.candidate), _ms(c.eager), _ms(c.compiled),
                    f"{c.speedup_eager:.2f}" if c.speedup_eager else "-",
                    f"{c.speedup_compiled:.2f}" if c.speedup_compiled else "-",
                    f"{c.roofline_pct:.0f}% {c.bound}" if c.roofline_pct is not None else "-"]
        table.add_row(*row)
    return table


@app.command(name="eval", help="Check a candidate kernel against a reference, config by config, in an isolated "
                               "worker; on CUDA also time it against eager and torch.compile. On the CPU the free "
                               "dims (FREE_DIMS) run at their SMALL_CONFIG sizes, as in generate.\n\n"
                               "Example: tileagent eval my_rmsnorm.py tasks/rmsnorm_silu.py --grid M=1000\n\n"
                               "Exit codes: 0 correct on every config; 1 not correct (mismatch, guard, compile error, "
                               "crash, timeout); 2 bad input (missing file, bad reference, bad arguments).")
def eval_(kernel: Path = typer.Argument(..., help="the candidate: a .py file defining class ModelNew"),
          reference: Path = typer.Argument(..., help="the reference: a KernelBench-format .py file or a shipped "
                                           "task's name"),
          configs: list[str] = typer.Option([], "--configs", help="select configs: KEY=v1,v2 (repeatable) or "
                                            "indices 0,3 of the grid"),
          grid: list[str] = typer.Option([], "--grid", help="set KEY in every selected config, as KEY=v (KEY=a,b: "
                                         "one config per value; repeatable)"),
          config: list[str] = typer.Option([], "--config", "-c", hidden=True, help="deprecated: --grid"),
          device: str = typer.Option("auto", help="auto (cuda when available, else cpu), cpu, cuda or cuda:N"),
          json_out: Path | None = typer.Option(None, "--json", help="write the result record (JSON) here (its "
                                               "folder is created)"),
          no_timing: bool = typer.Option(False, "--no-timing", help="check correctness only"),
          seeds: int = typer.Option(5, help="random seeds per config and input distribution"),
          compile_timeout: float = typer.Option(120.0, help="seconds to load the reference and the candidate"),
          run_timeout: float = typer.Option(RUN_TIMEOUT_S, help="seconds to check (or time) one config (the same "
                                            "default as tileagent generate's)"),
          verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    from tileagent import configs as cfgs
    from tileagent.answers import answer_file
    from tileagent.evaluator.records import EvalRequest
    from tileagent.evaluator.worker import EvalWorker

    setup_logging(err_console, verbose)
    reference = _reference_path(reference)
    if not kernel.is_file():
        raise _bad(f"no such file: {kernel}")
    if config:
        _deprecated("--config/-c", "--grid")
    device = _check_device(device)
    axes = [("--grid", item) for item in grid] + [("--config", item) for item in config]
    try:
        for flag, item in axes:
            cfgs.parse_axis(item, flag)
    except cfgs.ConfigSelectionError as e:
        raise _bad(str(e)) from None
    _json_target(json_out)
    block = answer_file(kernel)
    if block != kernel:
        console.print(f"{kernel.name} is an answer with one python block, not Python: evaluating that block",
                      highlight=False)
        kernel = block
    summary = _reference(reference, compile_timeout)
    chosen = cfgs.reduce_for_device(summary, _select_configs(summary, configs, axes), device)
    request = EvalRequest(kernel_path=str(kernel.resolve()), reference_path=str(reference.resolve()),
                          configs=cfgs.unique_evals(chosen), device=device, seeds=seeds, timing=not no_timing,
                          plan_configs=[rc.spec for rc in chosen] if any(rc.spec != rc.eval for rc in chosen) else None,
                          compile_timeout_s=compile_timeout, run_timeout_s=run_timeout)
    console.print(f"evaluating {kernel.name} against {reference.name}: {len(chosen)} config(s) on {device}",
                  highlight=False)
    _cpu_note(chosen, device, reference)
    try:
        with console.status(f"evaluating {kernel.name} against {reference.name}") as status:
            with EvalWorker(device, evaluate_fn=EVALUATE_FN) as worker:
                worker.on_progress = _eval_progress(status, time.monotonic())
                result = worker.evaluate(request)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        raise typer.Exit(130) from None
    if json_out is not None:
        json_out.write_text(result.model_dump_json(indent=2))
    if result.configs:
        serves: dict[str, list[str]] = {}  # a CPU check -> the configs of the grid it stands for
        for rc in chosen:
            if rc.spec != rc.eval:
                serves.setdefault(cfgs_key(rc.eval), []).append(cfgs_key(rc.spec))
        console.print(_eval_table(result, f"{kernel.name} vs {reference.name} on {result.device}", serves))
    for c in result.configs:
        for note in c.notes:
            console.print(f"[yellow]note[/] ({', '.join(f'{k}={v}' for k, v in c.config.items())}): {escape(note)}",
                          markup=True, highlight=False)
    if result.plans:
        from tileagent.feedback import resources

        console.print(resources(result.plans), highlight=False, soft_wrap=True)
    if result.status == "ok":
        timed = "" if result.timing_available else " (timing unavailable on this device)"
        console.print(f"[green]correct[/] on {len(result.configs)} config(s){timed}")
        return
    err_console.print(f"[red]{result.status}:[/] {escape(result.message)}", highlight=False)
    raise typer.Exit(EXIT_CHECK_FAILED if result.status in _NOT_CORRECT else EXIT_BAD_INPUT)


@app.command(help="Compile a DSL program's kernel and show a stage: the tile IR, the inferred layouts, the lowered "
                  "per-thread IR or the CUDA source; compile errors print with their code, line and hint.\n\n"
                  "Example: tileagent compile prompts/examples/softmax.py -p M=1024 -p N=2048 --show layouts")
def compile(program: Path = typer.Argument(..., help="a .py file defining a @tileagent.jit kernel factory"),  # noqa: A001
            kernel: str = typer.Option(None, "--kernel", "-k", help="the factory's name, when the file has several"),
            param: list[str] = typer.Option([], "--param", "-p", help="keyword for the factory, as key=value"),
            show: str = typer.Option("tile", help="tile | layouts | thread | cuda"),
            after: str = typer.Option(None, "--after", help="show the IR after this pass instead (e.g. plan_shared; "
                                                            "docs/architecture.md lists them)"),
            backend: str = typer.Option("sim", help="sim (CPU, lowered as for CUDA), cuda or cpu; an arch after a "
                                                    "colon lowers for it (cuda:sm_80 builds without a GPU)"),
            target: str = typer.Option(None, "--target", hidden=True, help="deprecated: --backend")) -> None:
    from tileagent.compiler.jit import JITImpl

    if target is not None:
        _deprecated("compile --target", "--backend")
        backend = target

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
        built = tileagent.compile(factory.fn(**_parse_params(param)), out_idx=factory.out_idx, target=backend,
                                  pass_configs=factory.pass_configs)
        text = built.get_ir(after=after) if after else \
            {"tile": lambda: built.get_ir("tile"), "layouts": lambda: str(built.layouts()),
             "thread": lambda: built.get_ir("thread"), "cuda": built.get_kernel_source}[show]()
    except CompileError as e:
        err_console.print(str(e), markup=False, highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except TypeError as e:
        err_console.print(f"[red]error:[/] calling {factory.fn.__name__}: {escape(str(e))}")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except ValueError as e:  # an unknown --after pass
        err_console.print(f"[red]error:[/] {escape(str(e))}", highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def _reference_path(reference: Path) -> Path:
    """A reference file: the path itself when it exists, else the shipped task of that name (``tileagent tasks``)."""
    from tileagent import shipped

    try:
        return shipped.resolve_reference(reference)
    except shipped.UnknownTask as e:
        raise _bad(str(e)) from None


_OUTCOME_WORDS = {"target_met": "target met", "correct_untimed": "correct on every config; not timed (CPU)",
                  "correct_not_faster": "correct on every config, but not faster than the target everywhere",
                  "partial": "no correct kernel for some configs", "no_correct": "no correct kernel",
                  "not_drafted": "no drafter could draft this op"}


def _finished(store) -> dict | None:
    """The run's "finished" event when nothing but a resume came after it (the run ended), else None."""
    last = None
    for e in store.events():
        if e["event"] == "finished":
            last = e
        elif e["event"] != "run_resumed":
            last = None
    return last


def _agent(command: str, reference: Path | None, resume: Path | None, out: Path | None, configs: list[str],
           grid: list[str], flags: dict, drafter_flags: dict, verbose: bool) -> None:
    """generate and batch: check the input, set up (or resume) a run, run the loop, print the table and the outputs,
    exit. Every check of the input happens before a worker starts or a run directory is made."""
    import datetime

    from tileagent import configs as cfgs
    from tileagent.archive import Archive
    from tileagent.display import LiveProgress, result_table, speedup_bars
    from tileagent.evaluator import probe
    from tileagent.evaluator.errors import SpecError
    from tileagent.loop import EXIT_CODES, Loop, LoopOptions, ReferenceFailed, finalize
    from tileagent.runstore import RunStore, RunStoreError

    setup_logging(err_console, verbose)
    if resume is not None:
        try:
            store = RunStore.open(resume)
            stored = store.options
            options = LoopOptions.model_validate(stored["loop"])
            drafter_opts = stored["drafter"]
        except (RunStoreError, KeyError, TypeError, ValueError) as e:
            raise _bad(f"cannot resume {resume}: {e}") from None
        ended = _finished(store)
        if ended is not None and ended.get("outcome") in EXIT_CODES and \
                (flags.get("max_turns") is None or flags["max_turns"] <= options.max_turns):
            outcome = ended["outcome"]
            console.print(f"{store.root} is finished: {_OUTCOME_WORDS[outcome]} ({escape(str(ended.get('reason')))}; "
                          f"{ended.get('turns')} turn(s), {ended.get('tokens')} tokens); nothing was run again. Its "
                          f"report: {store.root / 'REPORT.md'}", highlight=False, soft_wrap=True)
            if EXIT_CODES[outcome] != 0:
                console.print(f"To run more turns: tileagent {command} --resume {store.root} --max-turns "
                              f"{options.max_turns + 4}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_CODES[outcome])
        if flags.get("max_turns") is not None:
            options.max_turns = flags["max_turns"]
        _check_device(options.device)
        drafter = make_drafter(drafter_opts)
        moved = None
        if reference is not None:  # the run moved (another machine or checkout): its reference is here now
            given = str(_reference_path(reference).resolve())
            if given != options.reference:
                options.reference = moved = given
        elif not Path(options.reference).is_file():
            raise _bad(f"cannot resume {resume}: its reference {options.reference} does not exist here (did the run "
                       f"move from another machine?); give it: tileagent {command} --resume {resume} REFERENCE")
        _reference(Path(options.reference), probe.REFERENCE_TIMEOUT_S)
        store.append("run_resumed", **({"reference": moved} if moved else {}))
        console.print(f"resuming [bold]{store.root}[/] ({Path(options.reference).name}" +
                      (f"; the reference is now {moved}, not {stored['loop']['reference']}" if moved else "") + ")",
                      soft_wrap=True)
    else:
        if reference is None:
            raise _bad(f"{command} needs a REFERENCE file (or --resume RUN_DIR)")
        device = _check_device(flags["device"]) if not flags.get("ray") or flags["device"] != "auto" else \
            _ray_device(flags["ray"])
        reference = _reference_path(reference)
        try:
            for item in grid:
                cfgs.parse_axis(item, "--grid")
        except cfgs.ConfigSelectionError as e:
            raise _bad(str(e)) from None
        drafter_opts = drafter_flags
        drafter = make_drafter(drafter_opts)
        summary = _reference(reference, probe.REFERENCE_TIMEOUT_S)
        try:
            base = cfgs.grid(summary.configs[0], grid, summary.accepts, summary.configs) if command == "batch" \
                else list(summary.configs)
            for config in base:
                summary.check_config(config, f"config {config}")
            chosen = cfgs.reduce_for_device(summary, cfgs.select(base, configs), device)
        except (cfgs.ConfigSelectionError, SpecError) as e:
            raise _bad(str(e)) from None
        options = LoopOptions(reference=str(reference.resolve()), configs=chosen, device=device,
                              max_turns=flags["max_turns"] or 8, candidates=flags["candidates"], target=flags["target"],
                              budget_tokens=flags["budget_tokens"], seed=flags["seed"], seeds=flags["seeds"],
                              tune=flags["tune"], tune_seconds=flags["tune_seconds"],
                              reuse_archive=flags["reuse_archive"], keep_going=command == "batch")
        _check_workers(device, flags)  # bad --gpus / --ray exit before anything is written
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        root = out or Path("runs") / f"{reference.stem}-{stamp}"
        for k in range(2, 100):
            if out is not None or not root.exists():
                break
            root = Path("runs") / f"{reference.stem}-{stamp}-{k}"
        with _resumable(command, root):  # CI (session 48): a Ctrl-C while the run was being announced
            try:
                store = RunStore.create(root, {"command": command, "loop": options.model_dump(mode="json"),
                                               "drafter": drafter_opts})
            except (RunStoreError, OSError) as e:
                raise _bad(str(e)) from None
            store.append("run_started", options=options.model_dump(mode="json"), drafter=drafter_opts)
            console.print(f"[bold]{command}[/] {reference} -> {store.root}: {len(chosen)} config(s) on {device}, "
                          f"drafter {drafter_opts['provider']}")
    with _resumable(command, store.root):  # from here on the run exists
        if resume is None:
            _cpu_note(chosen, device, reference)
        archive = Archive()
        with _open_pool(options.device, flags) as pool, \
                LiveProgress(console, len(options.configs), pool=pool) as progress:
            pool.on_progress = progress.worker_progress
            broken = None
            try:
                loop = Loop(options, store, drafter, pool, archive=archive, on_event=progress)
                outcome = loop.run()
                outputs = finalize(loop, outcome, command=command, workers=pool.report())
            except ReferenceFailed as e:
                broken = e
    if broken is not None:
        err_console.print(f"[red]error:[/] the reference failed, not the candidate ({broken.attempt_id} is not "
                          f"counted): {escape(broken.message)}\nFix {Path(options.reference).name} and continue the "
                          f"run with: "
                          f"tileagent {command} --resume {store.root}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_BAD_INPUT)
    from tileagent import report

    rows = report.rows(options, outcome, loop.meets_target)
    console.print(result_table(rows, f"{Path(options.reference).name} on {options.device}", loop.timed,
                               options.target))
    bars = speedup_bars(rows, options.target)
    if bars is not None:
        console.print(bars)
    for what, path in outputs.items():
        console.print(f"{what}: {path}", highlight=False)
    for line in loop.reverify_failed:
        err_console.print(f"[yellow]warning:[/] a recorded result did not hold when checked again: {escape(line)}",
                          highlight=False, soft_wrap=True)
    code = EXIT_CODES[outcome.outcome]
    colour = "green" if code == 0 else "yellow" if code == EXIT_NOT_FASTER else "red"
    reason = escape(str(outcome.reason))
    console.print(f"[{colour}]{_OUTCOME_WORDS[outcome.outcome]}[/] ({reason}; {outcome.turns} turn(s), "
                  f"{outcome.tokens} tokens)", highlight=False)
    gpu_notes = report.gpu_flags(rows) if outcome.outcome == "correct_untimed" else []
    if gpu_notes:
        console.print(escape(f"not timed here; the compiler's estimate for the GPU flags {'; '.join(gpu_notes)} "
                             f"(REPORT.md). A run on a GPU (--device cuda) works on speed."), highlight=False,
                      soft_wrap=True)
    raise typer.Exit(code)


def _open_pool(device: str, flags: dict):
    """The evaluation workers of a run (``--gpus``, ``--ray``: tileagent.pool); a bad choice exits 2."""
    from tileagent.pool import GpuSelectionError, open_pool

    try:
        return open_pool(device, flags.get("gpus") or "all", flags.get("ray"))
    except GpuSelectionError as e:
        raise _bad(str(e)) from None


def _check_workers(device: str, flags: dict) -> None:
    from tileagent.pool import GpuSelectionError, check_workers

    try:
        check_workers(device, flags.get("gpus") or "all", flags.get("ray"))
    except GpuSelectionError as e:
        raise _bad(str(e)) from None


def _ray_device(address: str) -> str:
    """``--device auto`` with ``--ray``: cuda when the cluster has GPUs (the driver may have none)."""
    from tileagent.pool import GpuSelectionError
    from tileagent.ray_backend import cluster_device

    try:
        return cluster_device(address)
    except GpuSelectionError as e:
        raise _bad(str(e)) from None


_AGENT_EXIT = ("Exit codes: 0 target met (on the CPU: correct on every config; not timed); 3 correct but not faster "
               "than the target; 4 no correct kernel (for some or all configs); 5 no drafter could draft the op (nothing was "
               "tried); 2 bad input, or the reference failed during an evaluation (the run stops; --resume continues it).")
_PROVIDER = typer.Option(None, help="builtin | openai | file (default: builtin unless an endpoint is configured)")
_MODEL = typer.Option(None, help="the model name (openai; default $TILEAGENT_MODEL)")
_BASE_URL = typer.Option(None, help="OpenAI-compatible endpoint URL (openai)")
_KEY_ENV = typer.Option(None, help="environment variable holding the API key (default OPENAI_API_KEY)")
_CONFIGS = typer.Option([], "--configs", help="select configs: KEY=v1,v2 (repeatable) or indices 0,3 of the grid")
_DEVICE = typer.Option("auto", help="auto (cuda when available, else cpu), cpu, cuda or cuda:N")
_MAX_TURNS = typer.Option(None, help="turns at most (default 8)")
_CANDIDATES = typer.Option(2, help="candidates per turn")
_TARGET = typer.Option(1.0, help="speedup over eager and over torch.compile every config must reach")
_OUT = typer.Option(None, help="the run directory (default runs/<task>-<timestamp>)")
_RESUME = typer.Option(None, help="continue the run in this directory; a REFERENCE given too replaces the run's "
                       "reference path (a run moved from another machine or checkout)")
_BUDGET = typer.Option(None, help="stop once the drafters used more tokens than this")
_SEED = typer.Option(0, help="seed for the drafter")
_PRICE = typer.Option(None, help="USD per million input and output tokens, as IN,OUT (openai: the report's cost)")
_SEEDS = typer.Option(5, help="evaluator seeds per config and input distribution")
_NO_TUNE = typer.Option(False, "--no-tune", help="do not autotune TUNABLES")
_TUNE_SECONDS = typer.Option(90.0, help="screening time for autotuning one candidate")
_NO_ARCHIVE = typer.Option(False, "--no-archive", help="do not read the archive: no archived kernels tried first or "
                           "shown as examples (verified kernels are still added to it)")
_VERBOSE = typer.Option(False, "--verbose", "-v")
_GPUS = typer.Option("all", help="evaluation workers, one per GPU: all (every visible GPU), a count N, or GPU "
                     "indices such as 0,2,5 (on the CPU: N interpreter workers; all: one)")
_RAY = typer.Option(None, help="evaluate on a Ray cluster: auto (the running cluster), local (start one here) or "
                    "its ADDRESS; one actor per GPU (pip install 'tileagent[ray]')")
_REFERENCE = typer.Argument(None, help="the reference: a KernelBench-format .py file, or the name of a shipped task "
                                       "(`tileagent tasks`)")


def _loop_flags(max_turns, candidates, target, device, budget_tokens, seed, seeds, no_tune, tune_seconds,
                no_archive, gpus="all", ray=None) -> dict:
    return {"max_turns": max_turns, "candidates": candidates, "target": target, "device": device,
            "budget_tokens": budget_tokens, "seed": seed, "seeds": seeds, "tune": not no_tune,
            "tune_seconds": tune_seconds, "reuse_archive": not no_archive, "gpus": gpus, "ray": ray}




@app.command(help="Draft, verify and tune a kernel for REFERENCE with the agent loop; write the run directory, the "
                  "best kernels, an exported drop-in module and a report.\n\n"
                  "Example: tileagent generate tasks/rmsnorm_silu.py\n\n" + _AGENT_EXIT)
def generate(reference: Path = _REFERENCE, provider: str = _PROVIDER, model: str = _MODEL, base_url: str = _BASE_URL,
             api_key_env: str = _KEY_ENV, max_turns: int = _MAX_TURNS, candidates: int = _CANDIDATES,
             target: float = _TARGET, configs: list[str] = _CONFIGS, out: Path = _OUT, resume: Path = _RESUME,
             device: str = _DEVICE, budget_tokens: int = _BUDGET, seed: int = _SEED, seeds: int = _SEEDS,
             no_tune: bool = _NO_TUNE, tune_seconds: float = _TUNE_SECONDS, no_archive: bool = _NO_ARCHIVE,
             price: str = _PRICE, gpus: str = _GPUS, ray: str = _RAY, verbose: bool = _VERBOSE) -> None:
    flags = _loop_flags(max_turns, candidates, target, device, budget_tokens, seed, seeds, no_tune, tune_seconds,
                        no_archive, gpus, ray)
    _agent("generate", reference, resume, out, configs, [], flags,
           drafter_options(provider, model, base_url, api_key_env, seed, price) if resume is None else {}, verbose)


@app.command(help="Cover a grid of configs with one kernel family: reuse and re-tune archived kernels where they "
                  "work, run the agent loop for the configs where they do not, export one module for all.\n\n"
                  "Example: tileagent batch tasks/rmsnorm_silu.py --grid C=160,256,320,512,640,1024\n\n"
                  + _AGENT_EXIT)
def batch(references: list[Path] = typer.Argument(None, help="the reference(s): KernelBench-format .py files, or "
                                                "folders of them (one run each, one report across them)"),
          grid: list[str] = typer.Option([], "--grid", help="KEY=v1,v2 axis over the spec's first config "
                                         "(repeatable: the product); with several references it applies to those "
                                         "having KEY, STEM:KEY=v1,v2 to STEM.py only (others keep their CONFIGS)"),
          provider: str = _PROVIDER, model: str = _MODEL, base_url: str = _BASE_URL, api_key_env: str = _KEY_ENV,
          max_turns: int = _MAX_TURNS, candidates: int = _CANDIDATES, target: float = _TARGET,
          configs: list[str] = _CONFIGS, out: Path = _OUT, resume: Path = _RESUME, device: str = _DEVICE,
          budget_tokens: int = _BUDGET, seed: int = _SEED, seeds: int = _SEEDS, no_tune: bool = _NO_TUNE,
          tune_seconds: float = _TUNE_SECONDS, no_archive: bool = _NO_ARCHIVE, price: str = _PRICE,
          gpus: str = _GPUS, ray: str = _RAY, verbose: bool = _VERBOSE) -> None:
    references = references or []
    flags = _loop_flags(max_turns, candidates, target, device, budget_tokens, seed, seeds, no_tune, tune_seconds,
                        no_archive, gpus, ray)
    if len(references) > 1 or any(p.is_dir() for p in references) or \
            (resume is not None and (resume / "batch.json").is_file()):
        from tileagent.batch_cli import batch_many

        batch_many(references, resume, out, configs, grid, flags,
                   drafter_options(provider, model, base_url, api_key_env, seed, price) if resume is None else {},
                   verbose)
    reference = references[0] if references else None
    if resume is None and not grid:
        raise _bad("batch needs at least one --grid KEY=v1,v2 (e.g. --grid C=160,256,320)")
    _agent("batch", reference, resume, out, configs, grid, flags,
           drafter_options(provider, model, base_url, api_key_env, seed, price) if resume is None else {}, verbose)


@app.command(name="tilelang", context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                               "allow_interspersed_args": False},
             help="Run a TileLang program unchanged, with `import tilelang` resolved to TileAgent; ARGS go to the "
                  "script.\n\nExample: tileagent tilelang example_mha_fwd_bshd.py --batch 1 --seq_len 256\n\n"
                  "Exit codes: the script's own; 1 it raised (a failed check); 2 compile error or unsupported "
                  "TileLang API (E701).")
def tilelang_(ctx: typer.Context, script: Path = typer.Argument(..., help="the TileLang program (.py)")) -> None:
    from tileagent.compat.run import run_script

    raise typer.Exit(run_script(script, list(ctx.args)))


def _version_text() -> str:
    import platform

    import torch

    from tileagent.compiler import __version__
    from tileagent.export_runtime import RUNTIME_VERSION

    return (f"tileagent {__version__} (exported-module runtime {RUNTIME_VERSION}; torch {torch.__version__}; "
            f"python {platform.python_version()})")


def _version_flag(value: bool) -> None:
    if value:
        console.print(_version_text(), highlight=False)
        raise typer.Exit(EXIT_OK)


@app.callback()
def _main(version: bool = typer.Option(False, "--version", "-V", help="print the version and exit", is_eager=True,
                                       callback=_version_flag)) -> None:
    """TileAgent: verified GPU kernels from PyTorch references, in a TileLang-compatible DSL."""


@app.command(help="Print the version (the same as --version).")
def version() -> None:
    console.print(_version_text(), highlight=False)


@app.command(help="List the reference tasks shipped with TileAgent; pass a name to generate/batch/eval from any "
                  "directory.\n\nExample: tileagent tasks; tileagent generate rmsnorm_silu")
def tasks() -> None:
    from tileagent import shipped

    names = shipped.task_names()
    if not names:
        raise _bad(f"no shipped tasks found in {shipped.tasks_dir()} (set TILEAGENT_TASKS to a folder of tasks)")
    table = Table(title=f"shipped tasks ({shipped.tasks_dir()})")
    table.add_column("name", no_wrap=True)
    table.add_column("what")
    for name in names:
        table.add_row(name, shipped.describe(shipped.tasks_dir() / f"{name}.py"))
    console.print(table)


SCHEMAS = {"report": ("tileagent.report", "RunReport"), "run": ("tileagent.runstore", "RunFile"),
           "event": ("tileagent.runstore", "Event")}


def schema_of(what: str) -> dict:
    """The JSON Schema of report.json ("report"), run.json ("run") or one line of events.jsonl ("event")."""
    import importlib

    module, name = SCHEMAS[what]
    return getattr(importlib.import_module(module), name).model_json_schema()


@app.command(help="Print the JSON Schema of a run directory's files: report (report.json), run (run.json) or event "
                  "(one line of events.jsonl). The same schemas are in docs/schemas/.\n\n"
                  "Example: tileagent schema report > report.schema.json")
def schema(what: str = typer.Argument(..., help="report | run | event")) -> None:
    import json

    if what not in SCHEMAS:
        raise _bad(f"schema: expected one of {', '.join(SCHEMAS)}, got {what!r}")
    text = json.dumps(schema_of(what), indent=2)
    if console.is_terminal:
        console.print_json(text)
    else:
        sys.stdout.write(text + "\n")  # exactly the JSON, for redirection


@app.command(name="report", help="Re-render a run's REPORT.md (and its charts) from its report.json, and print its "
                                 "table.\n\nExample: tileagent report runs/rmsnorm_silu-20250101-120000")
def report_(run_dir: Path = typer.Argument(..., help="a run directory (holding report.json)")) -> None:
    from tileagent import report as rep
    from tileagent.display import result_table, speedup_bars

    try:
        data, written = rep.rerender(run_dir)
    except rep.ReportError as e:
        raise _bad(str(e)) from None
    console.print(result_table(data["configs"], f"{data['task']} on {data['device']}", data["timed"],
                               data["target"]))
    bars = speedup_bars(data["configs"], data["target"])
    if bars is not None:
        console.print(bars)
    for path in written:
        console.print(f"wrote {path}", highlight=False)


if __name__ == "__main__":
    app()
