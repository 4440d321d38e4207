"""First-contact GPU check of the wgmma entries (sm_90a's default; the script sets TILEAGENT_ENABLE_WGMMA=1, which
only undoes an opt-out =0 in the caller's environment): a ladder of small gemms, each in
its own subprocess (a fault kills only its case), checked exactly before anything is timed.

Usage (H200): python bench/wgmma_probe.py            (all 17 cases, ~1 minute)
              python bench/wgmma_probe.py --case NAME (one case, in this process)
Without a GPU, ``--sim`` runs the same ladder in the SIMT emulator (slow: the ragged cases take minutes).
Each case compiles C = A @ B (fp32 accumulator, stored as fp32) with the wgmma entry for the GPU, checks that the
gemm lowered to wgmma.mma_async (the get_ir("thread") line is printed), runs it on integer-valued fp16/bf16 inputs in
[-2, 2] (every product and partial sum is exact in fp32, so the result must equal torch's fp64 product bit for bit)
and reports ok, WRONG (how many elements, and where: the wrong rows by row % 8 and the wrong columns by 64-column
block, which points at the swizzle, SBO or LBO), FAULT (the exit status and the last lines of the CUDA error) or
TIMEOUT. The ladder goes from the layout already verified on the H200 by hand-written kernels (one 128-byte swizzle
atom per operand) to the generalized ones (column blocks along N and K, 64B / 32B swizzles, two row atoms, two
warpgroups with N = 256, ragged sizes), so the first failing rung names the feature at fault; the last two rungs
keep wgmma groups in flight across many K iterations of a 3-stage pipeline (the overlapped schedule). Two RS cases
follow (``RS_CASES``): O = fp16(A @ B^T) @ V with P, the first gemm's accumulator cast to fp16, read from registers
by ``wgmma.mma_async`` (the RS form), on one and on two warpgroups, also exact.
Exit status 0 when every case is ok, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# name: (M, N, K, (block_M, block_N, block_K), transpose_B, threads, dtype, what it adds)
CASES = {
    "atom128": (64, 64, 64, (64, 64, 64), False, 128, "float16", "one 128B atom per operand, 4 K steps (+32 B)"),
    "ktiles": (64, 64, 256, (64, 64, 64), False, 128, "float16", "4 K tiles through the 2-stage cp.async pipeline"),
    "n128_lbo": (64, 128, 64, (64, 128, 64), False, 128, "float16", "N-major B in two 128B column blocks (LBO)"),
    "kmajor_b": (64, 64, 64, (64, 64, 64), True, 128, "float16", "K-major B (transpose_B, imm-trans-b 0)"),
    "kmajor_k128": (64, 64, 256, (64, 64, 128), True, 128, "float16", "A and B K-major in two column blocks along K"),
    "swz64": (64, 32, 64, (64, 32, 32), False, 128, "float16", "64B swizzle on A and on a 32-wide N-major B"),
    "swz32": (64, 64, 48, (64, 64, 16), False, 128, "float16", "32B swizzle on A (block_K 16)"),
    "two_atoms": (128, 64, 128, (128, 64, 64), False, 128, "float16", "two 64-row atoms per warpgroup"),
    "two_wg_n256": (128, 256, 64, (128, 256, 32), False, 256, "float16", "two warpgroups, m64n256, 4 column blocks"),
    "ragged": (1000, 776, 520, (128, 128, 64), False, 128, "float16", "the example's tiles at ragged M, N, K"),
    "ragged_bf16": (1000, 776, 520, (128, 128, 64), False, 128, "bfloat16", "the same in bf16"),
    "n_split": (64, 256, 128, (64, 256, 64), False, 256, "float16",
                "two warpgroups split N (block_M 64): m64n128 each, the second's B starts 2 column blocks in"),
    "n_split_kmajor": (64, 128, 128, (64, 128, 64), True, 256, "float16",
                       "two warpgroups split N, K-major B: the second's B starts at row 64"),
    # wgmma groups in flight across K iterations (wait_group 1; every stage refilled many times)
    "overlap3": (256, 256, 2048, (128, 128, 64), False, 128, "float16", "3 stages, 32 K tiles, wait_group 1"),
    "overlap3_two_wg": (256, 512, 1024, (128, 256, 64), False, 256, "float16",
                        "3 stages of 128/256/64, two warpgroups, 16 K tiles, wait_group 1"),
}
STAGES = {"overlap3": 3, "overlap3_two_wg": 3}  # num_stages of T.Pipelined; 2 for the other cases
# RS (A from registers): O = fp16(A @ B^T) @ V in one block, P = the first gemm's accumulator cast into registers
# name: (M, N, K, D, threads, what it adds)
RS_CASES = {
    "rs_one_wg": (64, 32, 64, 64, 128, "RS: P (64 x 32) packed from wgmma's D, m64n64k16, V N-major 128B"),
    "rs_two_wg": (256, 64, 32, 128, 256, "RS: two warpgroups, two row atoms each, m64n128k16, V in two column blocks"),
}


def gemm(M, N, K, bm, bn, bk, trans_b, threads, dtype, stages=2):
    import tileagent.language as T

    b_shape, b_tile = ((N, K), (bn, bk)) if trans_b else ((K, N), (bk, bn))

    @T.prim_func
    def probe(A: T.Tensor((M, K), dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared(b_tile, dtype)
            acc = T.alloc_fragment((bm, bn), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[by * bm, k * bk], A_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, acc, transpose_B=trans_b)
            T.copy(acc, C[by * bm, bx * bn])

    return probe


def two_gemms(M, N, K, D, threads):
    """O = fp16(A @ B^T) @ V: the first gemm on wgmma SS, P = its accumulator as fp16 registers, the second on RS."""
    import tileagent.language as T

    @T.prim_func
    def probe_rs(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), V: T.Tensor((N, D), "float16"),
                 O: T.Tensor((M, D), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((N, K), "float16")
            V_s = T.alloc_shared((N, D), "float16")
            s = T.alloc_fragment((M, N), "float32")
            p = T.alloc_fragment((M, N), "float16")
            acc = T.alloc_fragment((M, D), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.copy(V, V_s)
            T.gemm(A_s, B_s, s, transpose_B=True, clear_accum=True)
            T.copy(s, p)
            T.gemm(p, V_s, acc, clear_accum=True)
            T.copy(acc, O)

    return probe_rs


def run_rs_case(name: str, sim: bool = False) -> int:
    import torch

    import tileagent

    M, N, K, D, threads, _ = RS_CASES[name]
    os.environ["TILEAGENT_ENABLE_WGMMA"] = "1"
    kernel = tileagent.compile(two_gemms(M, N, K, D, threads), target="sim" if sim else "cuda")
    device = "cpu" if sim else "cuda"
    lines = [x.strip() for x in kernel.get_ir("thread").splitlines() if "# T.gemm" in x]
    print("\n".join(f"    {x}" for x in lines))
    if not any("m64nNk16 RS:" in x for x in lines):
        print("    NOT ON WGMMA RS")
        return 1
    torch.manual_seed(0)
    a, b, v = (torch.randint(-2, 3, shape, device=device).half() for shape in ((M, K), (N, K), (N, D)))
    o = torch.full((M, D), float("nan"), device=device)
    kernel(a, b, v, o)
    if not sim:
        torch.cuda.synchronize()
    ref = (a.double() @ b.double().T).half().double() @ v.double()  # exact: integers, |S| <= 4 K fits fp16
    wrong = o.double() != ref
    if not bool(wrong.any()):
        return 0
    rows, cols = wrong.nonzero(as_tuple=True)
    r, col = int(rows[0]), int(cols[0])
    print(f"    WRONG: {int(wrong.sum())} of {M * D} elements; wrong rows by row % 16 "
          f"{torch.bincount(rows % 16, minlength=16).tolist()}; first O[{r}, {col}] = {float(o[r, col])}, want "
          f"{float(ref[r, col])}")
    return 1


def run_case(name: str, sim: bool = False) -> int:
    import torch

    import tileagent

    if name in RS_CASES:
        return run_rs_case(name, sim)
    M, N, K, tiles, trans_b, threads, dtype, _ = CASES[name]
    os.environ["TILEAGENT_ENABLE_WGMMA"] = "1"
    kernel = tileagent.compile(gemm(M, N, K, *tiles, trans_b, threads, dtype, STAGES.get(name, 2)),
                               target="sim" if sim else "cuda")
    device = "cpu" if sim else "cuda"
    line = next((x.strip() for x in kernel.get_ir("thread").splitlines() if "T.gemm" in x), "?")
    print(f"    {line}")
    if "wgmma.mma_async" not in kernel.get_kernel_source():
        print("    NOT ON WGMMA")
        return 1
    torch.manual_seed(0)
    td = getattr(torch, dtype)
    a = torch.randint(-2, 3, (M, K), device=device).to(td)
    b = torch.randint(-2, 3, (N, K) if trans_b else (K, N), device=device).to(td)
    c = torch.full((M, N), float("nan"), device=device)
    kernel(a, b, c)
    if not sim:
        torch.cuda.synchronize()
    ref = a.double() @ (b.double().T if trans_b else b.double())
    wrong = c.double() != ref
    if not bool(wrong.any()):
        return 0
    rows, cols = wrong.nonzero(as_tuple=True)
    by_row = torch.bincount(rows % 8, minlength=8).tolist()
    by_block = torch.bincount(cols // 64, minlength=(N + 63) // 64).tolist()
    r, col = int(rows[0]), int(cols[0])
    print(f"    WRONG: {int(wrong.sum())} of {M * N} elements; wrong rows by row % 8 {by_row}; wrong columns by "
          f"64-column block {by_block}; first C[{r}, {col}] = {float(c[r, col])}, want {float(ref[r, col])}")
    return 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=sorted(CASES) + sorted(RS_CASES))
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--sim", action="store_true", help="run in the SIMT emulator (no GPU)")
    args = ap.parse_args()
    if args.case:
        return run_case(args.case, args.sim)
    status = 0
    for name, case in list(CASES.items()) + list(RS_CASES.items()):
        print(f"{name:<12} {case[-1]}", flush=True)
        try:
            p = subprocess.run([sys.executable, __file__, "--case", name] + (["--sim"] if args.sim else []),
                               capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print("    TIMEOUT (a hang: wait or barrier)", flush=True)
            status = 1
            continue
        print(p.stdout.rstrip())
        if p.returncode == 0:
            print("    ok", flush=True)
        else:
            status = 1
            if "WRONG" not in p.stdout and "NOT ON" not in p.stdout:
                print(f"    FAULT rc={p.returncode}: " + " | ".join(p.stderr.strip().splitlines()[-3:]), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
