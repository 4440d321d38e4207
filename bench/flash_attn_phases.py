"""Where a flash attention block's time goes: per-block phase cycles of the shared example, and its fixed cost per
block against SDPA's from a sweep of sequence lengths.

Usage (CUDA machine): TILEAGENT_SHARED=/path/to/shared python bench/flash_attn_phases.py [--causal] [--no-stamps]
    [--no-sweep]
Sweep: the example at 128/128/2/256 and SDPA at S = 1024 .. 16384 with B x S fixed (8192 blocks at every length),
checked, then timed (CUDA events, L2 flushed, medians); a straight line through the times gives each side's cost per
key tile and its fixed cost (the time at zero key tiles). Stamps: the example's CUDA (B8 H32 S4096 D128) with
``clock64()`` read by the first consumer thread at its phases (start, Q in shared memory, first K tile ready, key
tiles done, divisions done, O_s written, before the bulk store of O, end), inserted through the runtime's CUDA
post-processing hook and written into the block's own first row of Q after its last use (the run's outputs are then
not checked); medians over the 8192 blocks of the third launch, and the gap between consecutive blocks on one SM.
The markers follow the source TileAgent emits for this schedule today (a warp-specialized consumer branch, one
bulk store per row of O); a change of that source that moves them fails loudly here (``ValueError``).
"""

from __future__ import annotations

import argparse
import collections
import re
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.memory_bound import bench  # noqa: E402
from bench.tensor_core import load  # noqa: E402

STAMPS = ("start", "consumer", "Q in shared", "K0 ready", "key tiles done", "divisions done", "O_s written",
          "bulk store issued", "end")
_BAR = 'asm volatile("bar.sync 1, 256;" ::: "memory");'
_K0 = "tl_mbar_wait((unsigned)__cvta_generic_to_shared(&v_tl_mbar[k % 2])"


def stamped(src: str, _target=None) -> str:
    """The kernel source with the phase stamps (module docstring)."""
    def mark(src: str, at: int, k: int) -> str:
        return src[:at] + f" ts[{k}] = clock64();" + src[at:]

    def after(src: str, text: str, start: int = 0, last: bool = False) -> int:
        i = src.rindex(text) if last else src.index(text, start)
        return i + len(text)

    src = src.replace("const int tid = threadIdx.x;",
                      "const int tid = threadIdx.x;\n  long long ts[9] = {clock64()};", 1)
    src = mark(src, after(src, 'asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");'), 1)
    src = mark(src, src.rindex(_BAR, 0, src.index(_K0)) + len(_BAR), 2)
    src = mark(src, src.index("\n", src.index(_K0)), 3)
    divisions = list(re.finditer(r"\n    acc_\d+ = acc_\d+ / l_run\[\d\];", src))
    if not divisions:
        raise ValueError("no epilogue divisions found: the markers no longer match the emitted source")
    src = mark(src, divisions[-1].end(), 5)
    src = mark(src, divisions[0].start(), 4)
    shift = len(" ts[4] = clock64();")
    src = mark(src, after(src, _BAR, divisions[-1].end() + shift), 6)
    src = mark(src, after(src, _BAR, last=True), 7)
    body = src.rstrip()
    if not body.endswith("}\n  }\n}"):
        raise ValueError("unexpected kernel end: the markers no longer match the emitted source")
    body = body[:-len("}\n}")]  # the consumer branch and the kernel stay open for the write below
    return body + ("  if (tid == 0) {\n      ts[8] = clock64(); unsigned smid; asm volatile(\"mov.u32 %0, %%smid;\" : "
                   "\"=r\"(smid));\n      long long* st = (long long*)(const_cast<half*>(Q) + ((long long)(bz * 4096 + "
                   "bx * 128) * 32 + by) * 128);\n      st[0] = smid; for (int i = 0; i < 9; ++i) st[1 + i] = ts[i]; "
                   "st[10] = 7777777;\n    }\n  }\n}\n")


def phases(causal: bool) -> None:
    from tileagent.compiler.runtime.hooks import set_cuda_postproc

    fa = load("flash_attn_fwd")
    B, H, S, D = 8, 32, 4096, 128
    set_cuda_postproc(stamped)
    try:
        kernel = fa.flash_attn_fwd(B, H, S, D, causal, block_M=128, block_N=128, num_stages=2, threads=256)
        q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
        for _ in range(3):
            kernel(q, k, v)
        torch.cuda.synchronize()
    finally:
        set_cuda_postproc(None)
    st = q.view(B, S // 128, 128, H, D)[:, :, 0, :, :44].contiguous().view(torch.int64).view(-1, 11).cpu()
    if not bool((st[:, 10] == 7777777).all()):
        raise ValueError("stamps missing: a block did not reach the end marker")
    cycles = collections.defaultdict(list)
    per_sm = collections.defaultdict(list)
    for row in st.tolist():
        t = row[1:10]
        for a, b, name in zip(t, t[1:], STAMPS[1:]):
            cycles[f"-> {name}"].append(b - a)
        cycles["block"].append(t[-1] - t[0])
        per_sm[row[0]].append((t[0], t[-1]))
    for runs in per_sm.values():
        runs.sort()
        cycles["gap to the SM's next block"] += [b[0] - a[1] for a, b in zip(runs, runs[1:])]
    print(f"phases of a block, {'causal' if causal else 'non-causal'} S={S} (clock64 cycles, 8192 blocks):")
    for name, xs in cycles.items():
        print(f"  {name:28s} median {statistics.median(xs):8.0f}  p90 {sorted(xs)[9 * len(xs) // 10]:8.0f}")


def sweep(causal: bool) -> None:
    fa = load("flash_attn_fwd")
    H, D, rows = 32, 128, []
    for S in (1024, 2048, 4096, 8192, 16384):
        B = 32768 // S
        q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        kernel = fa.flash_attn_fwd(B, H, S, D, causal, block_M=128, block_N=128, num_stages=2, threads=256)
        torch.testing.assert_close(kernel(q, k, v), fa.reference(q, k, v, causal), rtol=1e-2, atol=1e-2)
        ours = bench(lambda: kernel(q, k, v), trials=15)[0]
        sdpa = bench(lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal),
                     trials=15)[0]
        tiles = (S // 128 + 1) / 2 if causal else S // 128  # key tiles a block runs, on average
        rows.append((S, tiles, ours, sdpa))
        flops = 4 * B * H * S * S * D // (2 if causal else 1)
        print(f"S={S:5d} B={B:2d}: ours {ours:.3f} ms ({flops / ours / 1e9:.1f} TFLOP/s), SDPA {sdpa:.3f} ms "
              f"({flops / sdpa / 1e9:.1f}), ours / SDPA {sdpa / ours:.3f}", flush=True)
    for side, col in (("ours", 2), ("SDPA", 3)):
        xs, ys = [r[1] for r in rows], [r[col] for r in rows]
        slope = statistics.covariance(xs, ys) / statistics.variance(xs)
        fixed = statistics.mean(ys) - slope * statistics.mean(xs)
        print(f"{side}: {slope:.4f} ms per key tile, fixed {fixed:.3f} ms = {fixed / slope:.1f} key tiles' worth")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--no-stamps", action="store_true")
    ap.add_argument("--no-sweep", action="store_true")
    a = ap.parse_args()
    if not a.no_sweep:
        sweep(a.causal)
    if not a.no_stamps:
        phases(a.causal)


if __name__ == "__main__":
    main()
