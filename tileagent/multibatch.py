"""Several references in one ``tileagent batch``: a run per reference (its grid), all on one pool of evaluation workers
at once, and one report across them.

In: reference files or folders of them (a model's ops), ``--grid`` items (``KEY=v1,v2`` for every reference whose
configs have KEY; ``STEM:KEY=v1,v2`` for the reference ``STEM.py`` only; a reference that no item applies to keeps its
own ``CONFIGS``), the loop's flags, the drafter's options, and a ``tileagent.pool.Pool``. Out: the batch directory::

    BATCH_DIR/
      batch.json            format version, the references and their run directories (what --resume reads)
      <stem>/               one run per reference, as `tileagent batch REF` writes it: events, attempts, best
                            kernels, its exported module <stem>_tileagent.py, its own REPORT.md and report.json
      REPORT.md, report.json   across the references: per op and config the verdict and speedups, each op's
                            exported module, the wall time and each evaluation worker's busy time

Guarantees: every run directory is created (and batch.json written) before any loop starts, so ``--resume`` finds
them all after a kill at any point; each reference's loop runs in its own thread with its own drafter, all loops
sharing the pool, so the workers serve every op at once (their outputs and archive entries are written one op at
a time); a loop that raises ends its op with outcome ``error`` (the
others go on), and one whose reference fails inside an evaluation (``tileagent.loop.ReferenceFailed``) with outcome
``reference_failed``; the exit code is the worst over the ops (``tileagent.loop.EXIT_CODES``; an error counts as 4,
a failed reference as 2).
Bad input raises ``BatchError`` with what and where.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
from pathlib import Path

from tileagent.configs import ConfigSelectionError, grid, reduce_for_device
from tileagent.loop import EXIT_CODES, Loop, LoopOptions, ReferenceFailed, finalize
from tileagent.report import cell, rows, workers_markdown
from tileagent.runstore import RunStore, RunStoreError, config_key, write_atomic

log = logging.getLogger("tileagent.batch")

FORMAT_VERSION = 1


class BatchError(ValueError):
    """Unusable references, grid items or batch directory (the message says which and why)."""


def expand(paths: list[Path]) -> list[Path]:
    """The reference files of ``paths``: files as given, folders as their ``*.py`` files (sorted; names starting with
    ``_`` skipped). Stems must be unique (each names its run directory)."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(f for f in p.glob("*.py") if not f.name.startswith("_"))
            if not found:
                raise BatchError(f"{p}: the folder has no reference (.py) files")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise BatchError(f"no such file or folder: {p}")
    stems: dict[str, Path] = {}
    for f in out:
        if f.stem in stems and stems[f.stem].resolve() != f.resolve():
            raise BatchError(f"two references named {f.stem}: {stems[f.stem]} and {f}; rename one")
        stems[f.stem] = f
    return list({f.resolve(): f for f in out}.values())


def axes_for(stem: str, keys: set, items: list[str], stems: set[str]) -> list[str]:
    """The ``--grid`` axes that apply to reference ``stem`` (whose configs have ``keys``)."""
    out = []
    for item in items:
        target, sep, axis = item.partition(":")
        if sep and "=" not in target:
            if target not in stems:
                raise BatchError(f"--grid {item}: no reference named {target} (the references: "
                                 f"{', '.join(sorted(stems))})")
            if target == stem:
                out.append(axis)
        elif item.partition("=")[0].strip() in keys:
            out.append(item)
    return out


def plan(references: list[Path], grid_items: list[str], device: str, loop_kwargs: dict) -> list[LoopOptions]:
    """The LoopOptions of each reference: its configs (its grid, reduced for ``device``) and the loop's flags."""
    from tileagent.evaluator.errors import SpecError
    from tileagent.evaluator.spec import load_spec

    stems = {r.stem for r in references}
    out = []
    for ref in references:
        try:
            spec = load_spec(ref)
        except SpecError as e:
            raise BatchError(f"{ref}: {e}") from None
        keys = {k for c in spec.configs for k in c}
        axes = axes_for(ref.stem, keys, grid_items, stems)
        try:
            base = grid(spec.configs[0], axes) if axes else [dict(c) for c in spec.configs]
            chosen = reduce_for_device(spec, base, device)
        except ConfigSelectionError as e:
            raise BatchError(f"{ref.name}: {e}") from None
        out.append(LoopOptions(reference=str(ref.resolve()), configs=chosen, device=device, keep_going=True,
                               **loop_kwargs))
    unused = [i for i in grid_items if ":" not in i.partition("=")[0]
              and not any(i.partition("=")[0].strip() in {k for rc in o.configs for k in rc.spec} for o in out)]
    if unused:
        raise BatchError(f"--grid {unused[0]}: no reference has the key {unused[0].partition('=')[0].strip()!r}")
    return out


class Batch:
    """A batch directory: its references' runs."""

    def __init__(self, root: Path, runs: dict[str, Path]):
        self.root, self.runs = Path(root), runs

    @classmethod
    def create(cls, root: Path, options: list[LoopOptions], drafter: dict) -> Batch:
        """Create the batch directory and a run directory per reference (see the module docstring)."""
        root = Path(root)
        if (root / "batch.json").exists() or (root / "run.json").exists():
            raise BatchError(f"{root} already holds a run; continue it with --resume {root}, or pick another --out")
        runs = {}
        for o in options:
            stem = Path(o.reference).stem
            try:
                store = RunStore.create(root / stem, {"command": "batch", "loop": o.model_dump(mode="json"),
                                                      "drafter": drafter})
            except (RunStoreError, OSError) as e:
                raise BatchError(str(e)) from None
            store.append("run_started", options=o.model_dump(mode="json"), drafter=drafter)
            runs[stem] = root / stem
        write_atomic(root / "batch.json", json.dumps({"format_version": FORMAT_VERSION, "command": "batch",
                                                      "runs": {k: k for k in runs}}, indent=2) + "\n")
        return cls(root, runs)

    @classmethod
    def open(cls, root: Path) -> Batch:
        root = Path(root)
        try:
            data = json.loads((root / "batch.json").read_text())
        except (OSError, ValueError) as e:
            raise BatchError(f"cannot resume {root}: {root / 'batch.json'}: {e}") from None
        if data.get("format_version") != FORMAT_VERSION:
            raise BatchError(f"{root / 'batch.json'}: batch format version {data.get('format_version')!r}; this "
                             f"tileagent reads version {FORMAT_VERSION}")
        return cls(root, {stem: root / sub for stem, sub in data["runs"].items()})

    @staticmethod
    def is_batch(root: Path) -> bool:
        return (Path(root) / "batch.json").is_file()


def run(batch: Batch, pool, make_drafter, archive, progress, resumed: bool = False,
        max_turns: int | None = None) -> dict:
    """Run every reference's loop at once on ``pool``; write each run's outputs and the report across them.
    ``make_drafter(options: dict)`` gives a drafter per reference; ``progress.for_task(stem)`` its display.
    Returns the report (a dict, as written to report.json)."""
    start = time.monotonic()
    ops: dict[str, dict] = {}
    finalizing = threading.Lock()  # one op at a time writes its outputs and the shared archive

    def one(stem: str, root: Path) -> None:
        try:
            store = RunStore.open(root)
            stored = store.options
            options = LoopOptions.model_validate(stored["loop"])
            if max_turns is not None:
                options.max_turns = max_turns
            if resumed:
                store.append("run_resumed")
            loop = Loop(options, store, make_drafter(stored["drafter"]), pool, archive=archive,
                        on_event=progress.for_task(stem))
            outcome = loop.run()
            with finalizing:
                outputs = finalize(loop, outcome, command="batch")
            ops[stem] = {"task": stem, "reference": options.reference, "run_dir": str(root),
                         "outcome": outcome.outcome, "reason": outcome.reason, "turns": outcome.turns,
                         "attempts": outcome.attempts, "tokens": outcome.tokens, "timed": loop.timed,
                         "target": options.target, "exported_module": outputs.get("exported module"),
                         "configs": rows(options, outcome, loop.meets_target)}
        except ReferenceFailed as e:  # this op's reference is broken: its run stops, the others go on
            log.error("%s: %s", stem, e)
            ops[stem] = {"task": stem, "run_dir": str(root), "outcome": "reference_failed", "reason": e.message,
                         "configs": [], "exported_module": None}
        except Exception as e:  # noqa: BLE001 - one op's failure must not end the others
            log.error("%s: %s", stem, traceback.format_exc())
            ops[stem] = {"task": stem, "run_dir": str(root), "outcome": "error",
                         "reason": f"{type(e).__name__}: {e}", "configs": [], "exported_module": None}

    threads = [threading.Thread(target=one, args=(stem, root), name=f"tileagent-batch-{stem}", daemon=True)
               for stem, root in batch.runs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ordered = [ops[stem] for stem in batch.runs]
    worst = max(({**EXIT_CODES, "reference_failed": 2}.get(o["outcome"], 4) for o in ordered), default=0)
    report = {"format_version": FORMAT_VERSION, "command": "batch", "batch_dir": str(batch.root),
              "wall_s": round(time.monotonic() - start, 3), "exit_code": worst, "ops": ordered,
              "workers": pool.report() if hasattr(pool, "report") else None}
    write_atomic(batch.root / "report.json", json.dumps(report, indent=2, default=str) + "\n")
    write_atomic(batch.root / "REPORT.md", markdown(report))
    return report


def markdown(report: dict) -> str:
    """REPORT.md across the references."""
    lines = [f"# batch: {len(report['ops'])} reference(s)", "",
             f"Wall time {report['wall_s']:.1f} s. Each op's run directory has its own REPORT.md.", "",
             "| op | outcome | configs served | turns | exported module |", "|---|---|---|---|---|"]
    for o in report["ops"]:
        served = sum(1 for r in o["configs"] if r["correct"])
        lines.append(f"| {o['task']} | {o['outcome'].replace('_', ' ')} | {served}/{len(o['configs'])} | "
                     f"{o.get('turns', '-')} | {('`' + o['exported_module'] + '`') if o['exported_module'] else '-'} |")
    lines += ["", "## Per op and config", "",
              "| op | config | evaluated at | verdict | attempt | ms | x eager | x compile |", "|---|---|---|---|---|---|---|---|"]
    for o in report["ops"]:
        for r in o["configs"]:
            verdict = ("target met" if r["meets_target"] else "correct, slower than the target") if r["correct"] \
                and o.get("timed") else ("correct" if r["correct"] else "**no correct kernel**")
            lines.append(f"| {o['task']} | {config_key(r['config'])} | {config_key(r['evaluated_at'])} | {verdict} | "
                         f"{r['attempt_id'] or '-'} | {cell(r['time_ms'], '.4f')} | {cell(r['speedup_eager'], '.2f')} | "
                         f"{cell(r['speedup_compiled'], '.2f')} |")
    errors = [o for o in report["ops"] if o["outcome"] in ("error", "reference_failed")]
    if errors:
        lines += ["", "## Errors", ""] + [f"- {o['task']}: {o['reason']}" for o in errors]
    lines += workers_markdown(report.get("workers"))
    return "\n".join(lines) + "\n"


__all__ = ["Batch", "BatchError", "FORMAT_VERSION", "axes_for", "expand", "markdown", "plan", "run"]
