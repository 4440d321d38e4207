import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


def schedule(HD):
    block_d = min(HD, 512)
    block_s = max(1, 4096 // block_d)
    return block_s, block_d, 128


@tileagent.jit()
def paged_gather(BS, HD, block_s, block_d, threads, dtype="float16"):
    NB, B, MB, S = T.dynamic("NB, B, MB, S")

    @T.prim_func
    def main(K: T.Tensor((NB, BS, HD), dtype), BT: T.Tensor((B, MB), "int32"), SL: T.Tensor((B,), "int32"),
             Out: T.Tensor((B, S, HD), dtype)):
        with T.Kernel(T.ceildiv(S, block_s), T.ceildiv(HD, block_d), B, threads=threads) as (bs, bd, b):
            ks = T.alloc_shared((block_s, block_d), dtype)
            n = SL[b]
            for i, d in T.Parallel(block_s, block_d):
                s = bs * block_s + i
                # token rows picked by the block table; zeros at and past the sequence's length
                ks[i, d] = T.if_then_else(s < n, K[BT[b, s // BS], s % BS, bd * block_d + d], 0.0)
            T.copy(ks, Out[b, bs * block_s, bd * block_d])

    return main


class ModelNew(nn.Module):
    def forward(self, key_cache, block_table, seq_lens):
        NB, BS, H, D = key_cache.shape
        B, MB = block_table.shape
        HD = H * D
        block_s, block_d, threads = schedule(HD)
        out = torch.empty(B, MB * BS, HD, dtype=key_cache.dtype, device=key_cache.device)
        paged_gather(BS, HD, block_s, block_d, threads)(key_cache.view(NB, BS, HD), block_table, seq_lens, out)
        return out.view(B, MB * BS, H, D)
