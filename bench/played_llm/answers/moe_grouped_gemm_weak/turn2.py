import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_M = None
BLOCK_N = None
BLOCK_K = None
NUM_STAGES = None
TUNABLES = {
    "BLOCK_M": [None, 64, 128],
    "BLOCK_N": [None, 128, 256],
    "BLOCK_K": [None, 64, 32],
    "NUM_STAGES": [None, 3, 4],
}


def schedule(T_rows, E, N, K):
    avg = T_rows // max(E, 1)
    block_m = 128 if avg >= 256 else 64          # small groups waste less of a 64-row tile
    block_n = 128
    block_k = 64
    stages = 3
    return block_m, block_n, block_k, stages


@tileagent.jit(out_idx=[3])
def grouped_gemm(E, N, K, block_M=64, block_N=128, block_K=64, num_stages=3, threads=128, dtype="bfloat16"):
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, K), dtype), W: T.Tensor((E, N, K), dtype), Off: T.Tensor((E + 1,), "int32"),
             Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M) + E, threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_N, block_K), dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")
            tiles = T.alloc_var("int32", 0)
            eid = T.alloc_var("int32", 0)
            row0 = T.alloc_var("int32", 0)
            rend = T.alloc_var("int32", 0)

            T.use_swizzle(panel_size=8)
            # which expert's row tile is row-block `by`: expert e spans Off[e] .. Off[e + 1] for every e < E
            # (Off has E + 1 entries), ceildiv(rows, block_M) tiles each
            for e in T.serial(E):
                s = Off[e]
                t = Off[e + 1]
                nt = (t - s + block_M - 1) // block_M
                if by >= tiles and by < tiles + nt:
                    eid = e
                    row0 = s + (by - tiles) * block_M
                    rend = t
                tiles = tiles + nt

            if rend > row0:
                T.clear(acc)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                    T.copy(X[row0, k * block_K], A_s)
                    T.copy(W[eid, bx * block_N, k * block_K], B_s)
                    T.gemm(A_s, B_s, acc, transpose_B=True)
                if row0 + block_M <= rend:
                    T.copy(acc, Y[row0, bx * block_N])
                else:
                    # the expert's last, partial tile: the rows after rend are the next expert's
                    for i, j in T.Parallel(block_M, block_N):
                        if row0 + i < rend:
                            Y[row0 + i, bx * block_N + j] = T.cast(acc[i, j], dtype)

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, w, expert_offsets):
        T_rows, K = x.shape
        E, N, _ = w.shape
        bm, bn, bk, st = schedule(T_rows, E, N, K)
        bm = BLOCK_M or bm
        bn = BLOCK_N or bn
        bk = BLOCK_K or bk
        st = NUM_STAGES or st
        threads = 256 if bm * bn >= 128 * 256 else 128
        kernel = grouped_gemm(E, N, K, block_M=bm, block_N=bn, block_K=bk, num_stages=st, threads=threads)
        return kernel(x, w, expert_offsets)
