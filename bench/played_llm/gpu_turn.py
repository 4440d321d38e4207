"""One "GPU turn" of the played LLM (issue 19): advance every op's agent-loop run on the GPU by the turns whose
answers exist, stop each run where it waits for the player, pack the run directories into one file.

No LLM endpoint exists: a helper plays the LLM through ``--provider file``, answering the prompt files of
``RUN/exchange/``. The GPU is reachable only through one-shot commands, so a turn goes like this:

1. (device) ``python bench/played_llm/gpu_turn.py --out "$OUT"`` with ``bench/played_llm/gpu_runs`` carried. For each
   op (RUNS/OP is its run directory), in order (ops "not reached" by the last call first):
   - no run yet: seed ``exchange/t1-c1.response.md`` (unless present) from the op's latest CPU-correct answer
     (``SEEDS``, the ``ALL`` list of run_gpu.sh) wrapped as an LLM answer, and start ``python -m tileagent generate
     refs/OP.py --provider file --device DEVICE --candidates 1 --max-turns 6 --seeds 2 --tune-seconds 15
     --no-archive --out RUNS/OP``;
   - a run waiting for an answer (a ``tK-c1.prompt.md`` without its ``tK-c1.response.md``): skipped, nothing runs;
   - a run that ended (target met; or finished with no turn left): skipped;
   - else ``generate --resume RUNS/OP refs/OP.py --max-turns 6`` (the reference path given again: the checkout
     may sit elsewhere than where the run started). The loop replays the recorded turns (no evaluation is run again)
     and uses each existing response at once.
   The run is watched: it ends by itself (target met, turns done), or a new prompt without a response appears (the
   loop waits for the player: the run is stopped with SIGINT, then SIGTERM and SIGKILL to its process group after
   ``--grace`` s), or it passes the op's time cap (stopped the same way; the unfinished evaluation is redone next
   call). An op that cannot start within the overall ``--budget`` is "not reached" and goes first next call.
2. RUNS is packed into ``OUT/gpu_runs.tgz`` (paths relative to RUNS; temporary files left by a kill are left out)
   and the table is printed last (also ``gpu_turn_summary.txt`` in OUT and in RUNS): op, turns so far,
   the state (target met / waiting for turn K / ended: OUTCOME / not reached / cut at the cap / error), then per
   turn: correct? and the min speedup over torch.compile across configs with each config's speedup, and the best per
   config so far (tuned variants included).
3. (here) ``tar -xzf gpu_runs.tgz -C bench/played_llm/gpu_runs``: the player answers each ``tK-c1.prompt.md``
   (write ``tK-c1.response.md``), and the next device call resumes.

Tuning: played answers declare TUNABLES, and the loop's autotuner needs no drafter (it evaluates variants of the
answer), so it works with file answers; ``--tune-seconds 15`` bounds its screening (``0`` passes ``--no-tune``).

Replay (``--replay --runs DIR``): new runs start with every answer the player wrote (``answers/OP/gpu_turns/``), so
the loop evaluates the played turns again on the current code, tuning included, and stops where the recording ends.

Usage (repository root):
    python bench/played_llm/gpu_turn.py --out "$OUT"                      # on the H200: every op, 480 s budget
    python bench/played_llm/gpu_turn.py --ops rotary,swiglu --budget 300 --out "$OUT"
    python bench/played_llm/gpu_turn.py --device cpu --runs /tmp/r --ops causal_softmax --out /tmp/o   # CPU check
    python bench/played_llm/gpu_turn.py --table-only                      # the table of RUNS as it is, no run
Exit code: 0 (the table says what happened to each op); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# op -> its latest CPU-correct answer (bench/played_llm/run_gpu.sh, the ALL list: session 3's for the ops replayed
# there); tests/test_played_gpu_turn.py checks that the two lists agree
SEEDS = {
    "rotary": "answers/rotary/turn2.py",
    "swiglu": "answers/swiglu/turn1.py",
    "int8_quant": "answers/int8_quant/turn1.py",
    "add_layernorm": "answers/add_layernorm/turn1.py",
    "logsumexp": "answers/logsumexp/turn1.py",
    "l2norm": "answers/l2norm/turn1.py",
    "seq_mean": "answers/seq_mean/turn1.py",
    "causal_softmax": "answers/causal_softmax/session3/turn1.py",
    "groupnorm": "answers/groupnorm/session3/turn1.py",
    "cross_entropy": "answers/cross_entropy/session3/turn1.py",
    "masked_mean_pool": "answers/masked_mean_pool/session3/turn1.py",
    "embed_pos": "answers/embed_pos/session3/turn1.py",
}
STATE_FILE = "gpu_turn_state.json"  # in RUNS: the ops not reached by the last call (they go first next call)
SUMMARY_FILE = "gpu_turn_summary.txt"
LOG_FILE = "gpu_turn.log"  # in each run directory: the generate output of every call, appended
SKIP_IN_TAR = (".tmp",)


def seed_response(op: str) -> str:
    """The op's seeded turn-1 answer: its CPU-correct module as an LLM answer (one ```python block)."""
    rel = SEEDS[op]
    module = (HERE / rel).read_text().rstrip("\n")
    return (f"The kernel below is the one that was correct on the CPU interpreter in the played sessions "
            f"(bench/played_llm/{rel}), now evaluated on every config.\n\n```python\n{module}\n```\n")


def seed_exchange(op: str, run: Path, replay: bool) -> list[str]:
    """Put the answers a new run starts with in ``run/exchange``: with ``replay`` every recorded one
    (``answers/OP/gpu_turns/``), and the seeded turn-1 answer unless one is there. Returns the file names."""
    exchange = run / "exchange"
    exchange.mkdir(parents=True, exist_ok=True)
    if replay:
        for recorded in sorted((HERE / "answers" / op / "gpu_turns").glob("t*-c1.response.md")):
            (exchange / recorded.name).write_text(recorded.read_text())
    first = exchange / "t1-c1.response.md"
    if not first.exists():
        tmp = first.with_name(first.name + ".tmp")
        tmp.write_text(seed_response(op))
        os.replace(tmp, first)
    return sorted(p.name for p in exchange.iterdir())


# -- reading a run directory ------------------------------------------------------------------------------------------

def events(run: Path) -> list[dict]:
    """The complete events of ``run`` (a torn or garbled line is skipped, as the run store does)."""
    path = run / "events.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().split("\n")[:-1]:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and isinstance(e.get("event"), str):
            out.append(e)
    return out


def finished(evs: list[dict]) -> dict | None:
    """The "finished" event when nothing but a resume came after it (as ``tileagent.cli`` decides), else None."""
    last = None
    for e in evs:
        if e["event"] == "finished":
            last = e
        elif e["event"] != "run_resumed":
            last = None
    return last


def waiting_turn(run: Path) -> int | None:
    """The turn whose prompt is written and whose response is not (the loop waits for the player), else None.
    A prompt counts once both its .md and .json are there (the drafter writes them in that order)."""
    turns = []
    for md in (run / "exchange").glob("t*-c1.prompt.md"):
        stem = md.name[: -len(".prompt.md")]
        try:
            turn = int(stem[1:].split("-")[0])
        except ValueError:
            continue
        if md.with_name(stem + ".prompt.json").is_file() and not md.with_name(stem + ".response.md").is_file():
            turns.append(turn)
    return max(turns) if turns else None


def stored_max_turns(run: Path) -> int | None:
    try:
        return json.loads((run / "run.json").read_text())["options"]["loop"]["max_turns"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def state_before(run: Path, max_turns: int) -> tuple[str, str]:
    """(what to do, why): ("new" | "resume" | "skip", a state for the table)."""
    if not (run / "run.json").is_file():
        return "new", "new"
    evs = events(run)
    end = finished(evs)
    if end is not None:
        if end.get("outcome") in ("target_met", "correct_untimed"):  # correct_untimed: the CPU's target
            return "skip", "target met"
        if max_turns <= (stored_max_turns(run) or 0):
            return "skip", f"ended: {end.get('outcome')} ({end.get('reason')})"
    k = waiting_turn(run)
    if k is not None:
        return "skip", f"waiting for turn {k}"
    return "resume", "resume"


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def turn_lines(run: Path) -> tuple[int, list[str], str]:
    """(turns drafted, one line per evaluated attempt, the best speedup over torch.compile per config so far)."""
    evs = events(run)
    drafted = max((e["turn"] for e in evs if e["event"] == "drafted" and isinstance(e.get("turn"), int)),
                  default=0)
    lines, best = [], {}
    seen = set()
    for e in evs:
        if e["event"] == "evaluated" and e.get("attempt_id") not in seen:
            seen.add(e.get("attempt_id"))
            r = e.get("result") or {}
            cfgs = r.get("configs") or []
            ok = r.get("status") == "ok" and cfgs and all(c.get("correct") for c in cfgs)
            xs = [c.get("speedup_compiled") for c in cfgs]
            timed = [x for x in xs if x is not None]
            if ok and timed:
                verdict = f"ok ({len(cfgs)}/{len(cfgs)}) min {min(timed):.2f}x compile [{' '.join(_x(x) for x in xs)}]"
            elif ok:
                verdict = f"ok ({len(cfgs)}/{len(cfgs)}), not timed"
            else:
                why = (r.get("message") or e.get("summary") or "no kernel").replace("\n", " ")
                verdict = f"{r.get('status') or 'no result'}: {why[:90]}"
            lines.append(f"{e.get('attempt_id')}: {verdict}")
        results = []
        if e["event"] in ("evaluated", "reverified") or (e["event"] == "variant_evaluated" and e.get("phase") == "full"):
            results = (e.get("result") or {}).get("configs") or []
        for c in results:
            if c.get("correct") and c.get("speedup_compiled") is not None:
                key = ",".join(f"{k}={v}" for k, v in (c.get("config") or {}).items())
                best[key] = max(best.get(key, 0.0), c["speedup_compiled"])
    best_text = " ".join(f"{k}:{v:.2f}" for k, v in best.items())
    return drafted, lines, best_text


def table(runs: Path, ops: list[str], states: dict[str, str]) -> str:
    rows = [f"{'op':17s} {'turns':>5s}  state / per attempt: correct?, x torch.compile (min [per config])"]
    for op in ops:
        run = runs / op
        drafted, lines, best = turn_lines(run) if run.is_dir() else (0, [], "")
        rows.append(f"{op:17s} {drafted:5d}  {states.get(op, '-')}")
        rows += [f"{'':17s} {'':5s}    {line}" for line in lines]
        if best:
            rows.append(f"{'':17s} {'':5s}    best so far (x compile, tuned included): {best}")
    return "\n".join(rows)


# -- running one op ---------------------------------------------------------------------------------------------------

def stop(proc: subprocess.Popen, grace: float) -> int:
    """Stop ``proc`` (started in its own session): SIGINT to it (the CLI saves and exits 130), then SIGTERM and
    SIGKILL to its process group after ``grace`` and 5 s. Returns its exit code."""
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, 5.0), (signal.SIGKILL, 30.0)):
        try:
            if sig == signal.SIGINT:
                proc.send_signal(sig)
            else:
                os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            return proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()


def reap_group(pgid: int) -> None:
    """Kill what is left of a finished run's own process group (evaluation workers a crash orphaned)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_op(op: str, run: Path, action: str, a, cap_s: float) -> str:
    """Start or resume ``op``'s run, watch it, stop it where it waits for the player; returns its state."""
    ref = HERE / "refs" / f"{op}.py"
    if action == "new":
        seed_exchange(op, run, a.replay)
        tune = ["--no-tune"] if a.tune_seconds <= 0 else ["--tune-seconds", str(a.tune_seconds)]
        cmd = ["generate", str(ref), "--provider", "file", "--device", a.device, "--candidates", "1",
               "--max-turns", str(a.max_turns), "--seeds", str(a.seeds), *tune, "--no-archive", "--out", str(run)]
        for c in a.configs or []:
            cmd += ["--configs", c]
    else:
        cmd = ["generate", "--resume", str(run), str(ref), "--max-turns", str(a.max_turns)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
           "COLUMNS": "160"}
    start = time.monotonic()
    with open(run / LOG_FILE, "a") as log:
        log.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} python -m tileagent {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen([sys.executable, "-m", "tileagent", *cmd], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        print(f"[gpu_turn] {op}: {action} (pid {proc.pid}, cap {cap_s:.0f} s)", file=sys.stderr, flush=True)
        why = None
        while True:
            rc = proc.poll()
            if rc is not None:
                break
            k = waiting_turn(run)
            if k is not None:
                why = f"waiting for turn {k}"
                rc = stop(proc, a.grace)
                break
            if time.monotonic() - start > cap_s:
                why = f"cut at the cap ({cap_s:.0f} s; resumes next call)"
                rc = stop(proc, a.grace)
                break
            time.sleep(a.poll)
        reap_group(proc.pid)
        log.write(f"===== exit {rc} after {time.monotonic() - start:.0f} s ({why or 'ended by itself'})\n")
    took = f" [{time.monotonic() - start:.0f} s]"
    if why is not None:
        return why + took
    end = finished(events(run))
    if end is not None and rc in (0, 3, 4, 5):
        return ("target met" if end.get("outcome") in ("target_met", "correct_untimed") else
                f"ended: {end.get('outcome')} ({end.get('reason')})") + took
    tail = [line for line in (run / LOG_FILE).read_text().splitlines() if line.strip()
            and not line.startswith("=====")]
    return f"error: exit {rc}: {(tail[-1] if tail else '')[:100]}" + took


def pack(runs: Path, out: Path) -> Path:
    """RUNS as one gzip'd tar under ``out`` (paths relative to RUNS; temporary files left out)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu_runs.tgz"

    def keep(info: tarfile.TarInfo):
        name = Path(info.name).name
        if name.endswith(SKIP_IN_TAR) or name == "__pycache__" or (name.startswith(".") and name != "."):
            return None
        return info

    with tarfile.open(path, "w:gz") as tar:
        for child in sorted(runs.iterdir()):
            tar.add(child, arcname=child.name, filter=keep)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, default=HERE / "gpu_runs", help="the run directories (one per op)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "/tmp/gpu_turn_out"),
                    help="where gpu_runs.tgz and gpu_turn_summary.txt go (default $OUT)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--ops", help=f"comma-separated ops (default every op: {', '.join(SEEDS)})")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for the whole call, packing included")
    ap.add_argument("--op-cap", type=float, default=300.0, help="seconds at most for one op")
    ap.add_argument("--min-start", type=float, default=45.0,
                    help="an op starts only with this much budget left (else 'not reached')")
    ap.add_argument("--max-turns", type=int, default=6)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--tune-seconds", type=float, default=15.0, help="autotuning screening per candidate (0: --no-tune)")
    ap.add_argument("--configs", action="append", help="passed to generate --configs for a new run (repeatable)")
    ap.add_argument("--grace", type=float, default=15.0, help="seconds between SIGINT and SIGTERM when stopping a run")
    ap.add_argument("--poll", type=float, default=0.5)
    ap.add_argument("--replay", action="store_true",
                    help="new runs start with every recorded answer (answers/OP/gpu_turns/): the played turns again, "
                         "on this checkout's compiler and evaluator; a run stops where the recording ends")
    ap.add_argument("--table-only", action="store_true", help="print the table of RUNS; run and pack nothing")
    a = ap.parse_args(argv)
    ops = a.ops.split(",") if a.ops else list(SEEDS)
    unknown = [op for op in ops if op not in SEEDS]
    if unknown:
        ap.error(f"unknown op(s) {', '.join(unknown)}; known: {', '.join(SEEDS)}")
    a.runs.mkdir(parents=True, exist_ok=True)
    runs = a.runs.resolve()
    if a.table_only:
        print(table(runs, ops, {op: state_before(runs / op, a.max_turns)[1] for op in ops}))
        return 0
    t0 = time.monotonic()
    state_path = runs / STATE_FILE
    try:
        first = [op for op in json.loads(state_path.read_text()).get("not_reached", []) if op in ops]
    except (OSError, ValueError, AttributeError):
        first = []
    order = first + [op for op in ops if op not in first]
    states: dict[str, str] = {}
    not_reached = []
    for op in order:
        action, why = state_before(runs / op, a.max_turns)
        if action == "skip":
            states[op] = why
            continue
        left = a.budget - (time.monotonic() - t0) - 15.0  # room to pack and print
        if left < a.min_start:
            states[op] = "not reached (goes first next call)"
            not_reached.append(op)
            continue
        try:
            states[op] = run_op(op, runs / op, action, a, min(a.op_cap, left))
        except Exception as e:  # noqa: BLE001 - one op's failure must not cost the others their turn
            states[op] = f"error: {type(e).__name__}: {e}"
    state_path.write_text(json.dumps({"not_reached": not_reached, "states": states,
                                      "at": time.strftime("%Y-%m-%d %H:%M:%S")}, indent=1) + "\n")
    text = table(runs, ops, states)
    (runs / SUMMARY_FILE).write_text(text + "\n")
    tgz = pack(runs, a.out)
    (a.out / SUMMARY_FILE).write_text(text + "\n")
    size = sum(f.stat().st_size for f in runs.rglob("*") if f.is_file()) / 2**20
    print(f"[gpu_turn] packed {tgz} ({tgz.stat().st_size / 2**20:.2f} MiB; the runs folder holds {size:.1f} MiB"
          f"{', near the 64 MiB carry limit: prune attempts/*/tune/' if size > 48 else ''}) after "
          f"{time.monotonic() - t0:.0f} s; unpack with: mkdir -p bench/played_llm/gpu_runs && "
          f"tar -xzf gpu_runs.tgz -C bench/played_llm/gpu_runs", file=sys.stderr, flush=True)
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
