#!/usr/bin/env bash
# Issue 16's GPU check: `tileagent batch` over the 9 RMSNorm+SiLU configs and the softmax grid,
#   new: one command for both references with --gpus all (one worker per visible GPU, both loops at once)
#   old: the single-worker path, one batch per reference, one after the other (--gpus 1)
# each with a fresh archive, module cache and inductor cache. Prints the verdicts per op and config of both, whether
# they agree, the wall times and the per-GPU busy time.  Usage: bash bench/scaleout_gpu.sh
# Env: OUT (default /tmp/scaleout-gpu; wiped first), TUNE (autotuning screening seconds per candidate, default 30),
# RMS (C values, default all 9), SOFTMAX (N values, default all 4), DEVICE (default auto), SEEDS (default 5).
set -u
OUT=${OUT:-/tmp/scaleout-gpu}; TUNE=${TUNE:-30}; DEVICE=${DEVICE:-auto}; SEEDS=${SEEDS:-5}
RMS=${RMS:-96,160,192,256,320,384,512,640,1024}; SOFTMAX=${SOFTMAX:-1024,2048,4096,8192}
common=(--device "$DEVICE" --seeds "$SEEDS" --tune-seconds "$TUNE")
rm -rf "$OUT"; mkdir -p "$OUT"
fresh() { export TILEAGENT_ARCHIVE=$OUT/$1/archive TILEAGENT_CACHE_DIR=$OUT/$1/cache \
          TORCHINDUCTOR_CACHE_DIR=$OUT/$1/inductor; }
now() { date +%s.%N; }
fresh new; t0=$(now)
python -m tileagent batch tasks/rmsnorm_silu.py tasks/softmax.py --grid "rmsnorm_silu:C=$RMS" \
  --grid "softmax:N=$SOFTMAX" --gpus all "${common[@]}" --out "$OUT/new/batch" > "$OUT/new.log" 2>&1; echo "new (both references, --gpus all): exit $?" ; t1=$(now)
fresh old
python -m tileagent batch tasks/rmsnorm_silu.py --grid "C=$RMS" --gpus 1 "${common[@]}" --out "$OUT/old/rmsnorm_silu" > "$OUT/old_rmsnorm.log" 2>&1; echo "old rmsnorm_silu: exit $?"
python -m tileagent batch tasks/softmax.py --grid "N=$SOFTMAX" --gpus 1 "${common[@]}" --out "$OUT/old/softmax" > "$OUT/old_softmax.log" 2>&1; echo "old softmax: exit $?"; t2=$(now)
python - "$OUT" "$t0" "$t1" "$t2" <<'PY'
import json, sys
from pathlib import Path
out, t0, t1, t2 = Path(sys.argv[1]), *map(float, sys.argv[2:])
new = json.loads((out / "new/batch/report.json").read_text())
def verdict(r):
    return ("target met" if r["meets_target"] else "correct, slower") if r["correct"] else "NO KERNEL"
same = True
print(f"{'op':13} {'config':16} {'new verdict':16} {'x compile':>9} | {'old verdict':16} {'x compile':>9}")
for op in new["ops"]:
    old = json.loads((out / "old" / op["task"] / "report.json").read_text())
    old_rows = {json.dumps(r["config"]): r for r in old["configs"]}
    for r in op["configs"]:
        o = old_rows[json.dumps(r["config"])]
        same &= verdict(r) == verdict(o)
        f = lambda x: f"{x:.2f}" if x else "-"
        cfg = ",".join(f"{k}={v}" for k, v in r["config"].items())
        print(f"{op['task']:13} {cfg:16} {verdict(r):16} {f(r['speedup_compiled']):>9} | {verdict(o):16} "
              f"{f(o['speedup_compiled']):>9}")
print(f"verdicts identical: {same}")
print(f"wall: new {t1 - t0:.1f} s, old {t2 - t1:.1f} s (new/old {(t1 - t0) / (t2 - t1):.2f})")
for w in new["workers"]["workers"]:
    print(f"  {w['worker']}: busy {w['busy_s']:.1f} s of {new['workers']['wall_s']:.1f} s, {w['requests']} requests, "
          f"{w['retried']} retried")
PY
