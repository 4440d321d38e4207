"""What ``tileagent generate`` and ``batch`` show: a live progress display, the final table and a bar chart (rich).

In: the loop's events (``Loop(on_event=...)``), the evaluation worker's per-config progress
(``EvalWorker.on_progress``) and the outcome rows (``tileagent.report.rows``). Out: output on a rich ``Console``.
Guarantees: a line per step (turn, candidate results, new best per config, tuning) above a live bar for the current
turn: configs x candidates evaluated (n/N), elapsed, ETA, and the best speedup so far; on a non-terminal (a pipe, a
log file, CI) only the lines are printed. One table and one bar chart per run; nothing is printed outside the given
console. With a pool of several evaluation workers (``tileagent.pool.Pool.snapshot``), a panel under the bar: per
worker (GPU) what it runs now, how many requests it finished and how long it was busy, and the evaluations done of
those submitted. Thread-safe: the loops of several references report to one display (``for_task`` prefixes their
lines with the reference's name).
"""

from __future__ import annotations

import copy
import logging
import threading
import time

from rich.console import Console, ConsoleDimensions, Group
from rich.logging import RichHandler
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.table import Table
from rich.text import Text

from tileagent.report import cell
from tileagent.runstore import config_key


PHASES = {"check": "checking", "timing": "timing", "full": "running at larger sizes"}  # EvalWorker's phases, as said
PIPE_WIDTH = 400
"""Columns a console assumes when its output is not a terminal (no wrapping of log files and CI output at 80)."""


class CLIConsole(Console):
    """A rich Console that, writing to something other than a terminal (a pipe, a file, CI), does not hard-wrap at
    80 columns: it assumes ``PIPE_WIDTH`` columns (``$COLUMNS`` still wins) and prints text without wrapping."""

    def __init__(self, **kwargs):
        kwargs.setdefault("soft_wrap", True)
        super().__init__(**kwargs)

    @property
    def size(self) -> ConsoleDimensions:
        dims = super().size
        if self._width is None and not self.is_terminal and "COLUMNS" not in self._environ:
            return ConsoleDimensions(PIPE_WIDTH, dims.height)
        return dims


class _Handler(RichHandler):
    """RichHandler; on a non-terminal a plain ``LEVEL    message`` line (no padding to the console's width)."""

    def render(self, *, record, traceback, message_renderable):
        if self.console.is_terminal:
            return super().render(record=record, traceback=traceback, message_renderable=message_renderable)
        level = self.get_level_text(record)
        return Text.assemble(level, " ", message_renderable if isinstance(message_renderable, Text)
                             else Text(str(record.getMessage())))


def setup_logging(console: Console, verbose: bool = False) -> None:
    """Send ``logging`` (WARNING and up; INFO with ``verbose``) through rich to ``console``: ``WARNING  message``
    lines instead of ``WARNING:module:message``. Replaces handlers an earlier call installed."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if isinstance(h, _Handler):
            root.removeHandler(h)
    handler = _Handler(console=console, show_path=False, show_time=False, markup=False, rich_tracebacks=False,
                       keywords=[])
    handler.setFormatter(logging.Formatter("%(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO if verbose else logging.WARNING)


class _WorkersProgress(Progress):
    """The bar, then one line per evaluation worker of ``pool``."""

    def __init__(self, *columns, pool, **kwargs):
        self.pool = pool  # before Progress.__init__, which may render already
        super().__init__(*columns, **kwargs)

    def get_renderables(self):
        yield from super().get_renderables()
        snap = self.pool.snapshot()
        table = Table.grid(padding=(0, 2))
        for s in snap["slots"]:
            state = s["current"] or ("[red]lost[/]" if not s["alive"] else "[dim]idle[/]")
            table.add_row(f"[bold]{s['worker']}[/]", state, f"{s['done']} done", f"busy {s['busy_s']:.0f} s")
        yield Text.from_markup(f"[dim]{snap['finished']}/{snap['submitted']} evaluations done, {snap['queued']} "
                               f"queued, {len(snap['slots'])} workers[/]")
        yield table


class LiveProgress:
    """``on_event`` for the loop and ``on_progress`` for the worker: lines per step, a live bar for the turn (and,
    with several workers, their panel)."""

    def __init__(self, console: Console, n_configs: int | None = None, pool=None):
        self.console, self.start, self.n_configs = console, time.monotonic(), n_configs
        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("elapsed"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                   TextColumn("{task.fields[best]}"))
        if pool is not None and len(getattr(pool, "slots", ())) > 1:
            self.progress = _WorkersProgress(*columns, pool=pool, console=console, transient=True)
        else:
            self.progress = Progress(*columns, console=console, transient=True)
        self.prefix = ""
        self._lock = threading.RLock()
        self.task = None
        self.best: dict[str, float | None] = {}  # config key -> best speedup over torch.compile (None: untimed)
        self.turn = 0
        self.turn_configs = n_configs or 0
        self.done_in_turn = 0  # configs evaluated in this turn (the bar's n)
        self.candidates_done = 0
        self.counting = False  # the worker's configs advance the bar only while a candidate (not a variant) runs
        self.evaluating = ""

    def __enter__(self) -> LiveProgress:
        self.progress.__enter__()
        self.task = self.progress.add_task("starting", total=None, best="")
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    # -- output ---------------------------------------------------------------------------------------------------

    def for_task(self, name: str) -> LiveProgress:
        """The ``on_event`` for the loop of reference ``name`` (several at once): the same display and bar, its own
        counts, its lines prefixed with the name."""
        child = copy.copy(self)
        child.prefix, child.best, child.n_configs = f"[cyan]{name}[/] ", {}, None
        return child

    def _line(self, text: str) -> None:
        self.console.print(f"[dim]{time.monotonic() - self.start:6.1f}s[/] {self.prefix}{text}", highlight=False)

    def _best_text(self) -> str:
        served = [v for v in self.best.values() if v is not None]
        n = f"{len(self.best)}/{self.n_configs}" if self.n_configs else str(len(self.best))
        if not self.best:
            return ""
        if not served:
            return f"{n} configs correct"
        return f"best x{min(served):.2f}..x{max(served):.2f} vs torch.compile, {n} configs served"

    def _update(self, **kwargs) -> None:
        if self.task is not None:
            self.progress.update(self.task, best=self._best_text(), **kwargs)

    # -- the worker's per-config progress ---------------------------------------------------------------------------

    def worker_progress(self, kind: str, f: dict) -> None:
        """``EvalWorker.on_progress``: advances the bar by one config as each finishes."""
        with self._lock:
            self._worker_progress(kind, f)

    def _worker_progress(self, kind: str, f: dict) -> None:
        if kind == "phase" and f.get("config") is not None:
            what = PHASES.get(f["phase"], f["phase"])
            self._update(description=f"{self.evaluating}: {what} {config_key(f['config'])}")
        elif kind == "config" and self.counting:
            self.done_in_turn += 1
            self._update(completed=self.done_in_turn)

    # -- the loop's events ----------------------------------------------------------------------------------------

    def __call__(self, kind: str, f: dict) -> None:
        with self._lock:
            self._event(kind, f)

    def _event(self, kind: str, f: dict) -> None:
        replay = " [dim](from the run log)[/]" if f.get("replayed") else ""
        if kind == "drafting":
            self.turn, self.turn_configs, self.done_in_turn, self.candidates_done = f["turn"], f["configs"], 0, 0
            self._line(f"[bold]turn {f['turn']}[/]: drafting {f['n']} candidate(s) for {f['configs']} config(s)")
            self._update(description=f"turn {f['turn']}: drafting", total=None, completed=0)
        elif kind == "drafted":
            if f.get("replayed"):
                self._line(f"[bold]turn {f['turn']}[/]: {f['n']} candidate(s){replay}")
                self.turn_configs = self.turn_configs or self.n_configs or 1
            tokens = f" ({f['tokens']} tokens so far)" if f.get("tokens") else ""
            self.done_in_turn = self.candidates_done = 0
            self._update(description=f"turn {f['turn']}: {f['n']} candidate(s) drafted{tokens}",
                         total=f["n"] * max(1, self.turn_configs), completed=0)
        elif kind == "archived":
            self._line(f"[bold]turn 0[/]: {len(f['labels'])} kernel(s) of this op verified by earlier runs, tried "
                       f"first ({escape('; '.join(f['labels']))}); --no-archive skips them")
        elif kind == "drafter_failed":
            self._line(f"[red]drafter gave up[/] at turn {f['turn']}: {escape(str(f['message']))}")
        elif kind == "evaluating":
            self.evaluating, self.counting = f"turn {self.turn}: {f['attempt_id']}", True
            self._update(description=f"{self.evaluating}: loading")
        elif kind == "evaluated":
            colour = "green" if f["summary"].startswith("correct") else "red"
            # the file drafter numbers its exchange files from 1, attempts count from 0: name the answer's file
            answer = f" ({f['label']})" if str(f.get("label") or "").startswith("file:") else ""
            self._line(f"  {f['attempt_id']}{answer}: [{colour}]{escape(f['summary'])}[/]{replay}")
            # a candidate that stopped early (compile error, a wrong config) counts all its configs as done
            self.counting, self.candidates_done = False, self.candidates_done + 1
            self.done_in_turn = max(self.done_in_turn, self.candidates_done * max(1, self.turn_configs))
            self._update(completed=self.done_in_turn)
        elif kind == "skipped":
            self._line(f"  {f['attempt_id']}: not evaluated ({escape(str(f['why']))})")
            self.candidates_done += 1
            self.done_in_turn = max(self.done_in_turn, self.candidates_done * max(1, self.turn_configs))
            self._update(completed=self.done_in_turn)
        elif kind == "best":
            t = f"{f['time_ms']:.4f} ms" if f.get("time_ms") is not None else "correct"
            s = f", x{f['speedup_compiled']:.2f} over torch.compile" if f.get("speedup_compiled") else ""
            self.best[config_key(f["config"])] = f.get("speedup_compiled")
            # the CPU checks smaller sizes: name them, not a config no check ran (played LLM, session 24)
            # and the configs a GPU runs that it serves, not the free dims' CPU sizes (played LLM, session 25)
            at = f" (checked at {config_key(f['evaluated_at'] or f['config'])})" if f.get("evaluated_at") or \
                any(c != f["config"] for c in f.get("serves") or []) else ""
            served = "; ".join(config_key(c) for c in f.get("serves") or []) or config_key(f["config"])
            self._line(f"    best for {served}{at}: {f['attempt_id']} ({t}{s})")
            self._update()
        elif kind == "tuning":
            knobs = ", ".join(f"{k} in {v}" for k, v in (f.get("knobs") or {}).items())
            self._line(f"  tuning {f['attempt_id']}: {escape(knobs)}")
            self._update(description=f"turn {self.turn}: tuning {f['attempt_id']}")
        elif kind == "variant":
            self._update(description=escape(f"tuning {f['attempt_id']}: {f['variant']} ({f['phase']}): {f['summary']}"))
        elif kind == "not_tuned":
            self._line(f"  not tuned: {f['attempt_id']} is in the space {f['tuned']}'s autotuning searched")
        elif kind == "tuned":
            note = f" ({f['note']})" if f.get("note") else ""
            self._line(f"  tuned {f['attempt_id']}: {f['screened']} variant(s) screened{escape(note)}")


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
        kernel = escape((r["attempt_id"] or "-") + (f" [{config_key(r['tunables'])}]" if r["tunables"] else ""))
        cells = [config_key(r["config"])] + ([] if timed else [config_key(r["evaluated_at"])])
        cells += ["[green]yes[/]" if r["correct"] else "[red]no[/]", kernel]
        if timed:
            cells += [cell(r["time_ms"], ".4f"), cell(r["eager_ms"], ".4f"), cell(r["compile_ms"], ".4f"),
                      cell(r["speedup_eager"], ".2f"), cell(r["speedup_compiled"], ".2f"),
                      f"{r['roofline_pct']:.0f}% {r['bound']}" if r["roofline_pct"] is not None else "-",
                      "[green]met[/]" if r["meets_target"] else "[red]no[/]"]
        table.add_row(*cells)
    return table


_BLOCKS = " ▏▎▍▌▋▊▉█"


def _bar(value: float, scale: float, width: int) -> str:
    """A horizontal bar of ``value`` where ``scale`` fills ``width`` characters (eighths of a cell)."""
    eighths = max(0, round(value / scale * width * 8)) if scale > 0 else 0
    full, part = divmod(min(eighths, width * 8), 8)
    return "█" * full + (_BLOCKS[part] if part else "")


def speedup_bars(rows: list[dict], target: float, width: int = 40) -> Group | None:
    """A terminal bar chart of the speedups per config (over eager and torch.compile, % of roofline), the target
    marked; None when no config was timed."""
    timed = [r for r in rows if r.get("speedup_eager") is not None or r.get("speedup_compiled") is not None]
    if not timed:
        return None
    scale = max([target] + [r["speedup_eager"] or 0 for r in timed] + [r["speedup_compiled"] or 0 for r in timed])
    table = Table(box=None, show_header=True, pad_edge=False, title=f"speedup per config (| marks the target "
                                                                    f"x{target:g})", title_justify="left")
    table.add_column("config", no_wrap=True)
    table.add_column("", no_wrap=True)
    table.add_column(f"0 .. x{scale:.2f}", no_wrap=True)
    table.add_column("roofline", justify="right", no_wrap=True)
    mark = min(width - 1, round(target / scale * width)) if scale > 0 else 0
    for r in timed:
        for k, (label, value, colour) in enumerate((("x eager", r["speedup_eager"], "blue"),
                                                    ("x compile", r["speedup_compiled"], "dark_orange"))):
            bar = _bar(value or 0.0, scale, width).ljust(width)
            bar = bar[:mark] + ("|" if bar[mark] == " " else bar[mark]) + bar[mark + 1:]
            text = Text(bar, style=colour if (value or 0) >= target else f"{colour} dim")
            text.append(f" {cell(value, '.2f')}", style="bold" if (value or 0) >= target else "")
            roof = f"{r['roofline_pct']:.0f}%" if k == 0 and r.get("roofline_pct") is not None else ""
            table.add_row(config_key(r["config"]) if k == 0 else "", label, text, roof)
    return Group(table)


__all__ = ["CLIConsole", "LiveProgress", "PIPE_WIDTH", "result_table", "setup_logging", "speedup_bars"]
