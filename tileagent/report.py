"""The run's report: REPORT.md, report.json and the speedup chart in the run directory.

In: the loop's options and outcome, the run's totals (turns, tokens, cost) and its output paths. Out: ``rows`` (one
dict per config: correctness, times, speedups, roofline, which attempt and knob values serve it), ``build`` (the
report, validated by the ``RunReport`` model, as a dict), ``write`` (REPORT.md, report.json and, when timed and
matplotlib is installed, ``speedup.png``/``speedup.svg``), ``rerender`` (all of them again from report.json:
``tileagent report RUN_DIR``) and ``cell`` (a number as a table cell, '-' when None).
Guarantees: report.json is a ``RunReport`` (its JSON Schema: ``tileagent schema report``, docs/schemas/) with
``format_version``; every config of the run has a row, served or not; times are in milliseconds, None when not timed
(the CPU); the Markdown table has the same rows; REPORT.md links the chart when one was written and says why not
otherwise; ``workers`` (when given) says how long each evaluation worker (GPU) was busy.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from tileagent.compiler.resources import render_launch
from tileagent.evaluator.full_size import RULE as FULL_RUN_RULE
from tileagent.evaluator.interpreter_sizes import RULE as INTERPRETER_RULE
from tileagent.feedback import idle_launch, narrow_rows
from tileagent.runstore import RunStore, config_key, write_atomic

log = logging.getLogger("tileagent.report")

FORMAT_VERSION = 1
CHART = "speedup"  # speedup.png and speedup.svg in the run directory


class ReportError(Exception):
    """A run directory's report cannot be read (the message says which file and why)."""


class ConfigRow(BaseModel):
    """One config of the run and the kernel serving it."""

    config: dict = Field(description="the config as the reference's grid states it (what the export serves)")
    evaluated_at: dict = Field(description="the config the evaluator ran (reduced on the CPU: see configs.py and "
                                           "evaluator.interpreter_sizes.interpreter_config)")
    correct: bool
    attempt_id: str | None = Field(description="the attempt serving the config (attempts/<id>/), None if none")
    tunables: dict = Field(default_factory=dict, description="knob values assigned in the served kernel")
    time_ms: float | None = Field(description="median time of one call, ms (None: not timed)")
    eager_ms: float | None
    compile_ms: float | None = Field(description="torch.compile of the reference, ms")
    speedup_eager: float | None
    speedup_compiled: float | None
    roofline_pct: float | None = Field(description="% of the memory or compute bound")
    bound: str | None = Field(description="'memory' or 'compute'")
    max_abs_err: float | None
    meets_target: bool
    notes: list[str] = Field(default_factory=list)
    launches: list[dict] = Field(default_factory=list, description="the serving kernel's launches at the config's GPU "
                                 "sizes (compiler.resources.KernelResources.to_dict(); on the CPU compiled for the "
                                 "target, not run), [] when not sized")


class RunReport(BaseModel):
    """report.json."""

    format_version: int = FORMAT_VERSION
    command: str = Field(description="'generate' or 'batch'")
    reference: str = Field(description="the reference file")
    task: str = Field(description="the reference's stem")
    device: str = Field(description="the device in words")
    timed: bool = Field(description="whether kernels were timed (CUDA)")
    target: float = Field(description="the speedup every config had to reach")
    outcome: str = Field(description="target_met, correct_untimed, correct_not_faster, partial or no_correct")
    reason: str
    turns: int
    attempts: int
    tokens: int
    cost_usd: float
    configs: list[ConfigRow]
    outputs: dict[str, str] = Field(description="what the run wrote: {what: path}")
    workers: dict | None = Field(None, description="the evaluation workers (tileagent.pool.Pool.report): wall_s of "
                                 "this invocation and per worker its busy_s, requests, retried, alive")


def _ms(timing) -> float | None:
    return timing.median_ms if timing is not None else None


def rows(options, outcome, meets_target) -> list[dict]:
    """One row per config of ``options.configs`` (``ConfigRow`` fields)."""
    out = []
    for rc in options.configs:
        b = outcome.best.get(config_key(rc.eval))
        r = b.result if b else None
        out.append(ConfigRow(
            config=rc.spec, evaluated_at=(r.evaluated_at if r and r.evaluated_at else rc.eval),
            correct=bool(r and r.correct),
            attempt_id=b.attempt_id if b else None, tunables=b.tunables if b else {},
            time_ms=_ms(r.candidate) if r else None, eager_ms=_ms(r.eager) if r else None,
            compile_ms=_ms(r.compiled) if r else None, speedup_eager=r.speedup_eager if r else None,
            speedup_compiled=r.speedup_compiled if r else None, roofline_pct=r.roofline_pct if r else None,
            bound=r.bound if r else None, max_abs_err=r.max_abs_err if r else None,
            meets_target=meets_target(b), notes=r.notes if r else [],
            launches=[x for x in b.launches if x.get("config", rc.spec) == rc.spec] if b else []  # its own: configs
            # checked alike share a Best (played LLM session 39: each row listed both configs' launches)
        ).model_dump(mode="json"))
    return out


def gpu_flags(table: list[dict]) -> list[str]:
    """What the compiler's GPU resource estimate flags in the serving kernels of ``table`` (``rows``): local memory
    (spilled registers or local arrays), one line per kernel and size of it (the first config that shows it, and how
    many more do), a launch that leaves most SMs idle (``feedback.idle_launch``) and a large tensor accessed an
    element at a time (``feedback.narrow_rows``). On the CPU, which does not time,
    it is the run's only word on speed (played LLM session 40: a patch embedding ended at 255 registers and spills,
    unsaid). Low occupancy is not flagged: a tensor-core GEMM runs one or two blocks an SM by design."""
    found: dict[tuple, list] = {}
    for r in table:
        for x in r.get("launches") or []:
            if x.get("frame_bytes"):
                found.setdefault((x["kernel"], x.get("registers"), x["frame_bytes"]), []).append(
                    config_key(r["config"]))
    idle = [x for r in table if (x := idle_launch(r.get("launches") or []))]
    narrow = [x for r in table if (x := narrow_rows(r.get("launches") or []))]
    return [f"{kernel} ({registers} registers/thread, {local} B local memory/thread: spills or local arrays) at "
            f"{configs[0]}" + (f" and {len(configs) - 1} more config(s)" if len(configs) > 1 else "")
            for (kernel, registers, local), configs in found.items()] + [
        f"{x['kernel']} at {config_key(x['config'])} ({x['blocks']} block(s) on {x['sms']} SMs, "
        f"{x['bytes'] // x['blocks'] >> 10} KiB of the inputs each: most SMs idle)" for x in idle] + [
        f"{x['kernel']} at {config_key(x['config'])} ({x['tensor']} {8 * x['access_bytes'][x['tensor']]} bits at a "
        f"time: a run-time row length)" for x in narrow]


def build(options, outcome, table: list[dict], *, command: str, device: str, cost_usd: float,
          outputs: dict[str, str], workers: dict | None = None) -> dict:
    """The report as a dict (what report.json holds), validated by ``RunReport``. ``workers``: the evaluation
    workers' wall and busy seconds (``tileagent.pool.Pool.report``), when known."""
    return RunReport(
        command=command, reference=options.reference, task=Path(options.reference).stem, device=device,
        timed=options.device.startswith("cuda"), target=options.target, outcome=outcome.outcome,
        reason=outcome.reason, turns=outcome.turns, attempts=outcome.attempts, tokens=outcome.tokens,
        cost_usd=round(cost_usd, 6), configs=table, outputs=outputs, workers=workers).model_dump(mode="json")


def cell(x, fmt: str) -> str:
    """A table cell: ``x`` formatted with ``fmt``, '-' when None (REPORT.md and the final console table)."""
    return "-" if x is None else format(x, fmt)


def markdown(report: dict, chart: str | None = None) -> str:
    """REPORT.md's text; ``chart``: the chart's file name to link, or a note why there is none."""
    timed = report["timed"]
    lines = [f"# {report['task']}: {report['outcome'].replace('_', ' ')}", "",
             f"`tileagent {report['command']}` of `{report['reference']}` on {report['device']}: {report['reason']}. "
             f"{report['turns']} turn(s), {report['attempts']} attempt(s), {report['tokens']} token(s)"
             + (f", ${report['cost_usd']:.4f}" if report["cost_usd"] else "") + ".", ""]
    if not timed:
        lines += ["Checked on the CPU interpreter: correctness only, not timed. Free dims (FREE_DIMS) were evaluated "
                  "at their SMALL_CONFIG sizes; a config whose inputs were still too large for the interpreter with "
                  f"{INTERPRETER_RULE} (column 'evaluated at'); {FULL_RUN_RULE}.", ""]
    if chart and chart.endswith((".png", ".svg")):
        lines += [f"![speedup per config over eager PyTorch and torch.compile]({chart})", ""]
    elif chart and timed:
        lines += [f"No chart: {chart}.", ""]
    head = ["config", "evaluated at", "correct", "attempt", "tunables"]
    if timed:
        head += ["ms", "eager ms", "compile ms", "x eager", "x compile", "% roofline", f"target x{report['target']:g}"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in report["configs"]:
        cells = [config_key(r["config"]), config_key(r["evaluated_at"]), "yes" if r["correct"] else "**no**",
                 r["attempt_id"] or "-", config_key(r["tunables"]) if r["tunables"] else "-"]
        if timed:
            cells += [cell(r["time_ms"], ".4f"), cell(r["eager_ms"], ".4f"), cell(r["compile_ms"], ".4f"),
                      cell(r["speedup_eager"], ".2f"), cell(r["speedup_compiled"], ".2f"),
                      cell(r["roofline_pct"], ".0f"), "met" if r["meets_target"] else "**not met**"]
        lines.append("| " + " | ".join(cells) + " |")
    sized = [(r, x) for r in report["configs"] for x in r.get("launches") or []]
    if sized:  # what a GPU gives each launch (played LLM session 37: a 19%-occupancy kernel reported as done)
        lines += ["", "## GPU resources of the serving kernels", ""] + \
            [f"- {config_key(r['config'])}: {render_launch(x)}" for r, x in sized]
    lines += workers_markdown(report.get("workers"))
    if report["outputs"]:
        lines += ["", "## Outputs", ""] + [f"- {k}: `{v}`" for k, v in report["outputs"].items()]
    return "\n".join(lines) + "\n"


def chart(report: dict, directory: Path) -> tuple[list[Path], str]:
    """Write ``speedup.png`` and ``speedup.svg`` (grouped bars per config: speedup over eager and over
    torch.compile, the target as a line, % of roofline above each group) into ``directory``.

    Returns (the files written, the file REPORT.md links or the reason there is none): nothing when the run was not
    timed, no config has a time, or matplotlib is not installed (``pip install matplotlib``)."""
    timed = [r for r in report["configs"] if r.get("speedup_eager") is not None or r.get("speedup_compiled")]
    if not report["timed"] or not timed:
        return [], "the run was not timed (CPU)" if not report["timed"] else "no config was timed"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "matplotlib is not installed (pip install matplotlib, then `tileagent report RUN_DIR`)"
    labels = [config_key(r["config"]).replace(",", "\n") for r in timed]
    x = list(range(len(timed)))
    width = 0.38
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(timed) + 2), 4.6))
    eager = [r["speedup_eager"] or 0.0 for r in timed]
    comp = [r["speedup_compiled"] or 0.0 for r in timed]
    ax.bar([i - width / 2 for i in x], eager, width, label="x eager PyTorch", color="#4c72b0")
    ax.bar([i + width / 2 for i in x], comp, width, label="x torch.compile", color="#dd8452")
    ax.axhline(report["target"], color="grey", linestyle="--", linewidth=1, label=f"target x{report['target']:g}")
    top = max(eager + comp + [report["target"]])
    for i, r in zip(x, timed):
        if r.get("roofline_pct") is not None:
            ax.text(i, max(eager[i], comp[i]) + 0.02 * top, f"{r['roofline_pct']:.0f}%\nroofline", ha="center",
                    va="bottom", fontsize=7)
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel("speedup (higher is better)")
    ax.set_ylim(0, top * 1.25)
    ax.set_title(f"{report['task']} on {report['device']}: generated kernel vs PyTorch", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False)
    fig.tight_layout()
    written = []
    for ext in ("png", "svg"):
        path = Path(directory) / f"{CHART}.{ext}"
        tmp = path.with_name(f".{path.name}.tmp")
        fig.savefig(tmp, format=ext, dpi=120)
        tmp.replace(path)
        written.append(path)
    plt.close(fig)
    return written, f"{CHART}.png"


def workers_markdown(workers: dict | None) -> list[str]:
    """The report's section on the evaluation workers: how long each was busy (of the wall time of this invocation;
    a resumed run counts from its resume)."""
    if not workers or not workers.get("workers"):
        return []
    wall = workers["wall_s"]
    lines = ["", "## Evaluation workers", "", f"Wall time {wall:.1f} s (this invocation).", "",
             "| worker | busy s | busy % | requests | retried |", "|---|---|---|---|---|"]
    for w in workers["workers"]:
        pct = f"{100 * w['busy_s'] / wall:.0f}" if wall > 0 else "-"
        lines.append(f"| {w['worker']}{'' if w.get('alive', True) else ' (lost)'} | {w['busy_s']:.1f} | {pct} | "
                     f"{w['requests']} | {w['retried']} |")
    return lines


def write(store: RunStore, report: dict) -> tuple[Path, Path]:
    """Write report.json, the chart (when possible) and REPORT.md into the run directory; returns (REPORT.md,
    report.json)."""
    js = store.write("report.json", json.dumps(report, indent=2, default=str) + "\n")
    try:
        _, link = chart(report, store.root)
    except Exception as e:  # noqa: BLE001 - a chart is a convenience; the report must still be written
        log.warning("no chart: %s: %s", type(e).__name__, e)
        link = f"drawing it failed ({type(e).__name__}: {e})"
    md = store.write("REPORT.md", markdown(report, link))
    return md, js


def load(run_dir: Path) -> dict:
    """report.json of ``run_dir``, validated; raises ReportError."""
    path = Path(run_dir) / "report.json"
    if not path.is_file():
        why = "not a directory" if not Path(run_dir).is_dir() else "no report.json (the run has not finished?)"
        raise ReportError(f"{run_dir}: {why}")
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        raise ReportError(f"{path}: not valid JSON ({e})") from None
    if isinstance(data, dict) and data.get("format_version") != FORMAT_VERSION:
        raise ReportError(f"{path}: report format version {data.get('format_version')!r}; this tileagent reads "
                          f"version {FORMAT_VERSION}")
    try:
        return RunReport.model_validate(data).model_dump(mode="json")
    except ValidationError as e:
        first = e.errors()[0]
        raise ReportError(f"{path}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def rerender(run_dir: Path) -> tuple[dict, list[Path]]:
    """REPORT.md and the chart again from ``run_dir``/report.json; returns (the report, the files written)."""
    data = load(run_dir)
    written, link = chart(data, Path(run_dir))
    md = Path(run_dir) / "REPORT.md"
    write_atomic(md, markdown(data, link))
    return data, [md, *written]


__all__ = ["CHART", "FORMAT_VERSION", "ConfigRow", "ReportError", "RunReport", "build", "cell", "chart", "gpu_flags",
           "load", "workers_markdown", "markdown", "rerender", "rows", "write"]
