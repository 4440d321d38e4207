"""The agent loop: draft -> evaluate -> feed back, turn after turn, persisted as it happens, resumable.

In: ``LoopOptions`` (the reference, the configs, the device, the budget), a ``RunStore``, a drafter, an evaluation
worker (``EvalWorker``, a ``tileagent.pool.Pool``, or anything with ``evaluate(EvalRequest) -> EvalResult``; a
``parallel`` attribute > 1 lets autotuning evaluate that many variants at once) and optionally an ``Archive``.
Out: ``Loop.run() -> Outcome``; the run directory holds every step (``tileagent.runstore``).
Guarantees:

- Turn 0 tries kernels already verified for this op (the archive, when ``reuse_archive``) on every config.
  Each later turn asks the drafter for ``candidates`` candidates, evaluates them on the configs that do not yet meet
  the target, and feeds the results back (``tileagent.feedback``) in the next turn's context (``tileagent.context``).
- Best per config: any fully checked correct config of any candidate (or autotuned variant) counts (on the CPU: at
  the GPU's sizes too, ``evaluator.full_size.stands_for_gpu_sizes``), unless the candidate raced somewhere
  (``RaceFault``: its structure is wrong whatever sizes passed); the fastest wins
  (untimed: the first, unless a later one costs the GPU less by ``feedback.untimed_cost`` at the GPU's sizes).
  A candidate correct on all of its configs is autotuned when timing is available (``tileagent.autotune``).
- Stops when every config meets the target (correct, and on CUDA at least ``target`` times faster than eager and
  torch.compile, or at the limit of its roofline and tied with them: ``tileagent.target``; on the CPU, correct,
  and at the GPU's sizes without spills, an idle GPU or a large tensor accessed an element at a time:
  ``feedback.untimed_cost``), after ``max_turns`` turns, when the drafters' tokens exceed
  ``budget_tokens``, or when the drafter gives up (``DrafterUnavailable``).
- A module identical to one that failed on the same configs is not evaluated again: its attempt gets that verdict,
  and its feedback says so (a model resending a kernel unchanged learns it at once, not after another evaluation).
- A module equal to an autotuned one up to its knobs' values (``autotune.search_space``), correct on the configs it
  would run, is not evaluated either (status "covered"): that tuning searched its variants (one cut short covers a
  module each of whose knob values it screened); its feedback says whose tuning covered it and asks for a change to
  the kernel itself. A module of that space that is evaluated is not tuned a second time.
- Resume: the loop replays the store's events; a recorded draft is not drafted again and a recorded evaluation is
  not run again (variants included), so a killed run continues where it stopped with the same turn numbers, token
  count and best kernels. A finished autotuning is replayed as it ran (the variants it screened, no more), not
  searched again under its time budget.
"""

from __future__ import annotations

import difflib
import json
import logging
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from tileagent.evaluator.records import RUN_TIMEOUT_S, ConfigResult, EvalRequest, EvalResult
from tileagent.evaluator.full_size import RULE as FULL_RUN_RULE, stands_for_gpu_sizes
from tileagent.evaluator.interpreter_sizes import RULE as INTERPRETER_RULE
from tileagent.evaluator.spec import ALL_DISTRIBUTIONS
from tileagent.archive import op_digest
from tileagent import autotune
from tileagent.configs import RunConfig, unique_evals
from tileagent.context import GENERIC_FAMILY, build_messages, family_of, pick_examples
from tileagent.target import meets_target
from tileagent.drafters.base import AttemptSummary, Draft, DrafterUnavailable, DraftTask
from tileagent.cpu_note import stated_configs
from tileagent.feedback import plan_launches, render_feedback, summary, untimed_cost
from tileagent.prompts import render
from tileagent.runstore import RunStore, config_key, source_digest

log = logging.getLogger("tileagent.loop")


class LoopOptions(BaseModel):
    """A run's settings (stored in run.json; ``--resume`` reuses them)."""

    reference: str = Field(description="absolute path of the reference file")
    configs: list[RunConfig]
    device: str = "cpu"
    max_turns: int = 8
    candidates: int = 2
    target: float = 1.0
    budget_tokens: int | None = None
    seed: int = 0
    seeds: int = 5
    tune: bool = True
    tune_seconds: float = Field(90.0, description="screening time per tuned candidate (tileagent.autotune)")
    reuse_archive: bool = True
    keep_going: bool = Field(False, description="evaluate each candidate on every config even after one fails "
                             "(batch: a kernel may serve some configs only)")
    compile_timeout_s: float = 120.0
    run_timeout_s: float = RUN_TIMEOUT_S  # tileagent eval's default too


class Best(BaseModel):
    """The kernel serving one config."""

    attempt_id: str
    source: str = Field(description="the candidate's source (tunables not assigned)")
    tunables: dict = Field(default_factory=dict)
    result: ConfigResult
    launches: list[dict] = Field(default_factory=list, description="its kernels' launches at the GPU's sizes of the "
                                 "configs it serves (``KernelResources.to_dict()`` from EvalResult.plans, with the "
                                 "config each is for as 'config'), [] when not sized")

    @property
    def untimed_cost(self) -> tuple:
        """What the GPU is sure to make slow, least first (for the CPU loop): ``feedback.untimed_cost``."""
        return untimed_cost(self.launches)

    @property
    def time_ms(self) -> float | None:
        return self.result.candidate.median_ms if self.result.candidate else None

    @property
    def assigned_source(self) -> str:
        """The source with the tunables assigned (``autotune.assign``), as written to ``best/<config>.py``."""
        return autotune.assign(self.source, self.tunables) if self.tunables else self.source


class Attempt(BaseModel):
    attempt_id: str
    turn: int
    draft: Draft
    result: EvalResult | None = None
    feedback: str = ""
    covered_by: str | None = Field(None, description="the attempt whose autotuning covered this module (not evaluated)")


class Outcome(BaseModel):
    outcome: str = Field(description="target_met | correct_untimed | correct_not_faster | partial | no_correct | "
                                     "not_drafted (the drafter gave up before any candidate)")
    reason: str
    best: dict[str, Best] = Field(description="config_key(eval config) -> Best")
    turns: int
    tokens: int
    attempts: int


MAX_DIFF_LINES = 60  # of the best kernel's diff against the one it replaced, in the prompt
EXIT_CODES = {"target_met": 0, "correct_untimed": 0, "correct_not_faster": 3, "partial": 4, "no_correct": 4,
              "not_drafted": 5}


class ReferenceFailed(Exception):
    """The reference itself failed inside an evaluation (status "spec_error": it raised, exited, crashed or hung the
    evaluation worker on a config its load-time check did not run). No candidate can be judged against it, so the
    loop stops: the attempt is not counted (no "evaluated" event, no feedback; ``--resume`` evaluates it again once
    the reference is fixed) and a "reference_failed" event records the message. ``message`` names the reference's
    file (and line, where known)."""

    def __init__(self, attempt_id: str, result: EvalResult):
        self.attempt_id, self.result, self.message = attempt_id, result, result.message
        super().__init__(f"the reference failed while {attempt_id} was evaluated: {result.message}")


class Loop:
    """One run of the agent loop (see the module docstring). ``on_event(kind, fields)`` reports progress."""

    def __init__(self, options: LoopOptions, store: RunStore, drafter, worker, archive=None,
                 on_event: Callable[[str, dict], None] | None = None):
        self.o, self.store, self.drafter, self.worker, self.archive = options, store, drafter, worker, archive
        self.on_event = on_event or (lambda kind, fields: None)
        self.reference_source = Path(options.reference).read_text()
        self.family = family_of(options.reference)
        self.op = op_digest(self.reference_source)
        self.attempts: dict[str, Attempt] = {}
        self.best: dict[str, Best] = {}
        self.replaced: dict[str, Best] = {}  # config key -> the best kernel the current best replaced
        self.failed_sources: dict[tuple, str] = {}  # (source sha256, configs, keep_going) -> the attempt that failed
        self.tokens, self.turn, self.cost_usd = 0, 0, 0.0
        self.memo_drafts: dict[int, list[dict]] = {}
        self.memo_evals: dict[str, dict] = {}
        self.memo_variants: dict[tuple, dict] = {}
        self.tuned: set[str] = set()
        self.tuned_screened: dict[str, int] = {}  # attempt -> variants its recorded tuning screened
        self.tuned_cut: set[str] = set()  # attempts whose tuning did not finish its search (time budget, no timing)
        self.tune_notes: dict[str, str] = {}  # attempt -> what its autotuning found, for the next turn's prompt
        self.fresh: list[ConfigResult] = []  # verdicts computed by this process (compared by identity)
        self.reverify_failed: list[str] = []
        self.gave_up: str | None = None
        for e in store.events():
            try:
                self._replay(e)
            except (KeyError, TypeError, ValueError, AttributeError) as err:  # pydantic's errors are ValueErrors
                log.warning("%s: skipping a malformed %r event (%s: %s)", store.events_path, e.get("event"),
                            type(err).__name__, str(err).splitlines()[0] if str(err) else "")
        self.turn = max(self.memo_drafts, default=0)

    def _replay(self, e: dict) -> None:
        """Remember one recorded event (checked field by field: a malformed one raises and is skipped)."""
        kind = e["event"]
        if kind == "drafted":
            turn = e["turn"]
            if not isinstance(turn, int) or isinstance(turn, bool) or turn < 0:
                raise ValueError(f"turn {turn!r} is not a turn number")
            self.memo_drafts[turn] = [Draft.model_validate(d).model_dump() for d in e["drafts"]]
        elif kind == "evaluated":
            aid = e["attempt_id"]
            if not isinstance(aid, str):
                raise ValueError(f"attempt_id {aid!r} is not a string")
            if e["result"] is not None:
                EvalResult.model_validate(e["result"])
            self.memo_evals[aid] = {"result": e["result"], "feedback": str(e["feedback"]),
                                    "source_sha256": e.get("source_sha256"), "covered_by": e.get("covered_by")}
        elif kind == "variant_evaluated":
            result = EvalResult.model_validate(e["result"]).model_dump(mode="json")
            self.memo_variants[(e["attempt_id"], e["variant"], e["phase"], e["configs_key"])] = {
                "result": result, "source_sha256": e.get("source_sha256"), "tunables": e.get("tunables") or {}}
        elif kind == "tuned":
            self._remember_tuning(str(e["attempt_id"]), e.get("screened"), e.get("note"))

    def _remember_tuning(self, aid: str, screened, note) -> None:
        """A finished autotuning of ``aid``, recorded or just run: the variants it screened (an int, else unknown) and
        whether its search was cut short (``note`` says why)."""
        self.tuned.add(aid)
        if isinstance(screened, int) and not isinstance(screened, bool) and screened >= 0:
            self.tuned_screened[aid] = screened
        if note:
            self.tuned_cut.add(aid)

    def _trusted(self, memo: dict, source: str | None, what: str) -> bool:
        """Whether a recorded verdict applies to ``source``: only for the kernel text whose hash it names."""
        digest = source_digest(source)
        if memo.get("source_sha256") == digest:
            return True
        named = memo.get("source_sha256")
        log.warning("%s: the recorded evaluation of %s %s; evaluating it again", self.store.events_path, what,
                    f"names kernel text sha256 {str(named)[:12]}..., but its text is {digest[:12]}..." if named
                    else "names no kernel text (no source_sha256)")
        return False

    # -- targets ----------------------------------------------------------------------------------------------------

    @property
    def timed(self) -> bool:
        return self.o.device.startswith("cuda")

    def meets_target(self, best: Best | None) -> bool:
        if best is None or not best.result.correct:
            return False
        if not self.timed:  # correct, and nothing the GPU is sure to make slow (played LLM session 36: 2352 B a
            return not any(best.untimed_cost[:3])  # thread in local memory, the CPU loop stopped at "correct")
        return meets_target(best.result, self.o.target)

    def pending(self) -> list[RunConfig]:
        """The configs whose best kernel does not meet the target yet."""
        return [rc for rc in self.o.configs if not self.meets_target(self.best.get(config_key(rc.eval)))]

    def pending_evals(self) -> list[dict]:
        """The eval configs of ``pending()``, else (every config meets the target) those of every config."""
        return unique_evals(self.pending()) or unique_evals(self.o.configs)

    # -- the loop ---------------------------------------------------------------------------------------------------

    def run(self) -> Outcome:
        reason = f"{self.o.max_turns} turn(s) done"
        if self.o.reuse_archive and self.archive is not None:
            self._turn_zero()
        for turn in range(1, self.o.max_turns + 1):
            if self._done():
                reason = "every config meets the target"
                break
            if self.o.budget_tokens is not None and self.tokens > self.o.budget_tokens:
                reason = f"token budget spent ({self.tokens} > {self.o.budget_tokens})"
                break
            self.turn = turn
            drafts = self._drafts(turn)
            if drafts is None:
                reason = f"the drafter gave up at turn {turn}"
                break
            for k, draft in enumerate(drafts):
                if not self.pending():
                    self.on_event("skipped", {"attempt_id": f"t{turn}-c{k}", "why": "every config meets the target"})
                    continue
                self._attempt(f"t{turn}-c{k}", turn, draft, keep_going=self.o.keep_going)
        else:
            if self._done():
                reason = "every config meets the target"
        return self._finish(reason)

    def _done(self) -> bool:
        """Whether every config meets the target, verdicts read from the run log checked again first: a resumed
        run must not stop on a timing that does not hold (a played 17 us kernel logged at 1.13x torch.compile ran
        at 0.97x when timed again; the run stopped, saying every config met the target, and exited 3)."""
        if self.pending():
            return False
        self._reverify()
        return not self.pending()

    def _turn_zero(self) -> None:
        """Verified kernels of this op (the reference's code, whatever its configs) from the archive, evaluated on
        every config."""
        from tileagent.archive import device_arch

        arch = device_arch(self.o.device)
        seen, drafts = set(), []
        for entry in self.archive.find(self.family, arch=arch, op=self.op):
            if entry.source not in seen and len(drafts) < 3:
                seen.add(entry.source)
                drafts.append(Draft(source=entry.source, response=f"archived kernel from {entry.run_dir}",
                                    label=f"archive: {entry.task} {config_key(entry.config)}"))
        if 0 not in self.memo_drafts and drafts:
            self.store.append("drafted", turn=0, drafts=[d.model_dump() for d in drafts])
            self.memo_drafts[0] = [d.model_dump() for d in drafts]
        if self.memo_drafts.get(0):  # played LLM 46: a rerun seeded an earlier run's kernel, and nothing said so
            self.on_event("archived", {"labels": [d["label"] for d in self.memo_drafts[0]]})
        for k, d in enumerate(self.memo_drafts.get(0, [])):
            if not self.pending():
                break
            self._attempt(f"t0-c{k}", 0, Draft.model_validate(d), keep_going=True, every=True)

    def _drafts(self, turn: int) -> list[Draft] | None:
        if turn in self.memo_drafts:
            drafts = [Draft.model_validate(d) for d in self.memo_drafts[turn]]
            self._count(drafts)
            self.on_event("drafted", {"turn": turn, "n": len(drafts), "tokens": self.tokens, "replayed": True})
            return drafts
        task = self.task(turn)
        prompt = self.store.write_json(f"attempts/t{turn}-c0/prompt.json", task.model_dump())
        self.on_event("drafting", {"turn": turn, "n": task.n, "configs": len(task.configs)})
        try:
            drafts = list(self.drafter.draft(task))[: max(1, task.n)]
        except DrafterUnavailable as e:
            self.store.append("drafter_failed", turn=turn, message=str(e))
            self.on_event("drafter_failed", {"turn": turn, "message": str(e)})
            self.gave_up = f"the drafter gave up at turn {turn}: {e}"
            return None
        if not drafts:
            self.store.append("drafter_failed", turn=turn, message="the drafter returned no drafts")
            return None
        for k, d in enumerate(drafts):
            adir = f"attempts/t{turn}-c{k}"
            if k:
                self.store.write(f"{adir}/prompt.json", prompt.read_text())
            self.store.write(f"{adir}/response.md", d.response or "")
            if d.source is not None:
                self.store.write(f"{adir}/candidate.py", d.source)
        self.store.append("drafted", turn=turn, drafts=[d.model_dump() for d in drafts])
        self._count(drafts)
        self.on_event("drafted", {"turn": turn, "n": len(drafts), "tokens": self.tokens})
        return drafts

    def _count(self, drafts: list[Draft]) -> None:
        self.tokens += sum(d.prompt_tokens + d.completion_tokens for d in drafts)
        self.cost_usd += sum(d.cost_usd for d in drafts)

    def task(self, turn: int) -> DraftTask:
        """The DraftTask of ``turn`` (context from the attempts so far)."""
        history = self.history()
        best = self.best_attempt()
        pending = self.pending_evals()
        note, listed = "", pending
        if not self.o.device.startswith("cuda"):
            real = stated_configs(self.o.configs, Path(self.o.reference))
            listed = self._interpreter_sizes(pending)
            note = ("Evaluated on the CPU interpreter, at smaller sizes than the GPU's: the free dims (FREE_DIMS) at "
                    "their SMALL_CONFIG sizes, and a config whose inputs and model tensors (a layer's weight), "
                    f"or its outputs, still hold more than 2**18 elements with {INTERPRETER_RULE}; {FULL_RUN_RULE}. Each config is "
                    f"checked on "
                    f"{self.o.seeds} seeds x {len(ALL_DISTRIBUTIONS)} input distributions and again at tail sizes "
                    "of its free dims, a few hundred runs, and the interpreter runs a launch's blocks one after "
                    "another (milliseconds a block for light work; a block that runs dozens of taps or a long loop per "
                    "element takes up to a second): a launch of many blocks, most of them empty at these short "
                    "sizes, can time out; size tiles from the shapes forward gets. The kernel "
                    "must work at every size of the free dims and at the configs it is made for (which a GPU checks "
                    f"and times):\n{real}")
        elif len(pending) < len(every := unique_evals(self.o.configs)):
            met = [c for c in every if c not in pending]
            note = (f"This turn checks your module (at these configs and their tail sizes) and times it on the "
                    f"{len(pending)} config(s) above, the ones that still miss the target; the other {len(met)} keep "
                    f"the earlier kernel that met it ("
                    + "; ".join(", ".join(f"{k}={v}" for k, v in c.items()) for c in met)
                    + "), so the module may change its schedule for the configs above only.")
        messages = build_messages(device=self.o.device, reference_path=self.o.reference,
                                  reference_source=self.reference_source, configs=listed, turn=turn,
                                  n=self.o.candidates, history=history, best=best, examples=self.examples(),
                                  config_note=note)
        return DraftTask(task_name=Path(self.o.reference).stem, reference_path=self.o.reference,
                         reference_source=self.reference_source, configs=pending, turn=turn, n=self.o.candidates,
                         messages=messages, history=history, device="cuda" if self.timed else "cpu",
                         run_dir=str(self.store.root), seed=self.o.seed)

    def _interpreter_sizes(self, configs: list[dict]) -> list[dict]:
        """``configs`` at the sizes the CPU interpreter checks them at (``interpreter_config``; each distinct one
        once), or ``configs`` themselves when the reference fails to load (the evaluation reports the error)."""
        from tileagent.evaluator.interpreter_sizes import interpreter_configs

        runs = interpreter_configs(self.o.reference, configs) or configs
        return [c for k, c in enumerate(runs) if c not in runs[:k]]

    def examples(self) -> list[tuple[str, str]]:
        archived = []
        if self.o.reuse_archive and self.archive is not None:  # --no-archive: runs stay independent
            seen = set()
            for e in sorted(self.archive.find(self.family), key=lambda e: e.arch == "cpu"):  # GPU-verified first
                if e.family == GENERIC_FAMILY and e.arch == "cpu" and e.op != self.op:
                    continue  # another op's kernel, only CPU-checked: not an example (played LLM session 44: a merge
                    # of attention states, 3 minutes old, was a rotary embedding's second example)
                if e.source not in seen:
                    seen.add(e.source)
                    speed = f", x{e.speedup_compiled:.2f} over torch.compile" if e.speedup_compiled else ""
                    archived.append((f"verified {e.family} kernel ({e.task}, {config_key(e.config)}, {e.arch}"
                                     f"{speed})", e.source))
        return pick_examples(self.family, archived, reference_source=self.reference_source)

    def history(self) -> list[AttemptSummary]:
        out = []
        for a in self.attempts.values():
            r = a.result
            comp = [c.speedup_compiled for c in (r.configs if r else []) if c.speedup_compiled]
            eager = [c.speedup_eager for c in (r.configs if r else []) if c.speedup_eager]
            out.append(AttemptSummary(attempt_id=a.attempt_id, turn=a.turn, label=a.draft.label,
                                      source=a.draft.source,
                                      status=r.status if r else "covered" if a.covered_by else "malformed",
                                      feedback=a.feedback + (f"\n\n{self.tune_notes[a.attempt_id]}"
                                                             if a.attempt_id in self.tune_notes else ""),
                                      correct=bool(r and r.status == "ok"),
                                      speedup_eager=min(eager) if eager else None,
                                      speedup_compiled=min(comp) if comp else None))
        return out

    def best_attempt(self) -> AttemptSummary | None:
        """The attempt serving the most configs (ties: the one seen first)."""
        counts: dict[str, int] = {}
        for b in self.best.values():
            counts[b.attempt_id.split("/")[0]] = counts.get(b.attempt_id.split("/")[0], 0) + 1
        if not counts:
            return None
        aid = max(counts, key=lambda k: counts[k])
        a = self.attempts[aid]
        return AttemptSummary(attempt_id=aid, turn=a.turn, label=f"serves {counts[aid]} of {len(self.o.configs)} "
                              f"configs; {summary(a.result)}", source=a.draft.source, status="ok", correct=True,
                              gains=self.gains(aid))

    def gains(self, aid: str) -> str:
        """What attempt ``aid`` gained over the kernels it replaced as the best, per config (timed runs only), and
        what changed: the diff against the kernel it replaced on the most configs. "" when it replaced none."""
        rows, replaced = [], {}
        for key, b in self.best.items():
            old = self.replaced.get(key)
            if b.attempt_id.split("/")[0] != aid or old is None or not (old.time_ms and b.time_ms):
                continue
            rows.append(f"- {key}: {old.time_ms:.4g} ms ({old.attempt_id}) -> {b.time_ms:.4g} ms, "
                        f"x{old.time_ms / b.time_ms:.2f}")
            replaced[old.attempt_id] = replaced.get(old.attempt_id, 0) + 1
        if not rows:
            return ""
        before = max(replaced, key=lambda k: replaced[k])
        old_source = self.attempts[before.split("/")[0]].draft.source
        diff = list(difflib.unified_diff(old_source.splitlines(), self.attempts[aid].draft.source.splitlines(),
                                         before, aid, n=1, lineterm=""))
        if len(diff) > MAX_DIFF_LINES:
            diff = diff[:MAX_DIFF_LINES] + [f"... ({len(diff) - MAX_DIFF_LINES} more diff lines)"]
        return ("What it gained over the kernels it replaced:\n" + "\n".join(rows) +
                f"\n\nWhat changed since {before}:\n```diff\n" + "\n".join(diff) + "\n```")

    # -- one attempt ------------------------------------------------------------------------------------------------

    def _attempt(self, aid: str, turn: int, draft: Draft, keep_going: bool = False, every: bool = False) -> None:
        configs = unique_evals(self.o.configs) if every else self.pending_evals()
        replayed = aid in self.memo_evals and self._trusted(self.memo_evals[aid], draft.source, aid)
        if replayed:
            e = self.memo_evals[aid]
            result = EvalResult.model_validate(e["result"]) if e["result"] else None
            feedback, covered = e["feedback"], e.get("covered_by")
        else:
            result, same, covered = None, None, None
            if draft.source is not None:
                path = self.store.write(f"attempts/{aid}/candidate.py", draft.source)
                same = self.failed_sources.get((source_digest(draft.source), repr(configs), keep_going))
                covered = None if same is not None else self._covered_by(draft.source, configs)
                if same is not None:  # an identical module failed on these configs: its verdict stands
                    result = self.attempts[same].result
                elif covered is None:
                    self.on_event("evaluating", {"attempt_id": aid, "configs": len(configs)})
                    result = self._evaluate(aid, self._request(path, configs, keep_going=keep_going))
                if result is not None:
                    self.store.write(f"attempts/{aid}/eval.json", result.model_dump_json(indent=2))
            if covered is not None:
                feedback = render("feedback.covered_by_tuning", attempt=covered, turn=self.attempts[covered].turn,
                                  knobs=", ".join(autotune.tunables_of(draft.source)),
                                  screened=f"{self.tuned_screened.get(covered, 'its')} variants"
                                  + ("; its search was cut short, but it screened each of these values"
                                     if covered in self.tuned_cut else ""))
            else:
                stated = [self._stated(c.config) for c in result.configs] if result is not None else None
                feedback = render_feedback(result, problem=draft.problem, device=self.o.device, target=self.o.target,
                                           stated=stated, asked=None if keep_going else configs)
            if same is not None:
                feedback = (f"This module is identical to {same} (turn {self.attempts[same].turn}), which failed on "
                            f"these configs, so it was not evaluated again. What that evaluation said:\n\n{feedback}")
            self.store.write(f"attempts/{aid}/feedback.md", feedback)
            self.store.append("evaluated", attempt_id=aid, source_sha256=source_digest(draft.source),
                              result=result.model_dump(mode="json") if result else None, covered_by=covered,
                              feedback=feedback, summary=_summary(result, draft.problem, covered))
            if result is not None:
                self.fresh.extend(result.configs)
        self.attempts[aid] = Attempt(attempt_id=aid, turn=turn, draft=draft, result=result, feedback=feedback,
                                     covered_by=covered)
        if result is not None and result.status != "ok":
            self.failed_sources.setdefault((source_digest(draft.source), repr(configs), keep_going), aid)
        self.on_event("evaluated", {"attempt_id": aid, "summary": _summary(result, draft.problem, covered),
                                    "replayed": replayed, "label": draft.label})
        if result is None:
            return
        # played LLM 48: a kernel that raced at one config served another, checked in one block and never run at
        # its own sizes (a failure elsewhere skips those runs), and was exported for 6300 blocks
        raced = (result.failure or {}).get("exception") == "RaceFault"
        partial = not self.timed and result.status != "ok"
        for c in result.configs:
            if c.correct and not raced and (not partial or stands_for_gpu_sizes(c, self._stated(c.config))):
                self._offer(self._best(aid, draft.source, result, c))
        if result.status == "ok" and not keep_going:  # a resumed run too: this check is not in its log
            self._take_over_from_wrong(aid, draft.source, self.store.root / "attempts" / aid / "candidate.py")
        correct = [c for c in result.configs if c.correct]
        if self.o.tune and self.timed and correct and autotune.tunables_of(draft.source):
            searched = self._tuned_space(draft.source, [c.config for c in correct])
            if searched is None:
                self._tune(aid, draft.source, result.model_copy(update={"configs": correct}))
            else:  # evaluated (values a search cut short never reached), but its space is not searched twice
                self.on_event("not_tuned", {"attempt_id": aid, "tuned": searched})

    def _covered_by(self, source: str, configs: list[dict]) -> str | None:
        """The attempt whose autotuning already searched the space of ``source`` (``_tuned_space``) and either
        finished its search or, cut short, screened each of its knob values (in some variant: coordinate descent's
        first round visits every value of every knob); None when there is none, or nothing is tuned (the CPU,
        --no-tune). Such a module is not evaluated: a second search of the same space would cost as much again (up
        to ``--tune-seconds``) for the variants the first one screened."""
        aid = self._tuned_space(source, configs)
        if aid is None or aid not in self.tuned_cut:  # none, or its search finished
            return aid
        knobs = autotune.tunables_of(source)
        screened = [m.get("tunables") or {} for (t, _, phase, _), m in self.memo_variants.items()
                    if t == aid and phase == "screen"]
        screened.append(autotune.current_values(self.attempts[aid].draft.source, knobs))  # the tuned module itself
        own = autotune.current_values(source, knobs)
        return aid if all(any(s.get(k) == v for s in screened) for k, v in own.items()) else None

    def _tuned_space(self, source: str, configs: list[dict]) -> str | None:
        """The first attempt whose autotuning searched the space of ``source`` (``autotune.search_space``: the same
        module up to its knobs' values; the built-in drafter's schedule variants of one template are such modules)
        on every config of ``configs``, correct on each; None when there is none, or nothing is tuned."""
        if not (self.o.tune and self.timed):
            return None
        space = autotune.search_space(source)
        if space is None:
            return None
        wanted = {config_key(c) for c in configs}
        for aid, a in self.attempts.items():
            if aid in self.tuned and a.result is not None and autotune.search_space(a.draft.source) == space and \
                    wanted <= {config_key(c.config) for c in a.result.configs if c.correct}:
                return aid
        return None

    def _evaluate(self, aid: str, request: EvalRequest) -> EvalResult:
        """The worker's result for ``request``; raises ReferenceFailed (after recording a "reference_failed" event)
        when the reference, not the candidate, failed."""
        result = self.worker.evaluate(request)
        if result.status == "spec_error":
            self.store.append("reference_failed", attempt_id=aid, message=result.message, failure=result.failure)
            self.on_event("reference_failed", {"attempt_id": aid, "message": result.message})
            raise ReferenceFailed(aid, result)
        return result

    def _stated(self, checked: dict) -> list[dict]:
        """The configs as the reference states them whose check runs at ``checked`` (on the CPU, several configs can
        come down to one)."""
        return [rc.spec for rc in self.o.configs if rc.eval == checked]

    def _request(self, path: Path, configs: list[dict], *, seeds: int | None = None, distributions=None,
                 trials: int | None = None, keep_going: bool = False) -> EvalRequest:
        gpu_sizes = [spec for c in configs for spec in (self._stated(c) or [c])]
        return EvalRequest(kernel_path=str(path.resolve()), reference_path=self.o.reference, configs=configs,
                           plan_configs=gpu_sizes if gpu_sizes != configs else None,  # CPU: the GPU's sizes compile
                           device=self.o.device, seeds=seeds or self.o.seeds, distributions=distributions,
                           timing=True, timing_trials=trials, keep_going=keep_going,
                           compile_timeout_s=self.o.compile_timeout_s, run_timeout_s=self.o.run_timeout_s)

    def _best(self, aid: str, source: str, result: EvalResult, c: ConfigResult) -> Best:
        sizes = self._stated(c.config) or [c.config]  # the GPU's
        return Best(attempt_id=aid, source=source, result=c,
                    launches=plan_launches([p for p in result.plans if p.get("config") in sizes]))

    def _take_over_from_wrong(self, aid: str, source: str, path: Path) -> None:
        """Configs served by a kernel that computed wrong values on another config are checked with ``aid``, correct
        on every config it was asked; it serves those it passes, whatever its speed (played LLM 46b: a float32
        batchnorm failed on a channel of 1e11 values and kept serving the config whose draws it had passed)."""
        wrong = {a for a, x in self.attempts.items() if a != aid and x.result and x.result.status == "mismatch"}
        keys = [k for k, b in self.best.items() if b.attempt_id.split("/")[0] in wrong]
        if keys:
            result = self._evaluate(f"{aid} (on {'; '.join(keys)})", self._request(
                path, [self.best[k].result.config for k in keys], keep_going=True))
            self.fresh.extend(result.configs)
            for c in result.configs:
                if c.correct:
                    self._offer(self._best(aid, source, result, c), force=True)

    def _offer(self, b: Best, force: bool = False) -> bool:
        key = config_key(b.result.config)
        old = self.best.get(key)
        untimed_better = old is not None and old.time_ms is None and b.time_ms is None and \
            b.untimed_cost < old.untimed_cost  # on the CPU: the first, unless a later one costs the GPU less
        if old is not None and not force and not untimed_better and \
                (b.time_ms is None or (old.time_ms is not None and old.time_ms <= b.time_ms)):
            return False
        if old is not None and old.attempt_id.split("/")[0] != b.attempt_id.split("/")[0]:
            self.replaced[key] = old
        self.best[key] = b
        self.on_event("best", {"config": b.result.config, "attempt_id": b.attempt_id, "time_ms": b.time_ms,
                               "speedup_compiled": b.result.speedup_compiled,
                               "evaluated_at": getattr(b.result, "evaluated_at", None),
                               "serves": self._stated(b.result.config)})
        return True

    def _tune(self, aid: str, source: str, base: EvalResult) -> None:
        configs = [c.config for c in base.configs]
        self.on_event("tuning", {"attempt_id": aid, "knobs": autotune.tunables_of(source)})

        def evaluate(values: dict, phase: str, cfgs: list[dict]) -> EvalResult:
            vkey = autotune.variant_key(values)
            ckey = json.dumps(cfgs, sort_keys=True)
            text = autotune.assign(source, values)
            memo = self.memo_variants.get((aid, vkey, phase, ckey))
            if memo is not None and self._trusted(memo, text, f"{aid} variant {vkey} ({phase})"):
                return EvalResult.model_validate(memo["result"])
            path = self.store.write(f"attempts/{aid}/tune/{vkey}.py", text)
            screen = phase == "screen"
            request = self._request(path, cfgs, seeds=autotune.SCREEN_SEEDS if screen else None,
                                    distributions=["normal"] if screen else None,
                                    trials=autotune.SCREEN_TRIALS if screen else None, keep_going=True)
            result = self._evaluate(f"{aid} variant {vkey} ({phase})", request)
            self.store.write(f"attempts/{aid}/tune/{vkey}.{phase}.json", result.model_dump_json(indent=2))
            self.store.append("variant_evaluated", attempt_id=aid, variant=vkey, tunables=values, phase=phase,
                              configs_key=ckey, source_sha256=source_digest(text),
                              result=result.model_dump(mode="json"), summary=summary(result))
            self.fresh.extend(result.configs)
            self.memo_variants[(aid, vkey, phase, ckey)] = {"result": result.model_dump(mode="json"),
                                                            "source_sha256": source_digest(text), "tunables": values}
            self.on_event("variant", {"attempt_id": aid, "variant": vkey, "phase": phase, "summary": summary(result)})
            return result

        # a finished tuning, replayed: the same variants in the same order (the recorded results choose the same
        # path), as many as it screened; not a new search with the time budget, which replayed results would barely
        # touch (the variants it had no time for would be evaluated now)
        replayed = self.tuned_screened.get(aid)
        bounds = {"max_variants": replayed, "max_seconds": None} if replayed is not None else \
            {"max_seconds": self.o.tune_seconds}
        tuned = autotune.autotune(source, configs, base, evaluate, parallel=getattr(self.worker, "parallel", 1),
                                  **bounds)
        default = tuned_default(source)
        self.tune_notes[aid] = tuning_note(tuned, default, base)
        for w in tuned.winners.values():
            if w.result.correct:
                self._offer(Best(attempt_id=f"{aid}/{w.variant}" if w.values != default else aid,
                                 source=source, tunables=w.values, result=w.result))
        if aid not in self.tuned:
            self.store.append("tuned", attempt_id=aid, screened=tuned.screened, note=tuned.note,
                              winners={k: {"variant": w.variant, "tunables": w.values,
                                           "time_ms": autotune.time_of(w.result)} for k, w in tuned.winners.items()})
            self._remember_tuning(aid, tuned.screened, tuned.note)
        self.on_event("tuned", {"attempt_id": aid, "screened": tuned.screened, "note": tuned.note})

    # -- the end ----------------------------------------------------------------------------------------------------

    def _reverify(self) -> None:
        """Check again every best kernel whose verdict was read from the run log rather than computed here (a
        resumed run), on its configs, before anything is exported or archived: the log can be edited. A config
        whose kernel is no longer correct loses it (``reverify_failed`` says which, with a warning); the others
        take the fresh result (and timings)."""
        stale: dict[str, list[str]] = {}
        for key, b in self.best.items():
            if not any(b.result is r for r in self.fresh):
                stale.setdefault(b.assigned_source, []).append(key)
        for text, keys in stale.items():
            digest = source_digest(text)
            path = self.store.write(f"reverify/{digest[:16]}.py", text)
            configs = [self.best[k].result.config for k in keys]
            ids = sorted({self.best[k].attempt_id for k in keys})
            self.on_event("evaluating", {"attempt_id": f"{', '.join(ids)} (re-check)", "configs": len(configs)})
            result = self._evaluate(f"{', '.join(ids)} (re-check)", self._request(path, configs, keep_going=True))
            self.store.append("reverified", source_sha256=digest, attempt_ids=ids, configs=configs,
                              result=result.model_dump(mode="json"), summary=summary(result))
            checked = {config_key(c.config): c for c in result.configs}
            for k in keys:
                c = checked.get(k)
                if c is not None and c.correct:
                    self.best[k] = self.best[k].model_copy(update={"result": c})
                    self.fresh.append(c)
                    continue
                why = (c.notes[0] if c is not None and c.notes else result.message) or result.status
                log.warning("the recorded result of %s on %s did not hold when checked again (%s): it serves no "
                            "config and is not exported", self.best[k].attempt_id, k, why)
                self.reverify_failed.append(f"{self.best[k].attempt_id} on {k}: {why}")
                del self.best[k]

    def _finish(self, reason: str) -> Outcome:
        self._reverify()
        covered = [rc for rc in self.o.configs if config_key(rc.eval) in self.best]
        if len(covered) == len(self.o.configs):
            if not self.timed:
                outcome = "correct_untimed"
            else:
                outcome = "target_met" if not self.pending() else "correct_not_faster"
        elif not covered and not self.attempts and self.gave_up:
            outcome = "not_drafted"  # no drafter could draft it: distinct from kernels that were wrong
        else:
            outcome = "partial" if covered else "no_correct"
        out = Outcome(outcome=outcome, reason=self.gave_up or reason, best=self.best,
                      turns=self.turn, tokens=self.tokens, attempts=len(self.attempts))
        self.store.append("finished", outcome=outcome, reason=out.reason, turns=out.turns, tokens=out.tokens)
        return out


def _summary(result: EvalResult | None, problem: str | None, covered: str | None) -> str:
    """The one-line verdict of an attempt: ``feedback.summary``'s, or that another attempt's autotuning covered it."""
    return f"not evaluated: {covered}'s autotuning screened its knob values" if covered else summary(result, problem)


def finalize(loop: Loop, outcome: Outcome, command: str = "generate", export: bool = True,
             workers: dict | None = None) -> dict[str, str]:
    """Write the run's outputs: ``best/<config>.py`` (each config's kernel, knobs assigned), ``best.py`` (the kernel
    serving most configs), the exported module (``tileagent.export``, when any config is served), archive entries,
    REPORT.md and report.json (with ``workers``: the evaluation workers' busy times, ``tileagent.pool.Pool.report``).
    Returns {what: path}. An export failure is logged and reported, not raised."""
    from tileagent import report

    o, store, outputs = loop.o, loop.store, {}
    for rc in o.configs:
        b = outcome.best.get(config_key(rc.eval))
        if b is not None:
            store.write(f"best/{config_key(rc.eval)}.py", b.assigned_source)
    top = loop.best_attempt()
    if top is not None:
        outputs["best kernel"] = str(store.write("best.py", top.source))
    if export and outcome.best:
        try:
            from tileagent.export import ExportEntry, export_module

            entries = [ExportEntry(config=rc.spec, source=b.source, tunables=b.tunables, time_ms=b.time_ms)
                       for rc in o.configs if (b := outcome.best.get(config_key(rc.eval))) is not None]
            # kernels serve CUDA tensors; CPU tensors run the reference (the interpreter is a checking tool)
            outputs["exported module"] = str(export_module(o.reference, entries, store.root))
        except Exception as e:  # noqa: BLE001 - the kernels are on disk either way; the report says what failed
            log.warning("export failed: %s: %s", type(e).__name__, e)
            outputs["export failed"] = f"{type(e).__name__}: {e}"
    if loop.archive is not None and outcome.best:
        outputs["archive"] = str(loop.archive.root)
        _archive(loop, outcome)
    table = report.rows(o, outcome, loop.meets_target)
    from tileagent.context import device_words

    md_path = store.root / "REPORT.md"
    outputs["report"] = str(md_path)
    outputs["report (JSON)"] = str(store.root / "report.json")
    data = report.build(o, outcome, table, command=command, device=device_words(o.device), cost_usd=loop.cost_usd,
                        outputs=outputs, workers=workers)
    report.write(store, data)
    return outputs


def _archive(loop: Loop, outcome: Outcome) -> None:
    from tileagent.evaluator.spec import load_spec
    from tileagent.archive import ArchiveEntry, device_arch, reference_dtype

    try:
        spec = load_spec(loop.o.reference, check=False)
        dtype = reference_dtype(spec, loop.o.configs[0].eval)
        arch = device_arch(loop.o.device)
    except Exception as e:  # noqa: BLE001 - archiving is a convenience for later runs
        log.warning("not archiving: %s: %s", type(e).__name__, e)
        return
    for rc in loop.o.configs:
        b = outcome.best.get(config_key(rc.eval))
        if b is None:
            continue
        loop.archive.put(ArchiveEntry(family=loop.family, dtype=dtype, arch=arch, config=rc.spec,
                                      task=Path(loop.o.reference).stem, op=loop.op, tunables=b.tunables,
                                      time_ms=b.time_ms,
                                      speedup_eager=b.result.speedup_eager,
                                      speedup_compiled=b.result.speedup_compiled, run_dir=str(loop.store.root),
                                      attempt_id=b.attempt_id, source=b.assigned_source))


def tuning_note(tuned: "autotune.TuneResult", default: dict, base: EvalResult | None = None) -> str:
    """What an autotuning found, as the next turn's prompt says it: variants screened and, per config, the fastest
    fully checked variant (or the module as written) with its time, its speedup over torch.compile and, given the
    module's own evaluation ``base``, over the module as written (so that a gain within noise reads as one)."""
    head = f"Autotuning of TUNABLES: {tuned.screened} variant(s) screened" + (f" ({tuned.note})" if tuned.note else "")
    if not tuned.winners:
        return head + "."
    own = {config_key(c.config): autotune.time_of(c) for c in (base.configs if base else [])}
    rows = []
    for key, w in tuned.winners.items():
        which = "the module as written" if w.values == default else \
            ", ".join(f"{k}={v!r}" for k, v in w.values.items())
        ms, x = autotune.time_of(w.result), w.result.speedup_compiled
        parts = [f"- {key}: {which}"] + ([f"{ms:.4g} ms"] if ms else []) + \
            ([f"x{x:.3g} over torch.compile"] if x else [])
        if ms and own.get(key) and w.values != default:
            parts.append(f"x{own[key] / ms:.3f} over the module as written")
        rows.append(", ".join(parts))
    return head + "; the fastest fully checked variant per config:\n" + "\n".join(rows)


def tuned_default(source: str) -> dict:
    """The default variant of ``source`` (every knob at the value the source assigns)."""
    return autotune.current_values(source, autotune.tunables_of(source) or {})


__all__ = ["EXIT_CODES", "Best", "Loop", "LoopOptions", "Outcome", "finalize", "tuned_default"]
