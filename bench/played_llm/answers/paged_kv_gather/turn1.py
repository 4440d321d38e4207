import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_D = None
THREADS = None
TUNABLES = {"BLOCK_D": [None, 256, 512, 1024], "THREADS": [None, 128, 256]}


def schedule(BS, HD):
    """A (BS, block_d) tile a block: about 8192 halves (16 KB) moved per block, 32 a thread on 256 threads."""
    block_d = HD
    while BS * block_d > 8192 and block_d > 64:
        block_d //= 2
    threads = 256 if BS * block_d >= 4096 else 128
    return block_d, threads


@tileagent.jit(out_idx=[3])
def paged_gather(BS, HD, block_d, threads, dtype="float16"):
    NB, B, MB = T.dynamic("NB, B, MB")

    @T.prim_func
    def main(K: T.Tensor((NB, BS, HD), dtype), BT: T.Tensor((B, MB), "int32"), SL: T.Tensor((B,), "int32"),
             Out: T.Tensor((B, MB, BS, HD), dtype)):
        with T.Kernel(B * MB, T.ceildiv(HD, block_d), threads=threads) as (bx, bd):
            x = T.alloc_fragment((BS, block_d), dtype)
            b = bx // MB
            m = bx % MB
            blk = BT[b, m]
            n_valid = SL[b] - m * BS
            if n_valid > 0:
                T.copy(K[blk, 0, bd * block_d], x)       # the cache block's BS token rows (a row gather)
                for i, j in T.Parallel(BS, block_d):
                    x[i, j] = T.if_then_else(i < n_valid, x[i, j], 0.0)
            else:
                T.clear(x)                                # a block wholly past the sequence's end: zeros
            T.copy(x, Out[b, m, 0, bd * block_d])

    return main


class ModelNew(nn.Module):
    def forward(self, key_cache, block_table, seq_lens):
        NB, BS, H, D = key_cache.shape
        B, MB = block_table.shape
        HD = H * D
        block_d, threads = schedule(BS, HD)
        out = paged_gather(BS, HD, BLOCK_D or block_d, THREADS or threads)(
            key_cache.view(NB, BS, HD), block_table, seq_lens)
        return out.view(B, MB * BS, H, D)
