#!/usr/bin/env bash
# Evaluate, on the GPU, the last CPU-correct answer of every played op (bench/played_llm/RESULTS.md) with
# `tileagent eval` over all configs of the op's CONFIGS grid, one JSON record per op under $1, then print
# op -> correct, min speedup vs eager and vs torch.compile over the configs.
#
# Usage (from the repository root, on the H200):  bash bench/played_llm/run_gpu.sh /tmp/played_gpu [session2|session1|all]
# Default session2: the five ops played in session 2 (their last answers), < 5 minutes (2 seeds per config, each op
# capped at $CAP s, default 55, by `timeout`; a capped op shows "timeout"). session1 re-runs the five ops of
# session 1 (measured on the H200 at commit 02a7110, BENCHMARKS.md), all runs the ten (< 10 minutes).
set -u
OUT=${1:?usage: run_gpu.sh OUTDIR [session2|session1|all]}
WHICH=${2:-session2}
CAP=${CAP:-55}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

# op -> the answer evaluated: the last one the CPU loop judged correct, else the last answer played
# (session 1: played 2026-12-01, first section of RESULTS.md; session 2: "Session 2 (2026-12-01)" there)
SESSION1=(
  "rotary:answers/rotary/turn2.py"
  "swiglu:answers/swiglu/turn1.py"
  "int8_quant:answers/int8_quant/turn1.py"
  "cross_entropy:answers/cross_entropy/turn2.py"
  "groupnorm:answers/groupnorm/turn2.py"
)
SESSION2=(
  "add_layernorm:answers/add_layernorm/turn1.py"
  "logsumexp:answers/logsumexp/turn1.py"
  "l2norm:answers/l2norm/turn1.py"
  "seq_mean:answers/seq_mean/turn1.py"
  "causal_softmax:answers/causal_softmax/turn3.py"
)
case "$WHICH" in
  session1) ANSWERS=("${SESSION1[@]}") ;;
  session2) ANSWERS=("${SESSION2[@]}") ;;
  all) ANSWERS=("${SESSION1[@]}" "${SESSION2[@]}") ;;
  *) echo "run_gpu.sh: unknown selection '$WHICH' (session2, session1 or all)" >&2; exit 2 ;;
esac
for entry in "${ANSWERS[@]}"; do
  [ -f "$HERE/${entry#*:}" ] || { echo "run_gpu.sh: missing answer file $HERE/${entry#*:}" >&2; exit 2; }
done

for entry in "${ANSWERS[@]}"; do
  op=${entry%%:*}; ans=${entry#*:}
  echo "== $op ($ans)" >&2
  timeout "$CAP" python -m tileagent eval "$HERE/$ans" "$HERE/refs/$op.py" --device cuda --seeds 2 \
    --json "$OUT/$op.json" > "$OUT/$op.log" 2>&1
  echo "$?" > "$OUT/$op.rc"
done

python - "$OUT" "${ANSWERS[@]}" <<'PY'
import json, os, sys
out = sys.argv[1]
print(f"{'op':16} {'answer':34} {'correct':8} {'min x eager':>11} {'min x compile':>13}  configs")
for entry in sys.argv[2:]:
    op, ans = entry.split(":", 1)
    path = os.path.join(out, op + ".json")
    rc = open(os.path.join(out, op + ".rc")).read().strip()
    if not os.path.exists(path):
        print(f"{op:16} {ans:34} {'timeout' if rc == '124' else 'no json (rc ' + rc + ')':8}")
        continue
    r = json.load(open(path))
    cfgs = r.get("configs", [])
    ok = r.get("status") == "ok" or (cfgs and all(c["correct"] for c in cfgs))
    se = [c["speedup_eager"] for c in cfgs if c.get("speedup_eager") is not None]
    sc = [c["speedup_compiled"] for c in cfgs if c.get("speedup_compiled") is not None]
    fmt = lambda v: f"{min(v):.2f}" if v else "-"
    why = "" if ok else (r.get("message") or "")[:80]
    print(f"{op:16} {ans:34} {str(ok):8} {fmt(se):>11} {fmt(sc):>13}  {len(cfgs)} {why}")
PY
