#!/usr/bin/env bash
# Issue 16's GPU check: `tileagent batch` over RMSNorm+SiLU configs and the softmax grid, two ways:
#   new: one command for both references with --gpus all (one worker per visible GPU, both loops at once)
#   old: the single-worker path, one batch per reference, one after the other (--gpus 1)
# each with a fresh archive, module cache and inductor cache. Prints, per op and config, the verdicts of both, whether
# they agree, the wall times, the per-GPU busy time, and each command's exit code (with the tail of its log when it
# did not end with 0, 3 or 4).
#
# Usage: bash bench/scaleout_gpu.sh [OUTPUT_DIR]
#   OUTPUT_DIR (default "$OUT/scaleout" when $OUT is set, else /tmp/scaleout-gpu) receives only what is worth
#   reading: the three commands' logs, their three report.json files and summary.txt (7 files; the device tool
#   brings back at most 8 files from $OUT). Run directories, archives and caches go to a scratch folder
#   ($SCALEOUT_WORK, default a new folder under /tmp), removed at the end unless KEEP_WORK=1.
# Env: RMS (C values, default all 9), SOFTMAX (N values, default all 4), TUNE (autotuning screening seconds per
#   candidate, default 30), SEEDS (default 5), DEVICE (default auto; cpu runs the same steps on the interpreter, a
#   smoke test), STEP_TIMEOUT (seconds per command, default 1200; a command over it is killed and shows exit 124).
# Exit codes of `tileagent batch`: 0 target met, 3 correct but slower than the target, 4 some config without a
# correct kernel (or, for several references, an op whose loop raised), 5 nothing drafted, 2 bad input or a
# failing reference, 1 a Python exception (its traceback is in the log).
set -u
DEST=${1:-${OUT:+$OUT/scaleout}}; DEST=${DEST:-/tmp/scaleout-gpu}
TUNE=${TUNE:-30}; DEVICE=${DEVICE:-auto}; SEEDS=${SEEDS:-5}; STEP_TIMEOUT=${STEP_TIMEOUT:-1200}
RMS=${RMS:-96,160,192,256,320,384,512,640,1024}; SOFTMAX=${SOFTMAX:-1024,2048,4096,8192}
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${SCALEOUT_WORK:-$(mktemp -d /tmp/scaleout-work.XXXXXX)}
mkdir -p "$DEST" && rm -rf "$WORK" && mkdir -p "$WORK" || exit 2
rm -f "$DEST"/new.log "$DEST"/new.report.json "$DEST"/old_*.log "$DEST"/old_*.report.json "$DEST"/summary.txt
common=(--device "$DEVICE" --seeds "$SEEDS" --tune-seconds "$TUNE")
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
cd "$REPO" || exit 2

# step NAME RUN_DIR ARGS...: one `tileagent batch` with its own archive and caches; log and report.json to $DEST
step() {
  local name=$1 run=$2; shift 2
  local t0 t1 code
  t0=$(date +%s.%N)
  TILEAGENT_ARCHIVE=$WORK/$name/archive TILEAGENT_CACHE_DIR=$WORK/$name/cache \
    TORCHINDUCTOR_CACHE_DIR=$WORK/$name/inductor \
    timeout --signal=INT --kill-after=30 "$STEP_TIMEOUT" python -m tileagent batch "$@" "${common[@]}" --out "$run" \
    > "$DEST/$name.log" 2>&1
  code=$?
  t1=$(date +%s.%N)
  [ -f "$run/report.json" ] && cp "$run/report.json" "$DEST/$name.report.json"
  echo "$name $code $(python -c "print(f'{$t1 - $t0:.1f}')")" >> "$WORK/steps.txt"
  echo "$name: exit $code"
}

step new "$WORK/new/batch" tasks/rmsnorm_silu.py tasks/softmax.py --grid "rmsnorm_silu:C=$RMS" \
  --grid "softmax:N=$SOFTMAX" --gpus all
step old_rmsnorm_silu "$WORK/old/rmsnorm_silu" tasks/rmsnorm_silu.py --grid "C=$RMS" --gpus 1
step old_softmax "$WORK/old/softmax" tasks/softmax.py --grid "N=$SOFTMAX" --gpus 1

{ echo "commit $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown); device $DEVICE; RMS=$RMS" \
    "SOFTMAX=$SOFTMAX TUNE=$TUNE SEEDS=$SEEDS"
  command -v nvidia-smi >/dev/null && nvidia-smi -L; } > "$WORK/header.txt" 2>&1
tee "$DEST/summary.txt" < "$WORK/header.txt"
python - "$DEST" "$WORK/steps.txt" <<'PY' 2>&1 | tee -a "$DEST/summary.txt"
import json, sys
from pathlib import Path

dest, steps = Path(sys.argv[1]), Path(sys.argv[2])
runs = {}
for line in steps.read_text().splitlines():
    name, code, seconds = line.split()
    runs[name] = (int(code), float(seconds))


def load(name):
    path = dest / f"{name}.report.json"
    return json.loads(path.read_text()) if path.is_file() else None


def verdict(r):
    if r is None:
        return "(no report)"
    return ("target met" if r["meets_target"] else "correct, slower") if r["correct"] else "NO KERNEL"


def fmt(x):
    return f"{x:.2f}" if x else "-"


new = load("new")
old = {op: load(f"old_{op}") for op in ("rmsnorm_silu", "softmax")}
new_ops = {o["task"]: o for o in new["ops"]} if new else {}
print(f"{'op':13} {'config':16} {'new verdict':16} {'x compile':>9} | {'old verdict':16} {'x compile':>9}")
same = True
for op in ("rmsnorm_silu", "softmax"):
    n_rows = {json.dumps(r["config"]): r for r in new_ops.get(op, {}).get("configs", [])}
    o_rows = {json.dumps(r["config"]): r for r in (old[op] or {}).get("configs", [])}
    for key in list(dict.fromkeys([*n_rows, *o_rows])):
        a, b = n_rows.get(key), o_rows.get(key)
        same &= a is not None and b is not None and verdict(a) == verdict(b)
        cfg = ",".join(f"{k}={v}" for k, v in json.loads(key).items())
        print(f"{op:13} {cfg:16} {verdict(a):16} {fmt(a and a['speedup_compiled']):>9} | {verdict(b):16} "
              f"{fmt(b and b['speedup_compiled']):>9}")
    if not n_rows and not o_rows:
        same = False
        print(f"{op:13} {'-':16} {verdict(None):16} {'-':>9} | {verdict(None):16} {'-':>9}")
for o in new["ops"] if new else []:
    if o["outcome"] not in ("target_met", "correct_not_faster", "correct_untimed", "partial", "no_correct"):
        print(f"new: {o['task']} ended with {o['outcome']}: {o.get('reason')}")
print(f"verdicts identical: {same}")
wall_new = runs["new"][1]
wall_old = runs["old_rmsnorm_silu"][1] + runs["old_softmax"][1]
print(f"wall: new {wall_new:.1f} s, old {wall_old:.1f} s (new/old {wall_new / wall_old:.2f})")
for w in (new or {}).get("workers", {}).get("workers", []) if new and new.get("workers") else []:
    print(f"  {w['worker']}: busy {w['busy_s']:.1f} s of {new['workers']['wall_s']:.1f} s, {w['requests']} requests, "
          f"{w['retried']} retried")
print("exit codes: " + ", ".join(f"{name} {code}" for name, (code, _) in runs.items()))
for name, (code, _) in runs.items():
    if code not in (0, 3, 4):
        log = (dest / f"{name}.log").read_text(errors="replace").splitlines()
        print(f"--- {name} exited {code}; the last 30 lines of {name}.log:")
        print("\n".join(log[-30:]))
PY
[ "${KEEP_WORK:-0}" = 1 ] || rm -rf "$WORK"
echo "logs, reports and summary.txt: $DEST"
