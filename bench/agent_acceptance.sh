#!/usr/bin/env bash
# Issue 6's GPU acceptance, one part per call (the device runs at most 10 minutes a command):
#   bash bench/agent_acceptance.sh rmsnorm   # generate (timed) + batch over C + the drop-in checked in a fresh process
#   bash bench/agent_acceptance.sh others    # batch + drop-in check for softmax (N) and gemm_relu (N)
# Logs go to $OUT (default ./acceptance-logs); runs to $RUNS (default /tmp/tileagent-runs). The archive is
# $TILEAGENT_ARCHIVE (default: a fresh /tmp/tileagent-archive). Without an installed console script it runs
# `python -m tileagent` from this checkout.
set -u
OUT=${OUT:-acceptance-logs}; RUNS=${RUNS:-/tmp/tileagent-runs}
export TILEAGENT_ARCHIVE=${TILEAGENT_ARCHIVE:-/tmp/tileagent-archive}
mkdir -p "$OUT" "$RUNS"
ta() { python -m tileagent "$@"; }
step() {  # name, command...: run, log, record wall time and exit status
  local name=$1; shift
  local t0=$(date +%s)
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  printf '%-22s exit %s  %5d s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" | tee -a "$OUT/summary.txt"
}
case "${1:-}" in
  rmsnorm)
    step generate_rmsnorm ta generate tasks/rmsnorm_silu.py --out "$RUNS/gen-rmsnorm"
    step batch_rmsnorm ta batch tasks/rmsnorm_silu.py --grid C=160,256,320,512,640,1024 --out "$RUNS/batch-rmsnorm"
    step dropin_rmsnorm python bench/dropin_check.py "$RUNS/batch-rmsnorm/rmsnorm_silu_tileagent.py" \
      tasks/rmsnorm_silu.py --grid C=160,256,320,512,640,1024 --timing ;;
  others)
    step batch_softmax ta batch tasks/softmax.py --grid N=1024,2048,4096,8192 --out "$RUNS/batch-softmax"
    step dropin_softmax python bench/dropin_check.py "$RUNS/batch-softmax/softmax_tileagent.py" tasks/softmax.py \
      --grid N=1024,2048,4096,8192 --timing
    step batch_gemm ta batch tasks/gemm_relu.py --grid N=4096,11008 --out "$RUNS/batch-gemm"
    step dropin_gemm python bench/dropin_check.py "$RUNS/batch-gemm/gemm_relu_tileagent.py" tasks/gemm_relu.py \
      --grid N=4096,11008 --timing ;;
  *) echo "usage: bash bench/agent_acceptance.sh rmsnorm|others" >&2; exit 2 ;;
esac
