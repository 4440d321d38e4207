"""First-contact GPU check of the opt-in TMA entry (TILEAGENT_ENABLE_TMA=1): small global -> shared copies by
cp.async.bulk.tensor for each swizzle, read back and compared exactly, then small pipelined GEMMs with TMA loads
checked against torch; each case in its own subprocess (a fault or a hang kills only its case).

Usage (H200): python bench/tma_probe.py             (every case, well under a minute)
              python bench/tma_probe.py --case NAME  (one case, in this process)
              python bench/tma_probe.py --sim        (the same ladder in the SIMT emulator, no GPU; slow)
Copy cases: B = A through one shared tile per block (T.copy(A tile, S) by TMA, then T.copy(S, B tile) by plain
stores, which read S through its layout), at ragged sizes (boxes past the tensor's end load zeros, which the store
leaves out), so B must equal A bit for bit; a wrong swizzle, box or column-block offset shows as WRONG with the
first wrong (row, col) and how many. The ladder goes from no swizzle to the 128-byte swizzle in column blocks, fp32,
bf16 and a 3-d tensor (a box with a size-1 dim). "fallback" passes a tensor whose row stride is not a multiple of 16
bytes (a dynamic dim): the call must run the variant without TMA, correctly, with a log line. GEMM cases: C = A @ B
(fp32 out) through a T.Pipelined loop whose two loads are TMA (one mbarrier per stage), with the default gemm
(mma.sync, ldmatrix from the TMA-written swizzle) and with wgmma (TILEAGENT_ENABLE_WGMMA=1), on integer-valued
fp16 inputs in [-2, 2] so the result must equal torch's fp64 product exactly; "gemm_nested" runs the pipeline twice
per block (phases carried across loop executions). Each case checks that get_ir("thread") shows TMA where it
should (else NOT-TMA). Output per case: ok / WRONG / NOT-TMA / FAULT (exit status, last lines) / TIMEOUT.
The first case, "raw", launches a hand-written TMA kernel (one 64 x 64 box, no swizzle) with the tensor map our
runtime encodes and passes: if it fails and nothing else works, the runtime is at fault; if only the compiled cases
fail, the generated code is. Exit status 0 when every case is ok. On the H200 (session 4, commit bc91a8c) the 11
copy cases were exact; the run order now puts the pipelined gemms and the fallback, which that run did not reach,
after "raw" and three copies. With TILEAGENT_MBAR_SPIN_LIMIT=<cycles> (gpu_session sets 4e9, about 2 s) an mbarrier
wait that never completes traps (FAULT) instead of hanging until the case's timeout (the compiled cases; "raw" has
no limit and relies on the timeout).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# copy cases: name -> (M, N, block_M, block_N, dtype, layout ("row" | "wgmma"), what it adds)
COPY_CASES = {
    "none": (200, 96, 64, 64, "float16", "row", "no swizzle, 128-byte rows, ragged M"),
    "none_narrow": (72, 40, 32, 8, "float32", "row", "no swizzle, 32-byte fp32 rows, ragged"),
    "swz128": (200, 160, 64, 64, "float16", "wgmma", "128B swizzle (rows of 64 halves)"),
    "swz64": (200, 80, 64, 32, "float16", "wgmma", "64B swizzle (rows of 32 halves)"),
    "swz32": (200, 40, 64, 16, "float16", "wgmma", "32B swizzle (rows of 16 halves)"),
    "blocks128": (200, 320, 64, 128, "float16", "wgmma", "128B swizzle, two 64-column boxes per tile"),
    "blocks128x4": (96, 512, 32, 256, "bfloat16", "wgmma", "bf16, four column blocks (256-wide tile)"),
    "fp32_128": (130, 100, 64, 32, "float32", "wgmma", "fp32, 128B swizzle"),
    "rows256": (600, 64, 256, 64, "float16", "wgmma", "256-row box (the limit)"),
}
GEMM_CASES = {
    # name -> (M, N, K, block_M, block_N, block_K, stages, wgmma, what)
    "gemm_mma": (256, 256, 512, 128, 128, 64, 3, False, "mma.sync consumers, 128B swizzle A, B in 2 column blocks"),
    "gemm_mma_bk32": (200, 136, 320, 128, 64, 32, 3, False, "mma.sync, 64B swizzle A, ragged M, N"),
    "gemm_wgmma": (256, 256, 1024, 128, 128, 64, 3, True, "wgmma SS consumers (overlapped), 16 K tiles"),
    "gemm_wgmma_ragged": (1000, 776, 520, 128, 128, 64, 3, True, "wgmma, ragged M, N, K (zero-filled boxes)"),
    "gemm_wgmma_4st": (512, 512, 2048, 128, 128, 64, 4, True, "wgmma, 4 stages, 32 K tiles"),
}
SPECIAL = {"raw": "a hand-written TMA kernel launched with our runtime's encoded tensor map (no compiler): "
                  "isolates the runtime from the generated code",
           "fallback": "a dynamic row length of 100 halves (200-byte stride): runs the variant without TMA",
           "copy3d": "3-d tensor (batch, rows, cols), box with a size-1 dim",
           "gemm_nested": "the pipelined loop inside a serial loop: barrier phases carried over"}


def copy_kernel(M, N, bm, bn, dtype, layout):
    import tileagent.language as T
    from tileagent.compiler.layout.layout import wgmma_operand

    elem = {"float16": 2, "bfloat16": 2, "float32": 4}[dtype]

    @T.prim_func
    def k(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            S = T.alloc_shared((bm, bn), dtype)
            if layout == "wgmma":
                T.annotate_layout({S: wgmma_operand((bm, bn), elem)})
            T.copy(A[by * bm, bx * bn], S)
            T.copy(S, B[by * bm, bx * bn])
    return k


def copy3d_kernel(Bt, M, N, bm, bn, dtype):
    import tileagent.language as T

    @T.prim_func
    def k(A: T.Tensor((Bt, M, N), dtype), B: T.Tensor((Bt, M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bm), Bt, threads=128) as (bx, bz):
            S = T.alloc_shared((bm, bn), dtype)
            T.copy(A[bz, bx * bm, 0], S)
            T.copy(S, B[bz, bx * bm, 0])
    return k


def dynamic_kernel(bn, dtype):
    import tileagent.language as T

    N = T.dynamic("N")

    @T.prim_func
    def k(A: T.Tensor((64, N), dtype), B: T.Tensor((64, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), threads=128) as bx:
            S = T.alloc_shared((64, bn), dtype)
            T.copy(A[0, bx * bn], S)
            T.copy(S, B[0, bx * bn])
    return k


def gemm_kernel(M, N, K, bm, bn, bk, stages, repeat=1):
    import tileagent.language as T

    @T.prim_func
    def k(A: T.Tensor((repeat, M, K), "float16"), B: T.Tensor((repeat, K, N), "float16"),
          C: T.Tensor((repeat, M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            As = T.alloc_shared((bm, bk), "float16")
            Bs = T.alloc_shared((bk, bn), "float16")
            acc = T.alloc_fragment((bm, bn), "float32")
            for r in T.serial(repeat):
                T.clear(acc)
                for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                    T.copy(A[r, by * bm, ko * bk], As)
                    T.copy(B[r, ko * bk, bx * bn], Bs)
                    T.gemm(As, Bs, acc)
                T.copy(acc, C[r, by * bm, bx * bn])
    return k


RAW_SRC = r"""
struct __align__(64) tl_tensor_map { unsigned long long v[16]; };
extern "C" __global__ void __launch_bounds__(128) raw_tma(const __grid_constant__ tl_tensor_map map,
                                                          unsigned short* out, int rows, int cols) {
  extern __shared__ __align__(1024) unsigned char raw[];
  unsigned char* smem = raw + ((0u - (unsigned)__cvta_generic_to_shared(raw)) & 1023u);
  unsigned long long* bar = reinterpret_cast<unsigned long long*>(smem + 8192);
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem), b = (unsigned)__cvta_generic_to_shared(bar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 8192;" :: "r"(b) : "memory");
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%3, %4}], [%2];" :: "r"(s), "l"(&map), "r"(b), "r"(0), "r"(0) : "memory");
  }
  unsigned done = 0;
  while (!done) {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(b) : "memory");
  }
  const unsigned short* tile = reinterpret_cast<const unsigned short*>(smem);
  for (int i = threadIdx.x; i < 64 * 64; i += 128) out[i] = tile[i];  // as placed: row-major without a swizzle
}
"""


def raw_case() -> int:
    """Our runtime's tensor-map encoding and argument passing with a hand-written TMA kernel (no compiler): a 64 x 64
    fp16 box without swizzle must land row-major. Separates the runtime from the generated code."""
    import ctypes

    import torch

    from tileagent.compiler.dtypes import DType
    from tileagent.compiler.runtime.launch import _check, _driver
    from tileagent.compiler.runtime.nvrtc import compile_to_cubin
    from tileagent.compiler.runtime.tma import encode

    a = torch.randn(100, 64, dtype=torch.float16, device="cuda")
    out = torch.zeros(64 * 64, dtype=torch.float16, device="cuda")
    raw = encode(DType("float16"), a.data_ptr(), (64, 100), (128,), (64, 64), 0)
    drv = _driver()
    err, mod = drv.cuModuleLoadData(compile_to_cubin(RAW_SRC, "sm_90a"))
    _check(drv, err, "cuModuleLoadData")
    err, f = drv.cuModuleGetFunction(mod, b"raw_tma")
    _check(drv, err, "cuModuleGetFunction")
    cfg = drv.CUlaunchConfig()
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = 128, 1, 1
    cfg.sharedMemBytes = 8192 + 16 + 1024
    cfg.hStream = drv.CUstream(torch.cuda.current_stream().cuda_stream)
    cfg.numAttrs = 0
    args = [(ctypes.c_uint64 * 16).from_buffer_copy(raw), ctypes.c_void_p(out.data_ptr()), ctypes.c_int(100),
            ctypes.c_int(64)]
    ptrs = (ctypes.c_void_p * len(args))(*[ctypes.addressof(x) for x in args])
    (err,) = drv.cuLaunchKernelEx(cfg, f, ctypes.addressof(ptrs), 0)
    _check(drv, err, "cuLaunchKernelEx")
    torch.cuda.synchronize()
    why = _compare(out.view(64, 64), a[:64])
    print("ok" if why is None else f"WRONG: {why}")
    return 0 if why is None else 1


def _tma_lines(kernel) -> list[str]:
    return [ln.strip() for ln in kernel.get_ir("thread").splitlines() if ln.strip().startswith("# T.copy")]


def _compare(got, want) -> str | None:
    bad = (got != want)
    if got.dim() > 2:
        bad = bad.reshape(-1, got.shape[-1])
    if not bool(bad.any()):
        return None
    r, c = (int(x) for x in bad.nonzero()[0])
    rows = sorted({int(x) % 8 for x in bad.nonzero()[:, 0].tolist()})
    chunks = sorted({int(x) * got.element_size() // 16 % 8 for x in bad.nonzero()[:, 1].tolist()})
    return (f"{int(bad.sum())} of {bad.numel()} elements wrong, first at (row {r}, col {c}); wrong rows mod 8: "
            f"{rows}, wrong 16-byte chunks mod 8: {chunks} (a swizzle or column-block error shows as a pattern)")


def run_case(name: str, device: str) -> int:
    import torch

    import tileagent

    os.environ["TILEAGENT_ENABLE_TMA"] = "1"
    if name == "raw":
        return raw_case() if device == "cuda" else 0
    target = "cuda" if device == "cuda" else "sim"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    torch.manual_seed(0)
    if name in COPY_CASES or name in ("copy3d", "fallback"):
        if name in COPY_CASES:
            M, N, bm, bn, dtype, layout, _ = COPY_CASES[name]
            kernel = tileagent.compile(copy_kernel(M, N, bm, bn, dtype, layout), target=target)
            a = torch.randn(M, N).to(getattr(torch, dtype)).to(device)
        elif name == "copy3d":
            kernel = tileagent.compile(copy3d_kernel(3, 100, 64, 64, 64, "float16"), target=target)
            a = torch.randn(3, 100, 64).half().to(device)
        else:
            import logging

            logging.basicConfig(level=logging.WARNING)
            kernel = tileagent.compile(dynamic_kernel(64, "float16"), target=target)
            a = torch.randn(64, 100).half().to(device)
        lines = _tma_lines(kernel)
        print("   ", lines[0])
        if "TMA" not in lines[0]:
            print("NOT-TMA")
            return 3
        b = torch.zeros_like(a)
        kernel(a, b)
        sync()
        why = _compare(b, a)
        if why is None and name == "fallback":  # and a suitable call keeps TMA
            a2 = torch.randn(64, 128).half().to(device)
            b2 = torch.zeros_like(a2)
            kernel(a2, b2)
            sync()
            why = _compare(b2, a2)
        print("ok" if why is None else f"WRONG: {why}")
        return 0 if why is None else 1
    if name in GEMM_CASES or name == "gemm_nested":
        M, N, K, bm, bn, bk, stages, wgmma, _ = GEMM_CASES.get(name, (128, 128, 384, 128, 128, 64, 2, False, ""))
        repeat = 2 if name == "gemm_nested" else 1
        os.environ["TILEAGENT_ENABLE_WGMMA"] = "1" if wgmma else "0"  # 0: mma.sync (wgmma is sm_90a's default)
        kernel = tileagent.compile(gemm_kernel(M, N, K, bm, bn, bk, stages, repeat), target=target)
        lines = _tma_lines(kernel)
        print("   ", lines[0], "|", lines[1])
        gemm_line = [ln for ln in kernel.get_ir("thread").splitlines() if "# T.gemm" in ln]
        print("   ", gemm_line[0].strip())
        if not all("TMA" in ln and "stages" in ln for ln in lines[:2]) or \
                ("wgmma" in gemm_line[0]) != wgmma:
            print("NOT-TMA")
            return 3
        a = torch.randint(-2, 3, (repeat, M, K)).half().to(device)
        b = torch.randint(-2, 3, (repeat, K, N)).half().to(device)
        c = torch.full((repeat, M, N), float("nan"), device=device)
        kernel(a, b, c)
        sync()
        want = (a.double() @ b.double()).float()
        why = _compare(c, want)
        print("ok" if why is None else f"WRONG: {why}")
        return 0 if why is None else 1
    print(f"unknown case {name}")
    return 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", help="run one case in this process")
    ap.add_argument("--sim", action="store_true", help="the SIMT emulator instead of the GPU")
    ap.add_argument("--timeout", type=float, default=60.0)
    a = ap.parse_args(argv)
    device = "cpu" if a.sim else "cuda"
    if a.case:
        return run_case(a.case, device)
    # the copies were exact on the H200 (11 of 11 at bc91a8c, BENCHMARKS.md): three of them as a sanity check first,
    # then what that run did not reach (the pipelined gemms, the fallback), then the other copies
    sanity = ["none", "swz128", "blocks128"]
    names = ["raw"] + sanity + list(GEMM_CASES) + ["gemm_nested", "fallback", "copy3d"] + \
        [n for n in COPY_CASES if n not in sanity]
    failed = 0
    for name in names:
        what = COPY_CASES.get(name, GEMM_CASES.get(name, (None,)))[-1] if name not in SPECIAL else SPECIAL[name]
        print(f"{name}: {what}", flush=True)
        cmd = [sys.executable, __file__, "--case", name] + (["--sim"] if a.sim else [])
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout * (20 if a.sim else 1))
        except subprocess.TimeoutExpired:
            print("  TIMEOUT (a hang: an mbarrier wait that never completes?)", flush=True)
            failed += 1
            continue
        out = p.stdout.rstrip().splitlines()
        for ln in out:
            print("  " + ln)
        if p.returncode != 0:
            failed += 1
            if p.returncode not in (1, 3):
                tail = "\n    ".join(p.stderr.strip().splitlines()[-6:])
                print(f"  FAULT (exit {p.returncode}):\n    {tail}", flush=True)
        elif "fallback" == name and "TMA not used" not in p.stderr:
            print("  WRONG: no log line about the variant without TMA")
            failed += 1
    print(f"{len(names) - failed} of {len(names)} cases ok")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
