"""Probe: clusters for the example GEMM (issue 12), by rewriting its CUDA, before the compiler makes them.

Usage (CUDA machine): TILEAGENT_SHARED=/path/to/shared python bench/cluster_probe.py [--sizes 4096 8192]
    [--stages 3] [--dims 2,1,1 4,1,1 ...] [--multicast]
The example GEMM (`../shared/examples/gemm_relu.py`, its own 128 x 128 x 64 tiles; ``--stages`` rewrites its
num_stages) is built with its CUDA rewritten through the runtime's post-processing hook (``set_cuda_postproc``):
single blocks (the compiler's own pairs removed), and clusters of each ``--dims`` shape that share nothing
(``__cluster_dims__`` alone). ``--multicast`` adds two pairs along blockIdx.x that share the A tile: the two CTAs
compute tiles of the same rows (the example's ``T.use_swizzle(panel_size=4)`` keeps pairs in one panel row: checked
here for the grid), so CTA (k mod 2) loads stage k's A tile for both with
``cp.async.bulk.tensor...multicast::cluster`` (mask 0b11), or each CTA multicasts its 64-row half (the tensor map's
box cut to 64 rows); each keeps loading its own B tile. A stage is free for a producer only when the consumers of
both CTAs released it (the empty barriers count 8 arrivals: each consumer warp arrives on its own CTA's barrier and,
through ``mapa``, on its peer's); the CTAs meet at a cluster barrier after the mbarrier init and before exit. L2 -> SM
traffic per stage drops from 32 KB to 24 KB per CTA.

Hand-rewrites for a measurement, not compiler features: every variant is checked against fp32 ``relu(a @ b)``
before it is timed; two rounds of TFLOP/s with cuBLAS and relu(a@b) in each.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.memory_bound import bench  # noqa: E402
from bench.memory_bound import load as load_from  # noqa: E402
from bench.tensor_core import SHARED  # noqa: E402

HELPERS = r"""
__device__ __forceinline__ unsigned tl_cluster_rank() {
  unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r;
}
__device__ __forceinline__ void tl_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void tl_mbar_arrive_peer(unsigned bar, unsigned peer) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(peer));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" :: "r"(remote) : "memory");
}
__device__ __forceinline__ void tl_tma_load_2d_mc(unsigned dst, const tl_tensor_map* map, unsigned bar, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
               "[%0], [%1, {%3, %4}], [%2], %5;"
               :: "r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1), "h"((unsigned short)3) : "memory");
}
"""


def sub1(pattern: str, repl, text: str) -> str:
    out, n = re.subn(pattern, repl, text, count=1, flags=re.S)
    if n != 1:
        raise RuntimeError(f"cluster rewrite: pattern not found: {pattern[:80]}")
    return out


def cluster_only(src: str, target=None, dims=(2, 1, 1)) -> str:
    """The kernel launched as clusters of ``dims`` that share nothing (what the cluster launch alone costs)."""
    src = re.sub(r"__cluster_dims__\([^)]*\) ", "", src)  # the compiler's own pairs, where it makes them
    if dims != (1, 1, 1):
        src = sub1(r'(extern "C" __global__ void )', r'\1__cluster_dims__({}, {}, {}) '.format(*dims), src)
    return sub1(r'(extern "C" __global__)', lambda m: HELPERS + "\n" + m.group(1), src)


def clusterize(src: str, target=None) -> str:
    """The example GEMM's warp-specialized TMA kernel as a 2-CTA cluster multicasting A (see the module)."""
    src = cluster_only(src)
    # empty barriers: 4 consumer warps of each CTA of the pair
    src = sub1(r'(for \(int tl_b = \d+; tl_b < \d+; \+\+tl_b\) tl_mbar_init\([^;]*?), 4u\);', r'\1, 8u);', src)
    src = sub1(r'(fence\.mbarrier_init\.release\.cluster;" ::: "memory"\);\n  \}\n)  __syncthreads\(\);',
               r'\1  tl_cluster_sync();\n  const unsigned tl_rank = tl_cluster_rank();', src)
    # A: CTA (k & 1) loads it for both
    src = sub1(r'tl_tma_load_2d\((\(unsigned\)__cvta_generic_to_shared\(&A_shared[^;]*?), &tmap_A_0, ([^;]*?)\);',
               r'if ((unsigned)(ko_p2 & 1) == tl_rank) tl_tma_load_2d_mc(\1, &tmap_A_0, \2);', src)
    # release on both CTAs
    src = sub1(r'if \(lane == 0\) tl_mbar_arrive\(([^;]*?)\);',
               r'if (lane == 0) { tl_mbar_arrive(\1); tl_mbar_arrive_peer(\1, tl_rank ^ 1u); }', src)
    src = src.rstrip()
    assert src.endswith("}")
    return src[:-1] + "  tl_cluster_sync();\n}\n"


def clusterize_halves(src: str, target=None) -> str:
    """As ``clusterize``, but every stage each CTA multicasts its half of the A tile (rows 64 r .. 64 r + 63; the
    tensor map's box is cut to 64 rows by ``halve_box``), as CUTLASS splits a multicast tile across the cluster."""
    src = clusterize(src)
    line = re.search(r"if \(\(unsigned\)\(ko_p2 & 1\) == tl_rank\) (tl_tma_load_2d_mc\(.*?&A_shared.*?\);)\n", src)
    m = re.fullmatch(r"tl_tma_load_2d_mc\((.*), &tmap_A_0, (.*), \(int\)\((.*)\), \(int\)\((.*)\)\);", line.group(1))
    dst, bar, c0, c1 = m.groups()
    return src.replace(line.group(0), f"tl_tma_load_2d_mc({dst} + tl_rank * 8192u, &tmap_A_0, {bar}, (int)({c0}), "
                                      f"(int)({c1}) + 64 * (int)tl_rank);\n")


def halve_box(kernel) -> None:
    """Cut the A tensor map's box (innermost first: 64 columns x 128 rows) to 64 rows."""
    import dataclasses

    dk = kernel.backend.module.kernels[0]
    maps = list(dk.tensor_maps)
    assert maps[0].name.startswith("tmap_A") and tuple(maps[0].box) == (64, 128), maps[0]
    maps[0] = dataclasses.replace(maps[0], box=(64, 64))
    object.__setattr__(dk, "tensor_maps", type(dk.tensor_maps)(maps))


def pairs_share_rows(gx: int, gy: int, panel: int = 4) -> bool:
    """Whether blocks (2k, 2k+1) of the example's column-order swizzle get the same ``by`` (the A tile's rows)."""
    def by(lin):
        width = min(panel, gx - lin // (panel * gy) * panel)
        return (lin % (panel * gy)) // width
    return gx % 2 == 0 and all(by(lin) == by(lin + 1) for lin in range(0, gx * gy, 2))


def main() -> None:
    from tileagent.compiler.runtime.hooks import set_cuda_postproc

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[4096, 8192])
    ap.add_argument("--dump", default=None, help="write the rewritten source here")
    ap.add_argument("--stages", type=int, default=3, help="the example's num_stages (3 as written)")
    ap.add_argument("--dims", nargs="*", default=["2,1,1"], help="cluster shapes to try, nothing shared")
    ap.add_argument("--multicast", action="store_true", help="also the two A-multicast variants")
    args = ap.parse_args()
    args.dims = [tuple(int(x) for x in d.split(",")) for d in args.dims]
    text = (SHARED / "gemm_relu.py").read_text()
    assert "num_stages=3" in text
    tmp = Path(tempfile.mkdtemp())
    (tmp / "gemm_relu.py").write_text(text.replace("num_stages=3", f"num_stages={args.stages}"))
    gemm = load_from("gemm_relu", tmp)
    rows = []
    for n in args.sizes:
        assert pairs_share_rows(n // 128, n // 128), n
        torch.manual_seed(0)
        a = torch.randn(n, n, device="cuda", dtype=torch.float16)
        b = torch.randn(n, n, device="cuda", dtype=torch.float16)
        ref = torch.relu((a.float() @ b.float())).half()
        kernels = {}
        variants = [("single blocks", partial(cluster_only, dims=(1, 1, 1)))]
        variants += [(f"cluster {d}, nothing shared", partial(cluster_only, dims=d)) for d in args.dims]
        if args.multicast:
            variants += [("cluster 2 + A multicast", clusterize), ("cluster 2 + A multicast halves", clusterize_halves)]
        for name, post in variants:
            gemm.matmul._cache.clear()
            set_cuda_postproc(post)
            try:
                k = gemm.matmul(n, n, n, block_M=128, block_N=128, block_K=64)
            finally:
                set_cuda_postproc(None)
            if post is clusterize_halves:
                halve_box(k)
            if post is clusterize and args.dump:
                Path(args.dump).write_text(k.get_kernel_source())
            c = torch.full((n, n), float("nan"), device="cuda", dtype=torch.float16)
            k(a, b, c)
            torch.cuda.synchronize()
            err = (c.float() - ref.float()).abs().max().item()
            print(f"{n}^3 {name}: max |err| {err:.3g}", flush=True)
            if not err < 0.5 + 1e-2 * ref.float().abs().max().item():
                raise SystemExit(f"{name} wrong at {n}")
            kernels[name] = (k, c)
        flops = 2 * n ** 3
        for rep in range(2):
            for name, (k, c) in kernels.items():
                t = bench(lambda: k(a, b, c), trials=20)[0]
                rows.append((n, rep, name, flops / t / 1e9))
            rows.append((n, rep, "cuBLAS", flops / bench(lambda: torch.matmul(a, b), trials=20)[0] / 1e9))
            rows.append((n, rep, "relu(a@b)", flops / bench(lambda: torch.relu(a @ b), trials=20)[0] / 1e9))
    print("| size | round | kernel | TFLOP/s |\n|---|---|---|---|")
    for n, rep, name, tf in rows:
        print(f"| {n}^3 | {rep} | {name}, {args.stages} stages | {tf:.1f} |")


if __name__ == "__main__":
    main()
