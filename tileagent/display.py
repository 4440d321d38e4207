"""What ``tileagent generate`` and ``batch`` show: live progress lines and the final table (rich).

In: the loop's events (``Loop(on_event=...)``) and its outcome rows (``tileagent.report.rows``). Out: output on a
rich ``Console``. Guarantees: a line per step (turn, candidate results, new best per config, tuning), a spinner for
the step in progress, and one table per run; nothing is printed outside the given console.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.table import Table

from tileagent.report import cell
from tileagent.runstore import config_key


class LiveProgress:
    """``on_event`` for the loop: prints a line per step and keeps a spinner on the current step."""

    def __init__(self, console: Console):
        self.console, self.status, self.start = console, None, time.monotonic()

    def __enter__(self) -> LiveProgress:
        self.status = self.console.status("starting")
        self.status.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.status.__exit__(*exc)

    def _spin(self, text: str) -> None:
        if self.status is not None:
            self.status.update(text)

    def _line(self, text: str) -> None:
        self.console.print(f"[dim]{time.monotonic() - self.start:6.1f}s[/] {text}", highlight=False)

    def __call__(self, kind: str, f: dict) -> None:
        replay = " [dim](from the run log)[/]" if f.get("replayed") else ""
        if kind == "drafting":
            self._line(f"[bold]turn {f['turn']}[/]: drafting {f['n']} candidate(s) for {f['configs']} config(s)")
            self._spin(f"turn {f['turn']}: drafting")
        elif kind == "drafted":
            if f.get("replayed"):
                self._line(f"[bold]turn {f['turn']}[/]: {f['n']} candidate(s){replay}")
            tokens = f" ({f['tokens']} tokens so far)" if f.get("tokens") else ""
            self._spin(f"turn {f['turn']}: {f['n']} candidate(s) drafted{tokens}")
        elif kind == "drafter_failed":
            self._line(f"[red]drafter gave up[/] at turn {f['turn']}: {f['message']}")
        elif kind == "evaluating":
            self._spin(f"evaluating {f['attempt_id']} on {f['configs']} config(s)")
        elif kind == "evaluated":
            colour = "green" if f["summary"].startswith("correct") else "red"
            self._line(f"  {f['attempt_id']}: [{colour}]{f['summary']}[/]{replay}")
        elif kind == "skipped":
            self._line(f"  {f['attempt_id']}: not evaluated ({f['why']})")
        elif kind == "best":
            t = f"{f['time_ms']:.4f} ms" if f.get("time_ms") is not None else "correct"
            s = f", x{f['speedup_compiled']:.2f} over torch.compile" if f.get("speedup_compiled") else ""
            self._line(f"    best for {config_key(f['config'])}: {f['attempt_id']} ({t}{s})")
        elif kind == "tuning":
            knobs = ", ".join(f"{k} in {v}" for k, v in (f.get("knobs") or {}).items())
            self._line(f"  tuning {f['attempt_id']}: {knobs}")
        elif kind == "variant":
            self._spin(f"tuning {f['attempt_id']}: {f['variant']} ({f['phase']}): {f['summary']}")
        elif kind == "tuned":
            note = f" ({f['note']})" if f.get("note") else ""
            self._line(f"  tuned {f['attempt_id']}: {f['screened']} variant(s) screened{note}")


def result_table(rows: list[dict], title: str, timed: bool, target: float) -> Table:
    """The final table: one row per config."""
    table = Table(title=title)
    cols = ["config"] + ([] if timed else ["evaluated at"]) + ["correct", "kernel"]
    if timed:
        cols += ["ms", "eager ms", "compile ms", "x eager", "x compile", "% roofline", f"x{target:g}?"]
    for c in cols:
        table.add_column(c, justify="left" if c in ("config", "evaluated at", "correct", "kernel") else "right",
                         no_wrap=True)
    for r in rows:
        kernel = (r["attempt_id"] or "-") + (f" [{config_key(r['tunables'])}]" if r["tunables"] else "")
        cells = [config_key(r["config"])] + ([] if timed else [config_key(r["evaluated_at"])])
        cells += ["[green]yes[/]" if r["correct"] else "[red]no[/]", kernel]
        if timed:
            cells += [cell(r["time_ms"], ".4f"), cell(r["eager_ms"], ".4f"), cell(r["compile_ms"], ".4f"),
                      cell(r["speedup_eager"], ".2f"), cell(r["speedup_compiled"], ".2f"),
                      f"{r['roofline_pct']:.0f}% {r['bound']}" if r["roofline_pct"] is not None else "-",
                      "[green]met[/]" if r["meets_target"] else "[red]no[/]"]
        table.add_row(*cells)
    return table


__all__ = ["LiveProgress", "result_table"]
