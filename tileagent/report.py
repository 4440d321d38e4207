"""The run's report: REPORT.md and report.json in the run directory.

In: the loop's options and outcome, the run's totals (turns, tokens, cost) and its output paths. Out: ``rows`` (one
dict per config: correctness, times, speedups, roofline, which attempt and knob values serve it), ``build`` (the
report as a dict), ``write`` (both files, atomically) and ``cell`` (a number as a table cell, '-' when None).
Guarantees: report.json carries ``format_version``; every config of the run has a row, served or not; times are in
milliseconds, None when not timed (the CPU); the Markdown table has the same rows.
"""

from __future__ import annotations

import json
from pathlib import Path

from tileagent.runstore import RunStore, config_key
from tileagent.target import at_the_limit

FORMAT_VERSION = 1


def _ms(timing) -> float | None:
    return timing.median_ms if timing is not None else None


def rows(options, outcome, meets_target) -> list[dict]:
    """One row per config of ``options.configs``."""
    out = []
    for rc in options.configs:
        b = outcome.best.get(config_key(rc.eval))
        r = b.result if b else None
        out.append({
            "config": rc.spec, "evaluated_at": rc.eval, "correct": bool(r and r.correct),
            "attempt_id": b.attempt_id if b else None, "tunables": b.tunables if b else {},
            "time_ms": _ms(r.candidate) if r else None, "eager_ms": _ms(r.eager) if r else None,
            "compile_ms": _ms(r.compiled) if r else None, "speedup_eager": r.speedup_eager if r else None,
            "speedup_compiled": r.speedup_compiled if r else None, "roofline_pct": r.roofline_pct if r else None,
            "bound": r.bound if r else None, "max_abs_err": r.max_abs_err if r else None,
            "meets_target": meets_target(b), "at_the_limit": bool(r and r.correct and at_the_limit(r)),
            "notes": r.notes if r else [],
        })
    return out


def build(options, outcome, table: list[dict], *, command: str, device: str, cost_usd: float,
          outputs: dict[str, str]) -> dict:
    """The report as a dict (what report.json holds)."""
    return {
        "format_version": FORMAT_VERSION, "command": command, "reference": options.reference,
        "task": Path(options.reference).stem, "device": device, "timed": options.device.startswith("cuda"),
        "target": options.target, "outcome": outcome.outcome, "reason": outcome.reason, "turns": outcome.turns,
        "attempts": outcome.attempts, "tokens": outcome.tokens, "cost_usd": round(cost_usd, 6), "configs": table,
        "outputs": outputs,
    }


def cell(x, fmt: str) -> str:
    """A table cell: ``x`` formatted with ``fmt``, '-' when None (REPORT.md and the final console table)."""
    return "-" if x is None else format(x, fmt)


def markdown(report: dict) -> str:
    """REPORT.md's text."""
    timed = report["timed"]
    lines = [f"# {report['task']}: {report['outcome'].replace('_', ' ')}", "",
             f"`tileagent {report['command']}` of `{report['reference']}` on {report['device']}: {report['reason']}. "
             f"{report['turns']} turn(s), {report['attempts']} attempt(s), {report['tokens']} token(s)"
             + (f", ${report['cost_usd']:.4f}" if report["cost_usd"] else "") + ".", ""]
    if not timed:
        lines += ["Checked on the CPU interpreter: correctness only, not timed. Free dims (FREE_DIMS) were evaluated "
                  "at their SMALL_CONFIG sizes (column 'evaluated at').", ""]
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
                      cell(r["roofline_pct"], ".0f"), ("met" if not r.get("at_the_limit") else "met (at the limit)") if r["meets_target"] else "**not met**"]
        lines.append("| " + " | ".join(cells) + " |")
    if report["outputs"]:
        lines += ["", "## Outputs", ""] + [f"- {k}: `{v}`" for k, v in report["outputs"].items()]
    return "\n".join(lines) + "\n"


def write(store: RunStore, report: dict) -> tuple[Path, Path]:
    """Write REPORT.md and report.json into the run directory; returns their paths."""
    md = store.write("REPORT.md", markdown(report))
    js = store.write("report.json", json.dumps(report, indent=2, default=str) + "\n")
    return md, js


__all__ = ["FORMAT_VERSION", "build", "cell", "markdown", "rows", "write"]
