"""``tileagent batch REF1 REF2 ...`` / ``tileagent batch FOLDER``: the command line of ``tileagent.multibatch``.

In: the batch command's arguments (several references or folders, or ``--resume`` of a batch directory), its loop
flags and drafter options. Out: the batch directory (``tileagent.multibatch``), a table per op and config on the
console, and the exit code: the worst over the ops (0 target met / correct on the CPU, 3 not faster, 4 no correct
kernel or an op that failed, 2 bad input).
"""

from __future__ import annotations

import datetime
import logging
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from tileagent.report import cell
from tileagent.runstore import RunStore, RunStoreError, config_key


def batch_many(references: list[Path], resume: Path | None, out: Path | None, configs: list[str], grid: list[str],
               flags: dict, drafter_flags: dict, verbose: bool) -> None:
    """Run (or resume) a batch over several references; always ends with ``typer.Exit``."""
    from tileagent import cli
    from tileagent import multibatch as mb
    from tileagent.drafter_flags import make_drafter
    from tileagent.archive import Archive
    from tileagent.display import LiveProgress
    from tileagent.loop import LoopOptions

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    if configs:
        raise cli._bad("--configs selects configs of one reference; with several, use --grid STEM:KEY=v1,v2")
    try:
        if resume is not None:
            if references:
                raise cli._bad("--resume continues a batch as it was started: give no references with it")
            batch = mb.Batch.open(resume)
            first = next(iter(batch.runs.values()))
            try:
                device = LoopOptions.model_validate(RunStore.open(first).options["loop"]).device
            except (RunStoreError, KeyError, ValueError) as e:
                raise cli._bad(f"cannot resume {resume}: {e}") from None
            cli.console.print(f"resuming [bold]{batch.root}[/] ({', '.join(batch.runs)})")
        else:
            refs = mb.expand([r if r.exists() else cli._reference_path(r) for r in references])
            device = cli._check_device(flags["device"]) if not flags.get("ray") or flags["device"] != "auto" else \
                cli._ray_device(flags["ray"])  # checked as one reference's batch checks it, before anything is written
            loop_kwargs = {"max_turns": flags["max_turns"] or 8, "candidates": flags["candidates"],
                           "target": flags["target"], "budget_tokens": flags["budget_tokens"], "seed": flags["seed"],
                           "seeds": flags["seeds"], "tune": flags["tune"], "tune_seconds": flags["tune_seconds"],
                           "reuse_archive": flags["reuse_archive"]}
            options = mb.plan(refs, grid, device, loop_kwargs)
            make_drafter(drafter_flags)  # a bad provider exits before anything is written
            cli._check_workers(device, flags)  # and so do bad --gpus / --ray
            stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
            root = out or Path("runs") / f"batch-{stamp}"
            batch = mb.Batch.create(root, options, drafter_flags)
            cli.console.print(f"[bold]batch[/] of {len(options)} references -> {batch.root}: "
                              + ", ".join(f"{Path(o.reference).stem} ({len(o.configs)} config(s))" for o in options)
                              + f" on {device}, drafter {drafter_flags['provider']}", highlight=False)
    except mb.BatchError as e:
        raise cli._bad(str(e)) from None
    with cli._open_pool(device, flags) as pool, LiveProgress(cli.console, pool=pool) as progress:
        report = mb.run(batch, pool, make_drafter, Archive(), progress, resumed=resume is not None,
                        max_turns=flags.get("max_turns") if resume is not None else None)
    cli.console.print(table(report))
    for o in report["ops"]:
        if o["exported_module"]:
            cli.console.print(f"exported module ({o['task']}): {o['exported_module']}", highlight=False)
        if o["outcome"] == "error":
            cli.err_console.print(f"[red]{o['task']} failed:[/] {escape(str(o['reason']))}", highlight=False)
        elif o["outcome"] == "reference_failed":
            cli.err_console.print(f"[red]{o['task']}: the reference failed, not the candidate:[/] "
                                  f"{escape(str(o['reason']))} "
                                  f"(fix it and continue with --resume {batch.root})", highlight=False, soft_wrap=True)
    cli.console.print(f"report: {batch.root / 'REPORT.md'}", highlight=False)
    busy = ", ".join(f"{w['worker']} {w['busy_s']:.0f} s" for w in (report.get("workers") or {}).get("workers", []))
    cli.console.print(f"wall time {report['wall_s']:.1f} s; busy: {busy}", highlight=False)
    raise typer.Exit(report["exit_code"])


def table(report: dict) -> Table:
    """The console table: one row per op and config (times and speedups only when some op was timed)."""
    timed = any(o.get("timed") for o in report["ops"])
    t = Table(title=f"batch of {len(report['ops'])} reference(s)")
    cols = ["op", "config", "outcome", "correct", "kernel"] + (["ms", "x eager", "x compile"] if timed else [])
    for col in cols:
        t.add_column(col, justify="right" if col in ("ms", "x eager", "x compile") else "left", no_wrap=True)
    for o in report["ops"]:
        for r in o["configs"] or [None]:
            if r is None:
                t.add_row(o["task"], "-", o["outcome"], *["-"] * (len(cols) - 3))
                continue
            cells = [o["task"], config_key(r["config"]), o["outcome"].replace("_", " "),
                     "[green]yes[/]" if r["correct"] else "[red]no[/]", r["attempt_id"] or "-"]
            if timed:
                cells += [cell(r["time_ms"], ".4f"), cell(r["speedup_eager"], ".2f"), cell(r["speedup_compiled"], ".2f")]
            t.add_row(*cells)
    return t


__all__ = ["batch_many", "table"]
