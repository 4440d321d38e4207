"""GPU check of the TileLang forms issue 13's CPU work added (the CPU tests check them on the interpreter and the
SIMT emulator; this runs their CUDA on the device): 8-bit T.gemm on mma.sync m16n8k32 (TileLang's fp8 GEMM, e4m3 and
e5m2; the w4a8 int4 x int8 GEMM, exact), T.im2col with T.Tensor(shape, dtype, X.data) views (TileLang's convolution
against torch.conv2d), per-thread code (T.get_thread_binding: the four SIMT kernels of TileLang's GEMV example) and
hand-written warp specialization run in program order (TileLang's copy_0_gemm_1 and barrierpipe GEMMs), and a
``while`` loop (TileLang's stream-K GEMM, checked by its own main).

In: nothing (the programs are the copies in bench/tilelang_examples). Out: one line per case, ``ok`` / ``WRONG`` (with
the error against the reference) / ``FAIL`` (the exception), and the kernel's median time in ms next to torch's
(``tilelang.profiler.do_bench``); exit status 0 when every case is ok. Each case runs in this process, in order;
a CUDA fault ends the run at that case (its name was printed first).

    python bench/tilelang_new_forms_gpu.py            # all cases (~1 minute on an H200)
    python bench/tilelang_new_forms_gpu.py --only conv,gemv
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
EXAMPLES = REPO / "bench" / "tilelang_examples"


def _load(rel: str) -> dict:
    from tileagent.compat.run import load_script

    return load_script(EXAMPLES / rel)


def case_fp8(torch, tilelang, T, dev, n):
    ns = _load("gemm_fp8/example_tilelang_gemm_fp8.py")
    out = []
    for name in ("float8_e4m3fn", "float8_e5m2"):
        dt = getattr(torch, name)
        a = torch.randn(n, n, device=dev).to(dt)
        b = torch.randn(n, n, device=dev).to(dt)
        c = ns["matmul"](a, b, 128, 128, 64, name)
        diff = float(ns["calc_diff"](c, (a.half() @ b.half().T).to(dt)))
        ms = tilelang.profiler.do_bench(lambda: ns["matmul"](a, b, 128, 128, 64, name))
        ref = tilelang.profiler.do_bench(lambda: a.half() @ b.half().T)
        out.append((f"fp8 {name} {n}^3", diff < 1e-3, f"calc_diff {diff:.2e}", ms, ref))
    return out


def case_w4a8(torch, tilelang, T, dev, n):
    ns = _load("dequantize_gemm/example_dequant_gemm_w4a8.py")
    kernel = ns["matmul_int8xint4"](n, n, n, T.int8, T.int32, T.int32, num_bits=4, block_M=32, block_N=32,
                                    block_K=128, num_stages=1, threads=128)
    A = torch.randint(-128, 128, (n, n), dtype=torch.int8, device=dev)
    B = torch.randint(0, 256, (n, n // 2), dtype=torch.uint8, device=dev)
    ref = ns["ref_program"](A, B)  # exact: float32 sums of int8 x int4 products stay below 2**24 (no TF32 by default)
    got = kernel(A, B)
    wrong = int((got != ref).sum())
    return [(f"w4a8 int8 gemm {n}^3", wrong == 0, f"{wrong} wrong elements", tilelang.profiler.do_bench(
        lambda: kernel(A, B)), None)]


def case_conv(torch, tilelang, T, dev, n):
    ns = _load("convolution/example_convolution.py")
    out = []
    for S, D, P in ((1, 1, 1), (2, 2, 2)):
        a = torch.randn(n // 32, 64, 64, 128, device=dev).half()
        b = torch.randn(3, 3, 128, 128, device=dev).half()
        c = ns["convolution"](a, b, S, D, P, 64, 128, 32, 3, 256)
        ref = ns["ref_program"](S, P, D)(a, b)
        err = float((c.float() - ref.float()).abs().max())
        ms = tilelang.profiler.do_bench(lambda: ns["convolution"](a, b, S, D, P, 64, 128, 32, 3, 256))
        ref_ms = tilelang.profiler.do_bench(lambda: ns["ref_program"](S, P, D)(a, b))
        out.append((f"conv N{n // 32} C128 64x64 F128 k3 s{S} d{D} p{P}", torch.allclose(c, ref, rtol=1e-2, atol=1e-2),
                    f"max err {err:.3g}", ms, ref_ms))
    return out


def case_gemv(torch, tilelang, T, dev, n):
    ns = _load("gemv/example_gemv.py")
    A, B = torch.randn(2 * n, device=dev).half(), torch.randn(2 * n, 2 * n, device=dev).half()
    ref = (A.float() @ B.float().T)
    ref_ms = tilelang.profiler.do_bench(lambda: A @ B.T)
    out = []
    for name, cfg in (("naive_gemv", dict(BLOCK_N=128, BLOCK_K=128)), ("naive_splitk_gemv", dict(BLOCK_N=32,
                      BLOCK_K=32)), ("splitk_gemv", dict(BLOCK_N=32, BLOCK_K=32, reduce_threads=32)),
                      ("splitk_gemv_vectorized", dict(BLOCK_N=2, reduce_threads=32))):
        kernel = ns[name].compile(N=2 * n, K=2 * n, **cfg)
        got = kernel(A, B)
        err = float((got.float() - ref).abs().max() / ref.abs().max())
        out.append((f"gemv SIMT {name} {2 * n}x{2 * n}", err < 1e-2, f"rel err {err:.2e}",
                     tilelang.profiler.do_bench(lambda: kernel(A, B)), ref_ms))
    return out


def case_ws(torch, tilelang, T, dev, n):
    out = []
    for rel, fn in (("warp_specialize/example_warp_specialize_gemm_copy_0_gemm_1.py",
                     "matmul_warp_specialize_copy_0_gemm_1"),
                    ("warp_specialize/example_warp_specialize_gemm_barrierpipe_stage2.py", "matmul")):
        ns = _load(rel)
        a, b = torch.randn(n, n, device=dev).half(), torch.randn(n, n, device=dev).half()
        c = ns[fn](a, b, 128, 128, 64)
        ok = torch.allclose(c, a @ b, rtol=1e-2, atol=1e-2)
        out.append((f"ws {Path(rel).stem.replace('example_warp_specialize_gemm_', '')} {n}^3", ok, f"max err {float((c - a @ b).abs().max()):.3g}",
                    tilelang.profiler.do_bench(lambda: ns[fn](a, b, 128, 128, 64)),
                    tilelang.profiler.do_bench(lambda: a @ b)))
    return out


def case_streamk(torch, tilelang, T, dev, n):
    """TileLang's stream-K GEMM (a while loop over a local counter, atomic adds of partial tiles): its own main
    checks C against A @ B.T; its sizes are module constants (256 x 1024 x 512)."""
    if dev != "cuda":
        return [("streamk (GPU only: its tensors are made on cuda at import)", True, "skipped", 0.0, None)]
    ns = _load("gemm_streamk/example_tilelang_gemm_streamk.py")
    ns["main"]()  # raises when C differs from A @ B.T
    ms = ns["run_regression_perf"]()
    ref = tilelang.profiler.do_bench(lambda: torch.matmul(ns["A"], ns["B"].T))
    return [("streamk 256x1024x512", True, "its own assert_close passed", ms, ref)]


CASES = {"fp8": case_fp8, "w4a8": case_w4a8, "conv": case_conv, "gemv": case_gemv, "ws": case_ws,
         "streamk": case_streamk}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated cases of {', '.join(CASES)}")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="run the script itself on the CPU interpreter at size 128 (checks the script, not the GPU)")
    args = parser.parse_args(argv)
    import torch

    dev, n = ("cpu", 128) if args.cpu_smoke else ("cuda", 4096)
    if not args.cpu_smoke and not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 2
    from tileagent import compat

    compat.install()
    import tilelang
    import tilelang.language as T
    import tilelang.profiler  # noqa: F401

    names = args.only.split(",") if args.only else list(CASES)
    bad = 0
    for name in names:
        print(f"-- {name}", flush=True)
        try:
            rows = CASES[name](torch, tilelang, T, dev, n)
        except Exception as e:  # noqa: BLE001 -- a bench reports whatever stopped a case
            bad += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            traceback.print_exc(limit=3)
            continue
        for what, ok, detail, ms, ref_ms in rows:
            bad += not ok
            ref = f", torch {ref_ms:.4f} ms" if ref_ms is not None else ""
            print(f"{'ok   ' if ok else 'WRONG'} {what}: {detail}; {ms:.4f} ms{ref}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
