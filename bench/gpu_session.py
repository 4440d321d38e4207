"""The GPU checks that wait for an H200, as named steps run in order under one time budget, one log and one table.

Usage (repository root, on the GPU machine):
    python bench/gpu_session.py --group 1 [--out DIR] [--budget 540]
    python bench/gpu_session.py --only wgmma_probe,wgmma_tests
    python bench/gpu_session.py --list

Each step is a shell command with its own time limit; its output goes to DIR/session.log (one file: the device tool
brings back few files, 8 in round 2 session 26), and the last lines of the run are a table: step, exit code, seconds,
the step's last line. Folders the steps leave under DIR (the played answers' records) are packed as DIR/NAME.tar.gz.
A step starts only while the budget has room for its time limit, so a group fits one 10-minute device call; a
step that needs an earlier one (``after``) is skipped when that one failed or was skipped. The order inside a group
is the order in which the results are worth having: correctness before timing. Exit code: 0 when every step ran
and passed.

The GPU machine lacks some of the product's dependencies: besides what ``../shared/tools/device-wheels.sh`` fetches,
carry ``pip download --no-deps tenacity filelock -d .whl`` (the test suite imports the LLM drafter, which needs
tenacity), install the wheels into a folder and put it and the repository on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Step:
    name: str
    group: int
    command: str
    limit_s: int
    why: str
    after: str | None = None


# every lowering switch sessions 31-32 added (each default-on), off together: `bench/tilelang_examples.py --ab`
SWITCHES_31_32 = " ".join(f"--ab TILEAGENT_{n}=0" for n in ("EARLY_LOADS", "FORWARD_SHARED", "FUSE_REDUCTIONS",
                                                            "DROP_BARRIERS", "SINGLE_STAGE"))

STEPS = (
    # group 1: the Hopper path (issue 12), compile latency (issue 11), every GPU test
    Step("wgmma_probe", 1, "python bench/wgmma_probe.py", 120,
         "first contact: 15 small wgmma gemms (2 with groups in flight, 2 split along N) and 2 RS (A in registers), "
         "exact; names the swizzle/SBO/LBO at fault"),
    Step("wgmma_tests", 1, "python -m pytest -q -x tests/test_gpu.py -k wgmma", 90,
         "gemm_relu schedules, flash_attn (Q@K^T SS, P@V RS) and mla_decode (N split) on wgmma against torch",
         after="wgmma_probe"),
    Step("wgmma_gemm", 1, "python bench/wgmma_gemm.py --sizes 4096 8192", 240,
         "wgmma (overlap on / off) vs mma.sync vs cuBLAS, checked before timed", after="wgmma_tests"),
    Step("tensor_core_wgmma", 1, "TILEAGENT_ENABLE_WGMMA=1 python bench/tensor_core.py", 120,
         "gemm_relu, flash_attn and mla_decode at the issue's sizes with wgmma on, next to cuBLAS and SDPA",
         after="wgmma_tests"),
    Step("compile_latency", 1, "python bench/compile_latency.py --ab --load --runs 15", 60,
         "cold compile of rmsnorm_silu before/after the NVRTC options (target <= 0.1 s)"),
    Step("gpu_tests", 1, "python -m pytest -q -m gpu tests/ -x", 150, "every test marked gpu"),
    # group 2: scale-out (issue 16) and the built-in fusion drafter (issue 14)
    Step("scaleout", 2, "RMS=96,1024 SOFTMAX=1024,8192 TUNE=8 SEEDS=2 STEP_TIMEOUT=150 "
         "bash bench/scaleout_gpu.sh \"$GPU_SESSION_OUT/scaleout\"", 330,
         "batch over two references: new multi-worker path vs old single-worker path, same verdicts, wall times"),
    Step("fusion_suite", 2, "python bench/fusion_suite.py --ops int8_row_quant,batchnorm_eval,softmax_topk,sum_dim,"
         "mean_seq,frobenius_norm,logsumexp,cross_entropy,adaln_modulate,bias_gelu_residual,sigmoid_gate "
         "--max-configs 3 --budget 170", 200,
         "the built-in drafter on the ops that were wrong or slow on the H200 (issue 14)"),
    Step("fusion_full", 2, "python bench/fusion_suite.py --max-configs 3 --budget 260", 280,
         "every op of the public suite (issue 14): correct, x over torch.compile, % of copy per config"),
    Step("evaluator_isolation", 5, "python bench/evaluator_isolation.py --cheats-only", 150,
         "timing cheats rejected on the GPU, the honest control accepted, its timing unchanged (issue 18)"),
    # group 3: TileLang side by side (issue 13); group 4: the played LLM's answers (19); group 5: the evaluator's
    # isolation on the GPU (18) and the main job's wall time
    Step("tilelang", 3, "mkdir -p /tmp/tl && tar -xJf .tl/tl_site.tar.xz -C /tmp/tl && "
         "python bench/tilelang_examples.py --tilelang-site /tmp/tl --only gqa_decode,mha_sink_fwd_bhsd,"
         "mha_sink_fwd_bhsd_window,grouped_gemm_fwd,mla_decode,mha_fwd_bshd,gemm,convolution,convolution_autotune,"
         "gemm_fp8,dequant_gemm_w4a8,ws_copy_0_gemm_1,ws_barrierpipe_stage2,gemm_streamk,mla_decode_persistent "
         "--timeout 150 --markdown", 960,
         "TileLang's own programs on TileAgent and on TileLang 0.1.15, checked and timed side by side (issue 13)"),
    Step("generate_rmsnorm", 5, "python -m tileagent generate tasks/rmsnorm_silu.py --out /tmp/gen_rms --no-archive", 300,
         "the main job's wall time (180 s last session, 69 s in round 1)"),
    Step("fp32_vector", 5, "python bench/fusion_suite.py --ops leaky_relu,elu,hardtanh_softplus --max-configs 2 "
         "--budget 70", 90, "float32 elementwise after the loop vector width change (9df6c3f; 56-78% of copy before)"),
    Step("dropin", 6, "python bench/dropin_check.py --candidate prompts/examples/candidate_rmsnorm_silu.py "
         "tasks/rmsnorm_silu.py --timing", 300, "the exported drop-in (runtime 2) on CUDA, opcheck, torch.compile "
         "training, timed against eager and torch.compile (issue 15)"),
    # group 7: round 2 session 3's last call: the new wgmma forms on the whole GPU test set, the codegen changes of
    # issue 11 (A/B against a --dump of the sources at 5ac1809 carried as .ab_before), the drafter fixes (14), and
    # the played LLM's session-3 answers (19)
    Step("gpu_tests_wgmma", 7, "TILEAGENT_ENABLE_WGMMA=1 python -m pytest -q -m gpu tests/ -x", 120,
         "every GPU test with wgmma on (RS for P @ V, N split over warpgroups): evidence for making it the default"),
    Step("wgmma_gemm_8192", 7, "python bench/wgmma_gemm.py --sizes 8192", 90,
         "wgmma (overlap on / off, tuned schedules) vs mma.sync vs cuBLAS at 8192^3 only"),
    Step("compile_latency_plain", 7, "python bench/compile_latency.py --load --runs 15 && "
         "python bench/compile_latency.py --load --runs 15 --dtype bfloat16", 60,
         "cold compile after the bfloat16 prelude and one guard per vector (float16 and bfloat16)"),
    Step("cubin_ab", 7, "python bench/cubin_ab.py --old .ab_before", 60,
         "the kernels whose CUDA changed since 5ac1809: outputs and GPU time, A/B in one run (issue 11)"),
    Step("fusion_changed", 7, "python bench/fusion_suite.py --ops int8_row_quant,frobenius_norm,mean_seq,softmax_topk,"
         "sigmoid_gate,cross_entropy,log_softmax,add_rmsnorm_residual --max-configs 3 --budget 75", 90,
         "the drafter ops changed after the H200 run (sigmoid_gate, cross_entropy: unchanged controls)"),
    Step("played_s3", 7, "CAP=45 bash bench/played_llm/run_gpu.sh /tmp/played3 session3", 240,
         "the played LLM's session-3 answers on every config (issue 19)"),
    # group 8: round 2 session 4's first call: what --Ofast-compile=mid saves in compile time and costs on the GPU
    # (issue 11), the whole drafter suite at the current commit (issue 14)
    Step("latency_mid", 8, "python bench/compile_latency.py --ab --load --runs 15 --options=--Ofast-compile=mid", 60,
         "cold compile of rmsnorm_silu as now vs with --Ofast-compile=mid, interleaved (target <= 0.1 s)"),
    Step("cubin_ab_mid", 8, "python bench/cubin_ab.py --options=--Ofast-compile=mid --trials 30", 180,
         "every example kernel as now vs compiled with --Ofast-compile=mid: outputs, GPU time B/A"),
    # group 9: a GPU turn of the played LLM (19): every op's loop run advanced by the answers present, stopped where
    # it waits for the player; carry bench/played_llm/gpu_runs; the runs come back as $OUT/gpu_runs.tgz
    Step("played_gpu_turn", 9, "python bench/played_llm/gpu_turn.py --budget 480 --out \"$GPU_SESSION_OUT\"", 520,
         "the played LLM's runs, one GPU turn: each op resumed until it waits for the next answer (issue 19)"),
    # also group 9 (its own device call: --only fusion_changed4,fusion_stages4,fusion_wide4, about 6 min): the
    # drafter after session 4's third call: the GEMM template's new first schedule (linear_fp32_master), mean_seq's
    # staging reverted; then A/Bs in the same call of the fusion template's knobs drafted off (STAGES=2, WIDE_ROWS)
    Step("fusion_changed4", 9, "python bench/fusion_suite.py --ops linear_fp32_master,mean_seq,instance_norm,groupnorm,"
         "cross_entropy,logsumexp,rmsnorm_module,sigmoid_gate --max-configs 3 --budget 150", 180,
         "the drafter ops changed since bc91a8c's H200 run; the A/B's STAGES=1 side (rmsnorm_module, sigmoid_gate: "
         "controls)"),
    Step("fusion_stages4", 9, "python bench/fusion_suite.py --ops instance_norm,groupnorm,cross_entropy,logsumexp "
         "--max-configs 3 --knob STAGES=2 --budget 100", 130,
         "the same ops with each pass over a row of several tiles a cp.async pipeline over shared tiles (STAGES=2)"),
    Step("fusion_wide4", 9, "python bench/fusion_suite.py --ops instance_norm --knob WIDE_ROWS=True && "
         "python bench/fusion_suite.py --ops instance_norm --knob WIDE_ROWS=True --knob STAGES=2", 70,
         "instance_norm with one row per SM in flight (WIDE_ROWS: its second pass may hit L2), then with STAGES=2"),
    # also group 9 (--only fusion_changed5, about 3 min): session 5's drafter changes (issue 14): split reductions
    # without guards or masks (mse_loss, frobenius_norm, whose pointwise pass now walks the rows from the last),
    # column reductions without shared-memory bank conflicts (mean_seq, sum_dim), then mean_seq's 512-byte column
    # strips (WIDE_COLS=True, drafted off) in the same call
    Step("fusion_changed5", 9, "python -m pytest -q -m gpu tests/test_gpu.py -k column_sums && "
         "python bench/fusion_suite.py --ops mean_seq,mse_loss,frobenius_norm,cross_entropy,"
         "sum_dim --max-configs 3 --budget 150 && python bench/fusion_suite.py --ops mean_seq --max-configs 3 "
         "--knob WIDE_COLS=True --budget 60", 260,
         "column sums through the padded scratch on the device; the drafter ops changed in session 5 (sum_dim: its "
         "column sums' scratch), then mean_seq with WIDE_COLS"),
    # also group 9 (--only fusion_changed7, about 4 min): session 7's drafter changes (issue 14, helper fusion8):
    # LayerNorm rows off 8-byte boundaries staged through shared memory (N=333), int8 rows of 14336 on 256 threads
    # and the clamp-then-round, instance_norm / groupnorm keeping tiles in shared memory between passes (WIDE_ROWS on,
    # STASH), output passes from the last tile; mean_seq, mse_loss, frobenius_norm untimed since session 5's changes.
    # Then the A/Bs in the same call: STASH=0, WIDE_ROWS=False (the schedule before, with the reversed pass),
    # mean_seq's 512-byte strips (WIDE_COLS=True)
    Step("fusion_changed7", 9, "python bench/fusion_suite.py --ops layernorm_widths,int8_row_quant,instance_norm,"
         "groupnorm,mean_seq,mse_loss,frobenius_norm,rmsnorm_module --max-configs 3 --budget 150 && "
         "python bench/fusion_suite.py --ops instance_norm,groupnorm --max-configs 3 --knob STASH=0 --budget 40 && "
         "python bench/fusion_suite.py --ops instance_norm --knob WIDE_ROWS=False --budget 30 && "
         "python bench/fusion_suite.py --ops mean_seq --max-configs 3 --knob WIDE_COLS=True --budget 40", 280,
         "the drafter ops changed in session 7 (rmsnorm_module: a control), then STASH=0 and WIDE_ROWS=False "
         "(instance_norm, groupnorm) and WIDE_COLS=True (mean_seq) in the same call"),
    # also group 10 (--only ptx_suite_ab, about 2 min): the PTX target (opt-in since) on the built-in drafter's kernels
    Step("ptx_suite_ab", 10, "python bench/ptx_suite_ab.py --trials 30 --budget 115", 130,
         "each kernel of the suite's first drafts through PTX and ptxas vs NVRTC: outputs and GPU time, A/B in one run"),
    Step("ptx_final", 10, "python -m pytest -q -m gpu tests/test_ptx.py tests/test_gpu.py && "
         "python bench/cubin_ab.py --ptx --trials 40 && TILEAGENT_PTX=1 python bench/compile_latency.py --load "
         "--runs 15 && python bench/compile_latency.py --load --runs 15 && "
         "python bench/memory_bound.py --sweep-only", 200,
         "the PTX target with the ptxas program (session 5's last change, issue 11): GPU tests, outputs and GPU time "
         "against NVRTC's cubins, cold compile through PTX and through NVRTC, memory_bound's cold figure"),
    # also group 9 (its own device call: --only wgmma_default; with played_gpu_turn it exceeds one call's budget):
    # wgmma as sm_90a's default gemm instruction (issue 12): every GPU test with nothing set (wgmma wherever it
    # applies, plus the mma.sync opt-outs), then the tensor-core examples at the sizes next to cuBLAS and SDPA
    Step("wgmma_default", 9, "python -m pytest -q -m gpu tests/ -x && python bench/tensor_core.py", 300,
         "wgmma by default (no TILEAGENT_ENABLE_WGMMA): GPU tests (incl. tl.disable_wgmma / =0 on mma.sync), then "
         "gemm_relu 4096/8192, flash_attn (causal), mla_decode TFLOP/s"),
    # also group 9 (run with --only tma_probe,tma_gemm): TMA (issue 12 item 2, opt-in TILEAGENT_ENABLE_TMA=1): first contact (copies per swizzle, pipelined
    # gemms, exact), then the tensor-core GPU tests with TMA on, then TMA on / off side by side
    Step("tma_probe", 9, "TILEAGENT_MBAR_SPIN_LIMIT=4e9 python bench/tma_probe.py", 180,
         "first contact: TMA copies for each swizzle (none/32/64/128B, column blocks, 3-d, fallback) read back "
         "exactly; pipelined gemms on mbarriers (mma.sync and wgmma consumers) equal to torch's fp64 product"),
    Step("tma_gemm", 9, "TILEAGENT_ENABLE_TMA=1 TILEAGENT_MBAR_SPIN_LIMIT=4e9 python -m pytest -q -x -m gpu "
         "tests/test_gpu.py tests/test_tma.py -k 'wgmma or tma' && python bench/tma_gemm.py --sizes 4096 8192", 330,
         "gemm_relu, flash_attn, mla_decode GPU tests with TMA on; then gemm_relu TMA on vs off (wgmma and "
         "mma.sync) vs cuBLAS at 4096^3 and 8192^3", after="tma_probe"),
    # also group 9 (run with --only wgmma_pins_ab; carry .ab_pins):
    Step("wgmma_pins_ab", 9, "python bench/cubin_ab.py --old .ab_pins --only shared/gemm_relu,prompts/gemm_relu "
         "--trials 30", 120,
         "the wgmma register pins A/B: B = sources dumped at 8dad5b5 into .ab_pins (bench/codegen_golden.py "
         "--dump, carried); the gemms whose cubins changed by the pins alone (attention's sources also split masks: "
         "mask_split_ab)"),
    Step("mask_split_ab", 9, "python bench/mask_split_ab.py", 180,
         "flash attention (causal and not, 128/64/2/128 and the default schedule): as built (A) vs without split "
         "masks (B) vs without heavy-first block order (C, causal), same run, outputs compared, next to SDPA"),
    Step("played_llm", 4, "bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played\"", 500,
         "the played LLM's last answers over every config of their ops"),
    # group 11: what round 2 session 21 left unmeasured (merged GEMM blocks, staged epilogues, TMA pipelines in while)
    Step("streamk", 11, "python bench/tilelang_examples.py --only gemm_streamk,mla_decode_persistent,gemm_splitk "
         "--timeout 40", 90,
         "TileLang's stream-K GEMM (its pipeline inside while: failed its check before 0f7518a) and two neighbours"),
    Step("gpu_tests_all", 11, "python -m pytest -q -m gpu tests/ -x", 240,
         "every GPU test: session 21 ran only those of the changed files"),
    Step("merge_stage_ab", 11, "python bench/switch_ab.py --env TILEAGENT_COARSEN=0 --only gemm && "
         "python bench/switch_ab.py --env TILEAGENT_STAGE_EPILOGUE=0 --only persistent", 200,
         "the merge and the staging, each against its switch, baselines in the same round"),
    # group 12: what round 2 session 22 left unmeasured (the deferred P @ V's rule for a dynamic length, tilelang.env)
    Step("gpu_tests_all_22", 12, "python -m pytest -q -m gpu tests/", 240,
         "every GPU test at the session's last commit (session 22 ran them at its first)"),
    Step("flash_best_ab", 12, "python bench/switch_ab.py --env TILEAGENT_WGMMA_OVERLAP=0 --only flash_best flash "
         "--rounds 3", 200, "flash attention deferred or not (128/128/3/256 and the example's schedules), SDPA beside"),
    # group 13: issue 14's table after session 23's drafter changes (exact 8-byte row tiles, lanes 2, smaller split
    # tiles, the reciprocal of a row reduction), every op at once: % of a copy and x torch.compile per config
    Step("fusion_suite_23", 13, "python bench/fusion_suite.py --max-configs 4 --budget 420", 500,
         "every suite op's first draft against eager, torch.compile and a device copy (session 20's table is the last "
         "full one)"),
    # group 14: what round 2 session 24 wrote without a GPU (the drafter's top-1 and scan kernels, matrix-vector
    # products and poolings; named barriers, fragment reshapes and Philox draws; the played LLM's session-24 answers)
    Step("fusion_new_24", 14, "python bench/fusion_suite.py --ops greedy_argmax,cumsum_rows,upsample_nearest "
         "--max-configs 3 --budget 150", 180,
         "the three suite ops new in session 24, checked and timed against torch.compile and a copy"),
    Step("gpu_tests_24", 14, "python -m pytest -q -m gpu tests/", 240, "every GPU test at the session's last commit"),
    Step("played_24", 14, "bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played\" session24 && "
         "bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played_b\" session24b && "
         "bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played_c\" session24c", 300,
         "the played LLM's session-24 answers (three rounds, 12 ops) over every config of their ops: gqa_decode and "
         "neox_rope_positions ran on the CPU only at sizes that miss their multi-tile paths"),
    # group 15: what round 2 session 25 wrote without a GPU (T.wgmma_gemm / T.wait_wgmma and a runtime clear_accum,
    # E509 for tile ops under a thread branch, the drafter's new suite ops, the played LLM's session-25 answers)
    Step("gpu_tests_25", 15, "python -m pytest -q -m gpu tests/", 240, "every GPU test at the session's last commit"),
    Step("wgmma_gemm_25", 15, "python -m pytest -q tests/test_wgmma_gemm.py tests/test_defer_gemm.py", 200,
         "T.wgmma_gemm's tests (NVRTC and the emulator; none ran a kernel on a GPU) and the deferred gemm's"),
    Step("fusion_new_25", 15, "python bench/fusion_suite.py --ops label_smoothing_ce,timestep_embedding,unfold_frames,"
         "cosine_embedding,greedy_argmax,cumsum_rows,upsample_nearest --max-configs 3 --budget 280", 300,
         "the suite ops new in sessions 24-25, checked and timed against torch.compile and a copy"),
    Step("played_25", 15, "bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played\" session25 && "
         "bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played_b\" session25b", 300,
         "the played LLM's session-25 answers over every config of their ops"),
    # group 16: what round 2 session 26 wrote after its device time ran out (T.cumsum split among a line's threads,
    # the drafter's scans on it, frames read per value, 64-bit index products under int64 nodes, the oracle's rules)
    Step("gpu_tests_26", 16, "python -m pytest -q -m gpu tests/", 240,
         "every GPU test (the scan forms of test_gpu_session24 failed at the session's third call; the cumsum "
         "lowering's bit-for-bit test against the interpreter)"),
    Step("fusion_new_26", 16, "python bench/fusion_suite.py --ops cumsum_rows,unfold_frames,timestep_embedding,"
         "add_layernorm,layernorm_widths,groupnorm,instance_norm,mean_seq --max-configs 4 --budget 240", 300,
         "the drafts changed after the session's suite run: cumsum_rows (T.cumsum), unfold_frames (per-value reads), "
         "the norms' variance corrected by the row's deviations (one more reduction a row)"),
    Step("played_26", 16, "CAP=90 bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played\" session26", 400,
         "the played LLM's session-26 answers over every config of their ops"),
    Step("played_25_again", 16, "CAP=150 bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played_b\" session25",
         560, "session 25's answers again: selective_scan after the oracle's finite-only rule; paged_kv_append, "
         "which ran past 55 s and 80 s (3 configs of 67M-element caches, 11 distributions x 2 seeds each)"),
    # group 17: what round 2 session 27 wrote without a device (TF32 mma.sync, wgmma's M-major A, barriers for
    # global buffers, the fusion drafter's fewer passes and kernels)
    Step("gpu_tests_27", 17, "python -m pytest -q -m gpu tests/test_gemm_tf32.py tests/test_wgmma.py "
         "tests/test_barriers.py", 120,
         "first contact of mma.sync m16n8k8 .tf32 (every orientation, wgmma on and off) and of wgmma's M-major A "
         "descriptor (imm-trans-a 1), each against an exact or truncated-input reference"),
    Step("tf32_gemm", 17, "python bench/tf32_gemm.py --sizes 4096 8192", 150,
         "a K-major float32 GEMM on wgmma k8 .tf32 and on mma.sync m16n8k8, next to cuBLAS with TF32 and in float32",
         after="gpu_tests_27"),
    Step("m_major_a_ab", 17, "for v in 0 1; do TILEAGENT_WGMMA_M_MAJOR_A=$v python bench/tilelang_examples.py "
         "--only mha_bwd_bshd,retention_fwd --timeout 120; done", 300,
         "TileLang's attention backward (dS^T @ K) and retention forward (K^T @ V) with a transposed A on mma.sync "
         "(0) and on wgmma (1), in two processes of one call", after="gpu_tests_27"),
    Step("tilelang_27", 17, "python bench/tilelang_examples.py --only mha_sink_bwd_bhsd,gqa_sink_bwd_bhsd,"
         "mha_bwd_bshd --timeout 150", 360,
         "TileLang's attention-sink backward (MHA, GQA), built for the first time this session, and the MHA backward "
         "(its dS^T @ K on wgmma now), their own checks and printed times", after="gpu_tests_27"),
    Step("played_27", 17, "CAP=120 bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played27\" session27", 480,
         "the played LLM's session-27 answers over every config (the float32 GEMM as TF32 and its bf16 x6 split, the "
         "weight gradient, partial rotary, the embedding backward)"),
    Step("fusion_27_loss", 17, "python bench/fusion_knobs.py --ops label_smoothing_ce,cosine_embedding "
         "--max-configs 2 --no-tunables --variant 'DISTRIBUTE=False' --variant 'SPLIT_ONCE=False'", 180,
         "a loss's reductions in fewer kernels and passes (DISTRIBUTE), a split kernel's tile loaded once for its "
         "passes (SPLIT_ONCE), each against the old plan in the same process"),
    Step("fusion_27_ebag", 17, "python bench/fusion_knobs.py --ops embedding_bag_mean --max-configs 3 --no-tunables "
         "--variant 'SHORT_COLS=0' --variant 'SHORT_PER=16'", 150,
         "the short-columns layout (gathered rows read coalesced, one kernel) against the tiled split kernel"),
    Step("fusion_27_parts", 17, "python bench/fusion_knobs.py --ops timestep_embedding,rotary_cat,upsample_nearest "
         "--max-configs 3 --no-tunables --variant 'PARTS=False' --variant 'PER_THREAD=64'", 240,
         "pointwise kernels by equal output parts (a cat's branches apart, an upsample's rows by vectors) against "
         "the whole-row kernel")
,
    # group 18: what round 2 session 28 wrote (TileLang's warp specialization written by hand: warp-group tile ops,
    # real mbarriers, cp.async by hand; wgmma on stacked and column-sliced shared tiles)
    Step("mla_ws_gpu", 18, "TILEAGENT_MBAR_SPIN_LIMIT=2e9 python -m pytest -q -m gpu tests/test_tilelang_hand_ws.py "
         "tests/test_wgmma.py -k 'mla or flashmla or sparse or stack'", 150,
         "first contact of a hand warp-specialized kernel (three warp groups, mbarriers with per-thread arrivals, "
         "cp.async.mbarrier.arrive.noinc) against its reference"),
    Step("mla_ws_bench", 18, "python bench/tilelang_examples.py --only mla_decode_ws,mla_decode,flashmla_ws,"
         "sparse_mla_fwd_pipelined,sparse_mla_fwd_seesaw,sparse_mla_fwd --timeout 100 --budget 330"
         " $([ -d /tmp/tl ] && echo --tilelang-site /tmp/tl)", 360,
         "TileLang's hand warp-specialized MLA programs (decode, FlashMLA-style, DSA sparse pipelined and seesaw) "
         "next to "
         "the plain MLA decode and sparse forward: their own checks and printed speed "
         "(and real TileLang's, where .tl was unpacked to /tmp/tl)",
         after="mla_ws_gpu"),
    # group 19: what round 2 session 29 wrote (T.ptr / T.make_tensor, a fragment read in blocks x[i, jj * 4 + j])
    Step("gpu_tests_29", 19, "python -m pytest -q -m gpu tests/test_tilelang_pointers.py tests/test_fragment_blocks.py",
         120, "first contact of tensors made from device addresses (TileLang's grouped GEMM by pointer tables) and of "
         "the TF32 A operand read in blocks of 4 (TileLang's mHC pre-block kernel)"),
    Step("tilelang_29", 19, "python bench/tilelang_examples.py --only grouped_gemm_fwd_ptr,grouped_gemm_fwd "
         "--timeout 100 $([ -d /tmp/tl ] && echo --tilelang-site /tmp/tl)", 240,
         "the grouped GEMM by pointer tables next to the one over a packed tensor, and real TileLang's",
         after="gpu_tests_29"),
    # group 20: what round 2 session 29 changed after its device time ran out (wgmma descriptors from an opaque
    # address in kernels specialized by hand, gemm_sp on dense tensor cores, pointer-table copies by cp.async)
    Step("opaque_ab", 20, "for v in 0 1; do TILEAGENT_WGMMA_OPAQUE=$v python bench/tilelang_examples.py --only "
         "flashmla_ws,mla_decode_ws --timeout 60 --budget 150; done; python bench/tilelang_examples.py --only "
         "flashmla_ws,mla_decode_ws --timeout 60 --budget 150 $([ -d /tmp/tl ] && echo --tilelang-site /tmp/tl)",
         420, "FlashMLA (1064 -> 56 bytes of spills a thread) and the MLA decode (124 -> 176) with the descriptors' "
         "addresses plain (0), opaque everywhere (1) and as by default (hand-specialized kernels), real TileLang "
         "beside the default"),
    Step("gpu_tests_29b", 20, "python -m pytest -q -m gpu tests/test_tilelang_gemm_sp.py "
         "tests/test_tilelang_pointers.py tests/test_tilelang_hand_ws.py", 150,
         "gemm_sp, T.device_assert, the pointer-table copies by cp.async, the hand-WS kernels with opaque "
         "descriptors"),
    Step("tilelang_29b", 20, "python bench/tilelang_examples.py --only grouped_gemm_fwd_ptr,gemm_sp --timeout 100 "
         "$([ -d /tmp/tl ] && echo --tilelang-site /tmp/tl)", 240,
         "the pointer-table GEMM after its cp.async change (0.37 of TileLang before) and gemm_sp at dense speed, next "
         "to real TileLang's", after="gpu_tests_29b"),
    # group 21: round 2 session 30 (vector atomics from T.Parallel, global / in-place / swizzled vector runs, Let
    # ranges in bounds checks, loops over memory on vectorized layouts, one more block per SM by a launch bound)
    Step("gpu_tests_30", 21, "python -m pytest -q -m gpu tests/", 240,
         "every GPU test: the lowering changes touch every T.Parallel loop and copy"),
    Step("tilelang_30", 21, "python bench/tilelang_examples.py --only mha_bwd_bshd,retention_fwd,rms_norm,layernorm,"
         "gemm,mha_inference,gqa_decode,mha_fwd_bhsd,gqa_fwd_bshd,mla_decode,dequant_gemm_w4a8,online_softmax,"
         "grouped_gemm_fwd --timeout 100 --budget 300 $([ -d /tmp/tl ] && echo --tilelang-site /tmp/tl)", 330,
         "the attention backward (0.62 of TileLang: its dQ atomics now float2), the retention forward (0.76: vector "
         "runs, 3 blocks per SM) and the programs the changes reach, next to real TileLang's"),
    # group 22: what session 30 left unmeasured (the PTX target's per-element red for VecAtomicAdd; serial loops
    # that index registers unrolled; memory-bound figures after global vector runs and Let ranges; the fusion suite)
    Step("gpu_tests_30b", 22, "python -m pytest -q -m gpu tests/test_ptx.py tests/test_lowering_sim.py "
         "tests/test_cuda_codegen.py tests/test_atomic_extreme.py", 150,
         "column sums through the PTX target's red per element, the float2 split-K writeback, atomics"),
    Step("tilelang_30b", 22, "python bench/tilelang_examples.py --only mha_inference,gqa_decode,retention_fwd,"
         "dequant_gemm_w4a8 --timeout 60 --budget 150 $([ -d /tmp/tl ] && echo --tilelang-site /tmp/tl)", 160,
         "the split-KV combine unrolled (its lse fragment out of local memory); w4a8 with its launch bound (128, 8): "
         "0.1984 -> 0.2069 ms in session 30, noise or the bound; next to real TileLang's",
         after="gpu_tests_30b"),
    Step("memory_bound_30", 22, "python bench/memory_bound.py --quick", 200,
         "RMSNorm+SiLU (gamma now read 2 at a time) and softmax against a device copy and torch.compile",
         after="gpu_tests_30b"),
    Step("fusion_30", 22, "python bench/fusion_suite.py --max-configs 3 --budget 150", 180,
         "the drafter's kernels after the global vector runs (issue 14)", after="gpu_tests_30b"),
    # group 23: what session 31 left unmeasured (shared reads forwarded from the registers of their copy)
    Step("gpu_tests_31", 23, "python -m pytest -q -m gpu tests/test_forward_shared.py tests/test_bulk_store.py "
         "tests/test_shared_vectors.py", 120, "forwarded reads and bulk stores on the GPU"),
    Step("forward_ab_31", 23, "for e in TILEAGENT_FORWARD_SHARED=0 X=1 TILEAGENT_FORWARD_SHARED=0 X=1; do echo $e; "
         "env $e python bench/host_overhead.py | grep layernorm_fwd | tail -1; done", 150,
         "TileLang's LayerNorm forward with X's reads forwarded (0.0544 ms in session 31's hand-edited probe, 0.0600 "
         "before, TileLang 0.0506 on an H100): GPU ms column, alternating", after="gpu_tests_31"),
    Step("tilelang_31", 23, "python bench/tilelang_examples.py --only layernorm,rms_norm,mla_decode,mha_fwd_bhsd "
         "--timeout 60 $([ -d /tmp/tl ] && echo --tilelang-site /tmp/tl)", 200,
         "the layer norm next to real TileLang (0.89 before)", after="gpu_tests_31"),
    # group 24: what session 32 left unmeasured (no device was lent): register loads ahead of the stage wait
    Step("gpu_tests_32", 24, "python -m pytest -q -m gpu tests/test_single_stage.py tests/test_early_loads.py "
         "tests/test_fused_reductions.py tests/test_redundant_barriers.py tests/test_tilelang_hand_ws.py", 200,
         "one-stage TMA pipelines, early mask loads, fused reduction rounds on the GPU; the hand-WS MLA programs "
         "after the barrier before their P @ V fence went"),
    Step("early_loads_32", 24, "for e in TILEAGENT_EARLY_LOADS=0 X=1 TILEAGENT_EARLY_LOADS=0 X=1; do echo $e; "
         "env $e python bench/tilelang_examples.py --only gqa_decode,mha_inference --timeout 60 "
         "$([ -d /tmp/tl ] && echo --tilelang-site /tmp/tl) | tail -4; done", 420,
         "TileLang's GQA decode with its mask copy issued before the stage wait (0.75 of TileLang before; 4.25 vs 3.72 "
         "TFLOP/s with the loads early in session 31's A/B on an H200), alternating with the switch off"),
    Step("ln_rounds_32", 24, "for e in 'TILEAGENT_FUSE_REDUCTIONS=0 TILEAGENT_DROP_BARRIERS=0' X=1 "
         "'TILEAGENT_FUSE_REDUCTIONS=0 TILEAGENT_DROP_BARRIERS=0' X=1; do echo $e; "
         "env $e python bench/host_overhead.py | grep layernorm_fwd | tail -1; done", 150,
         "TileLang's LayerNorm forward with its two row sums in one shared round and the closing barrier dropped "
         "(1.5% in session 31's probe): GPU ms column, alternating with both switches off"),
    Step("fusion_rounds_32", 24, "python bench/fusion_suite.py --ops add_layernorm,cumsum_rows,groupnorm,"
         "label_smoothing_ce,softmax_topk,layernorm_widths --max-configs 4 --budget 300", 360,
         "the drafts whose kernels lost barriers (fused reductions, dropped closing barriers) against torch.compile",
         after="ln_rounds_32"),
    Step("single_stage_32", 24, "for e in TILEAGENT_SINGLE_STAGE=0 X=1; do echo $e; env $e python "
         "bench/tilelang_examples.py --only mha_fwd_bshd,mha_fwd_bhsd,dequant_gemm_w4a8,mha_sink_fwd_bhsd,"
         "block_sparse_attn,gemm_streamk --timeout 90 $([ -d /tmp/tl ] && echo --tilelang-site /tmp/tl) | tail -8; "
         "done", 560,
         "TileLang's num_stages=1 programs with their tiles loaded by TMA where free (single_stage; mha_fwd_bshd 0.89 "
         "of TileLang before) against the plain loop, real TileLang in the same runs"),
    Step("tilelang_32", 24, "python bench/tilelang_examples.py --only retention_fwd,mla_decode,mla_decode_ws,"
         "flashmla_ws,layernorm,gqa_decode,gemm --timeout 90 $([ -d /tmp/tl ] && echo --tilelang-site /tmp/tl)", 400,
         "session 32's lowering next to real TileLang: retention (9 -> 6 barriers an iteration; 0.94 before), the MLA "
         "decodes (a barrier less before P @ V), the layer norm (fused sums, forwarded reads; 0.89), gqa_decode "
         "(mask loads ahead; 0.75)"),
    # group 25: sessions 31-32's default-on lowering changes in two calls: their GPU tests, then each program they
    # reach run with all of them switched off, as by default, and by real TileLang, in one process per side
    Step("gpu_tests_33", 25, "python -m pytest -q -m gpu tests/test_single_stage.py tests/test_early_loads.py "
         "tests/test_fused_reductions.py tests/test_redundant_barriers.py tests/test_tilelang_hand_ws.py "
         "tests/test_forward_shared.py tests/test_bulk_store.py tests/test_shared_vectors.py", 200,
         "one-stage TMA pipelines, early loads, fused reduction rounds, dropped barriers, forwarded shared reads, bulk "
         "stores on the GPU"),
    Step("arm_ranges_33", 25, "python bench/tilelang_examples.py --only flashmla_ws,mla_decode_ws --timeout 60 --budget 180 "
         "--ab TILEAGENT_ARM_RANGES=0 $([ -d /tmp/tl ] && echo --tilelang-site /tmp/tl)", 200,
         "the hand-specialized MLA decodes with each arm's thread range stated (spills 56 / 176 bytes -> none, 22% / "
         "23% fewer SASS instructions; 0.87 / 0.95 of TileLang before) against without", after="gpu_tests_33"),
    Step("switches_33a", 25, "python bench/tilelang_examples.py --only gqa_decode,layernorm,mha_fwd_bshd,"
         f"retention_fwd,mha_fwd_bhsd --timeout 60 --budget 280 {SWITCHES_31_32} "
         "$([ -d /tmp/tl ] && echo --tilelang-site /tmp/tl)", 300,
         "ratio to TileLang (gqa_decode 0.75, layernorm 0.89, mha_fwd_bshd 0.89, retention 0.94, bhsd 1.09 before) "
         "and the x of sessions 31-32's switches", after="gpu_tests_33"),
    Step("switches_33b", 25, "python bench/tilelang_examples.py --only dequant_gemm_w4a8,mha_sink_fwd_bhsd,"
         f"mha_inference,rms_norm,mla_decode --timeout 60 --budget 280 {SWITCHES_31_32} "
         "$([ -d /tmp/tl ] && echo --tilelang-site /tmp/tl)", 300,
         "the other programs the switches reach (w4a8 1.44, mha_inference 0.95 before)", after="gpu_tests_33"),
    Step("epilogue_33", 25, "python bench/tilelang_examples.py --only gemm,gemm_splitk --timeout 60 "
         "--ab TILEAGENT_STAGE_EPILOGUE=0 $([ -d /tmp/tl ] && echo --tilelang-site /tmp/tl)", 200,
         "TileLang's 1024^3 GEMM (64 blocks, 15 us; 0.94 of TileLang): our staged epilogue against its direct stores",
         after="gpu_tests_33"),
    # group 26: what session 33 changed after its one device call (one-stage pipelines for loops of two gemms only),
    # the steps of group 25 it had no time for, and the played LLM's session-33 answers
    Step("single_stage_rule_33", 26, "python bench/tilelang_examples.py --only dequant_gemm_w4a8,mha_fwd_bshd,"
         "mha_fwd_bhsd,mha_sink_fwd_bhsd --timeout 60 --budget 300 --ab TILEAGENT_SINGLE_STAGE=0 "
         "$([ -d /tmp/tl ] && echo --tilelang-site /tmp/tl)", 320,
         "W4A8 back on the plain loop (0.92x as a one-stage pipeline), the attentions still one-stage pipelines "
         "(1.34x / 1.50x); both columns should agree on W4A8 now"),
    Step("played_33", 26, "CAP=55 bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played33\" session33", 300,
         "the played LLM's session-33 answers (adam_step, rmsnorm_backward, depthwise_conv7x7, bilinear_upsample2x) "
         "on every config"),
    # group 27: session 34's deferred P @ V (split stages, early rescale, wait anchor) against the build before, one
    # process each, alternating; and what issue 12 still asks (the GEMM batch)
    Step("defer_34", 27, "for i in 1 2 3; do for e in 'TILEAGENT_SPLIT_STAGES=0 TILEAGENT_EARLY_RESCALE=0 "
         "TILEAGENT_WAIT_ANCHOR=0' TILEAGENT_WAIT_ANCHOR=0 AS_BUILT=1; do echo \"== $e\"; env $e python "
         "bench/flash_attn_sweep.py --schedule 128,128,2,256 --schedule 128,128,3,256 | tail -4; done; done",
         300, "flash attention 128/128/2/256 and 3/256 as built (647 / 615-647 TFLOP/s, 0.97 of SDPA in session 34) "
         "against the build before and without the anchor"),
    Step("gemm_batch_34", 27, "python -m tileagent batch tasks/gemm_relu.py --grid N=4096,11008", 200,
         "issue 12: the GEMM batch exits 0 (it did in session 21; not run since)"),
    # group 28: what session 35 changed after its device time ran out: the oracle rule's spread for an
    # ill-conditioned few (the drafter's 128 x 128 attention was rejected on 'extremes' without it)
    Step("attention_draft_35", 28, "python bench/attention_draft.py --variants 3", 240,
         "the drafter's attention variants through the evaluator (every distribution) and next to SDPA: 128x128s2t256 "
         "and 128x64s2t256 failed on 'extremes' in session 35 (H100), 128x64s2t128 passed at 0.71 of SDPA"),
    Step("defer_causal_35", 28, "for e in AS_BUILT=1 TILEAGENT_DEFER_VARYING=1 AS_BUILT=1 TILEAGENT_DEFER_VARYING=1; "
         "do echo \"== $e\"; env $e python bench/flash_attn_sweep.py --causal --schedule 128,128,2,256 | tail -3; done",
         200, "causal flash attention (0.873 of SDPA on the H100) with P @ V deferred despite the varying trip count "
         "(level in session 34), alternating"),
    # group 29: what session 44 left unmeasured (one H100 call's A/B turned the second barrier rule off by default)
    Step("barrier_rule_44", 29, "for i in 1 2; do python bench/fusion_knobs.py --ops rmsnorm_module,layernorm_widths "
         "--max-configs 3 --trials 40 --env TILEAGENT_DROP_BARRIERS=sides --no-tunables | tail -6; done", 200,
         "the second barrier rule (=sides) against the default, twice: session 44 measured RMSNorm D=4096 at 0.90x "
         "torch.compile with it and 1.00x without, once"),
    Step("played_44", 29, "CAP=75 bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played44\" session44 && "
         "CAP=75 bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played44b\" session44b", 330,
         "session 44's and 44b's answers (merge_attn_states with its infinite lse planted, the int8 GEMM)"),
    Step("played_44c_42", 32, "CAP=75 bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played44c\" session44c && "
         "CAP=75 bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played42\" session42", 480,
         "session 44c's answers and session 42's (lora_linear failed at fp16's overflow boundary before the "
         "overflow-edge rule)"),
    # group 33: what session 45 wrote without a device: the evaluator's new run-time rules on CUDA (the guards' GPU
    # tests, every shared example through the evaluator), then session 45's played answers
    Step("gpu_tests_45", 33, "python -m pytest -q -m gpu tests/test_evaluator_timing.py tests/test_gpu.py "
         "tests/test_export.py && python bench/evaluator_isolation.py --cheats-only", 300,
         "the guards after output-written and the plain-argument rule, on CUDA: the evaluator's GPU tests and the "
         "timing cheats and the isolation A/B (bench/evaluator_isolation.py --cheats-only)"),
    Step("played_45", 33, "CAP=75 bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played45\" session45", 240,
         "session 45's answers (moe_grouped_gemm, maxpool2d_3x3s2, sparsemax)", after="gpu_tests_45"),
    Step("played_41_40", 30, "CAP=75 bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played41\" session41 && "
         "CAP=75 bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played40\" session40", 480,
         "sessions 40 and 41's answers: CAP=30 timed them out in session 44"),
    # group 34: what session 46 changed after its device time ran out (issue 13's folder failures fixed on the CPU, the
    # varlen loop now pipelined), its layernorm wave question (issue 14), its played answers; carry .tl
    Step("tilelang_fixed_46", 34, "mkdir -p /tmp/tl /tmp/tlx && tar -xJf .tl/tl_site.tar.xz -C /tmp/tl && tar -xJf "
         ".tl/tl_examples.tar.xz -C /tmp/tlx && F='--folder /tmp/tlx/examples --survey "
         "bench/tilelang_examples/survey.tsv' && python bench/tilelang_examples.py $F --only "
         "block_causal_attention/block_causal_attention.py,block_causal_attention/block_causal_attention_varlen.py,"
         "attention_sink/regression_attention_sink.py --timeout 90 --markdown -v && python bench/tilelang_examples.py "
         "$F --only attention_sink/example_gqa_sink_fwd_varlen.py,attention_sink/example_mha_sink_fwd_bhsd.py "
         "--tilelang-site /tmp/tl --timeout 60 --markdown", 300,
         "the three programs of ours that failed in session 46 (the == miscompile, the regression harness), ours only "
         "(TileLang's JIT timed out on them at 60 s), and the varlen sink forward (0.44 of TileLang; its K/V loop "
         "now a TMA pipeline) next to real TileLang"),
    Step("ln_waves_46", 34, "python bench/fusion_knobs.py --ops layernorm_widths --max-configs 3 --trials 20 "
         "--no-tunables --variant BLOCK_M=8 --variant BLOCK_M=32 --variant BLOCK_M=8,THREADS=64", 120,
         "layernorm_widths N=200 at x0.82 torch.compile: 1024 blocks of 16 rows at 7 blocks/SM make 1.11 waves; "
         "8 or 32 rows a block"),
    Step("played_46", 34, "CAP=75 bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played46\" session46", 330,
         "session 46's answers (fp8_per_tensor_quant, reverse_cumsum as float32 and float64 scans, "
         "sink_attention_decode)"),
    # group 31, once a call until it reports nothing left (issue 13's full table): carry .tl with tl_site.tar.xz and
    # tl_examples.tar.xz (`cd /tmp/tilelang && tar --exclude="*.png" --exclude="*.jpg" --exclude="*.svg" --exclude=
    # "*.md" --exclude="*.ipynb" -cJf REPO/.tl/tl_examples.tar.xz examples`: TileLang's examples/ at the survey's
    # commit, a35008a, 0.3 MB); commit the folder_done.tsv it brings back as bench/tilelang_examples/'s
    Step("tilelang_folder", 31, "mkdir -p /tmp/tl /tmp/tlx && tar -xJf .tl/tl_site.tar.xz -C /tmp/tl && tar -xJf "
         ".tl/tl_examples.tar.xz -C /tmp/tlx && cp bench/tilelang_examples/folder_done.tsv \"$GPU_SESSION_OUT/\" "
         "2>/dev/null; python bench/tilelang_examples.py --folder /tmp/tlx/examples --survey "
         "bench/tilelang_examples/survey.tsv --done \"$GPU_SESSION_OUT/folder_done.tsv\" --tilelang-site /tmp/tl "
         "--timeout 60 --budget 480 --warm 12 --markdown", 540,
         "TileLang's whole examples folder (the 127 programs the CPU survey builds) on both sides, resumed from the "
         "rows done before; the compile caches warmed 12 programs at a time first (session 46: 12 programs in 448 s "
         "without)"),
    # group 35: what session 47 changed after its device time ran out (carry .tl): the varlen sink forward
    # warp-specialized, the block-sparse programs pipelined, cdist's promoted K blocks, segment_softmax's stall
    Step("tilelang_pipelined_47", 35, "mkdir -p /tmp/tl /tmp/tlx && tar -xJf .tl/tl_site.tar.xz -C /tmp/tl && tar "
         "-xJf .tl/tl_examples.tar.xz -C /tmp/tlx && python bench/tilelang_examples.py --folder /tmp/tlx/examples "
         "--only attention_sink/example_gqa_sink_fwd_varlen.py,blocksparse_attention/"
         "example_tilelang_block_sparse_attn.py,blocksparse_gemm/example_blocksparse_gemm.py --tilelang-site /tmp/tl "
         "--timeout 60 --markdown -v", 300,
         "the varlen sink forward with a producer warpgroup (0.60 of TileLang unspecialized, session 47) and the "
         "block-sparse attention and GEMM with their masked copies pipelined (plain loops before), next to TileLang"),
    Step("played_47", 35, "H=bench/played_llm; timeout 60 python -m tileagent eval "
         "$H/answers/cdist_l2/turn2_promote_extra.py $H/refs/cdist_l2.py --device cuda --seeds 2; timeout 200 python "
         "-m tileagent eval $H/answers/segment_softmax/turn1.py $H/refs/segment_softmax.py --device cuda --seeds 1 "
         "--configs 1", 280,
         "cdist_l2 with each K block's six products promoted to a float32 total (the split alone failed under "
         "'offset' inputs), and segment_softmax (no verdict in 130 s in session 47) with its phases printed"),
    # group 36: what session 48 wrote without a device (no machine was lent): the played answers of sessions 47 and 48
    Step("played_47_48", 36, "CAP=60 bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played47\" session47 && "
         "CAP=60 bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played48\" session48", 540,
         "session 47's answers (channel_softmax_nchw with and without its T.dynamic rows: what the CPU loop's new "
         "run-time-row rule is for) and session 48's (softmax_backward, smooth_l1_loss, argmax_channels; +rows: the "
         "88 B-spilling kernel the export kept; +race: the racing scalar loss a config checked in one block kept, "
         "which the loop no longer serves)"),
    Step("played_48b", 36, "CAP=60 bash bench/played_llm/run_gpu.sh \"$GPU_SESSION_OUT/played48b\" session48b", 360,
         "session 48b's answers (rmsnorm_gated_residual, masked_scatter_mean, rope_interleaved_bwd; +shared: the L004 "
         "probe's final kernel, 64-bit accesses; +race: the plain read-modify-write from 2048 blocks the CPU loop "
         "exported before the cross-block check, expected wrong on the GPU)"),
    # group 37: session 49's row gathers (compiler.lower.gather), A/B against the element loop, next to TileLang
    Step("row_gather_49", 37, "mkdir -p /tmp/tl /tmp/tlx && tar -xJf .tl/tl_site.tar.xz -C /tmp/tl && tar -xJf "
         ".tl/tl_examples.tar.xz -C /tmp/tlx && python bench/tilelang_examples.py --folder /tmp/tlx/examples --only "
         "deepseek_v32/sparse_mla_fwd.py,dsa_sparse_finetune/sparse_mla_fwd.py "
         "--tilelang-site /tmp/tl --ab TILEAGENT_ROW_GATHER=0 --timeout 90 --markdown -v", 280,
         "TileLang's sparse MLA forward (DeepSeek V3.2's and the DSA finetune's): their KV rows gathered by index "
         "into shared tiles as cp.async pipeline producers (16-byte runs), against the element loop "
         "(TILEAGENT_ROW_GATHER=0) and real TileLang in the same run"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--group", type=int, help="run the steps of this group")
    ap.add_argument("--only", help="comma-separated step names (in the order given)")
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp/gpu_session")
    ap.add_argument("--budget", type=float, default=540.0, help="seconds; no step starts past what remains")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    if a.list:
        for s in STEPS:
            print(f"{s.group}  {s.name:18s} {s.limit_s:4d} s  {s.why}")
        return 0
    by_name = {s.name: s for s in STEPS}
    if a.only:
        unknown = [n for n in a.only.split(",") if n not in by_name]
        if unknown:
            ap.error(f"unknown step(s) {', '.join(unknown)}; --list shows them")
        steps = [by_name[n] for n in a.only.split(",")]
    elif a.group is not None:
        steps = [s for s in STEPS if s.group == a.group]
    else:
        ap.error("give --group N, --only STEPS or --list")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GPU_SESSION_OUT": str(out), "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    start, rows, failed = time.monotonic(), [], set()
    with open(out / "session.log", "a") as log:
        for s in steps:
            left = a.budget - (time.monotonic() - start)
            if s.after in failed:  # failed or skipped in this run
                rows.append((s.name, None, 0.0, f"skipped: {s.after} did not pass"))
                failed.add(s.name)
                continue
            if left < s.limit_s:
                rows.append((s.name, None, 0.0, f"skipped: {left:.0f} s of budget left, the step may take "
                                                 f"{s.limit_s} s"))
                failed.add(s.name)
                continue
            log.write(f"\n===== {s.name}: {s.command}\n")
            log.flush()
            t0 = time.monotonic()
            try:
                done = subprocess.run(["bash", "-c", s.command], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, timeout=s.limit_s)
                code, text = done.returncode, done.stdout
            except subprocess.TimeoutExpired as e:
                code, text = 124, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) \
                    else (e.stdout or "")
            log.write(text)
            log.write(f"\n===== {s.name}: exit {code} after {time.monotonic() - t0:.0f} s\n")
            log.flush()
            last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")
            rows.append((s.name, code, time.monotonic() - t0, last[:110]))
            if code != 0:
                failed.add(s.name)
    table = [f"{'step':18s} {'exit':>4s} {'s':>5s}  last line"]
    table += [f"{n:18s} {'-' if c is None else c:>4} {t:5.0f}  {last}" for n, c, t, last in rows]
    (out / "summary.txt").write_text("\n".join(table) + "\n")
    for folder in sorted(d for d in out.iterdir() if d.is_dir()):  # one file each for the device tool
        shutil.make_archive(str(folder), "gztar", root_dir=out, base_dir=folder.name)
        shutil.rmtree(folder)
    print("\n".join(table))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
