#!/usr/bin/env bash
# Evaluate, on the GPU, the last CPU-correct answer of every played op (bench/played_llm/RESULTS.md) with
# `tileagent eval` over all configs of the op's CONFIGS grid, one JSON record per op under $1, then print
# op -> correct, min speedup vs eager and vs torch.compile over the configs.
#
# Usage (from the repository root, on the H200):  bash bench/played_llm/run_gpu.sh /tmp/played_gpu
# Budget: < 8 minutes (2 seeds per config; each op capped at 45 s by `timeout`, a capped op shows "timeout").
set -u
OUT=${1:?usage: run_gpu.sh OUTDIR}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

# op -> the answer evaluated: the last one the CPU loop judged correct, else the last answer played; for the five
# ops the session had no time to play, the module drafted from the same guide (drafts/, never seen by the loop)
ANSWERS=(
  "rotary:answers/rotary/turn2.py"
  "swiglu:answers/swiglu/turn1.py"
  "int8_quant:answers/int8_quant/turn1.py"
  "cross_entropy:answers/cross_entropy/turn2.py"
  "groupnorm:answers/groupnorm/turn2.py"
  "add_layernorm:drafts/add_layernorm.py"
  "logsumexp:drafts/logsumexp.py"
  "l2norm:drafts/l2norm.py"
  "seq_mean:drafts/seq_mean.py"
  "causal_softmax:drafts/causal_softmax.py"
)

for entry in "${ANSWERS[@]}"; do
  op=${entry%%:*}; ans=${entry#*:}
  echo "== $op ($ans)" >&2
  timeout 45 python -m tileagent eval "$HERE/$ans" "$HERE/refs/$op.py" --device cuda --seeds 2 \
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
