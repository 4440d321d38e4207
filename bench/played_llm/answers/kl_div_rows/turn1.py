import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

LOG2E = 1.4426950408889634
BLOCK_V = None
THREADS = None
TUNABLES = {"BLOCK_V": [None, 2048, 8192], "THREADS": [None, 128, 512]}

_DT = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def schedule(V):
    block_v = 4096 if V >= 4096 else 1024
    return block_v, 256


@tileagent.jit(out_idx=[3])
def kl_rows(V, inv_t, tt, block_v, threads, dtype="bfloat16"):
    M = T.dynamic("M")
    block_m = 1
    block_r = 1024

    @T.prim_func
    def main(S: T.Tensor((M, V), dtype), Tc: T.Tensor((M, V), dtype), Rows: T.Tensor((M,), "float32"),
             Y: T.Tensor((1,), "float32")):
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bm:
            s = T.alloc_fragment((block_m, block_v), "float32")
            t = T.alloc_fragment((block_m, block_v), "float32")
            d = T.alloc_fragment((block_m, block_v), "float32")
            ms = T.alloc_fragment((block_m,), "float32")
            ms_old = T.alloc_fragment((block_m,), "float32")
            mt = T.alloc_fragment((block_m,), "float32")
            mt_old = T.alloc_fragment((block_m,), "float32")
            ls = T.alloc_fragment((block_m,), "float32")
            lt = T.alloc_fragment((block_m,), "float32")
            a = T.alloc_fragment((block_m,), "float32")
            ls_tile = T.alloc_fragment((block_m,), "float32")
            lt_tile = T.alloc_fragment((block_m,), "float32")
            a_tile = T.alloc_fragment((block_m,), "float32")
            T.fill(ms, -T.infinity("float32"))
            T.fill(mt, -T.infinity("float32"))
            T.clear(ls)
            T.clear(lt)
            T.clear(a)
            for k in T.serial(T.ceildiv(V, block_v)):
                T.copy(S[bm * block_m, k * block_v], s)
                T.copy(Tc[bm * block_m, k * block_v], t)
                for i, j in T.Parallel(block_m, block_v):
                    valid = k * block_v + j < V
                    sv = s[i, j] * inv_t
                    tv = t[i, j] * inv_t
                    d[i, j] = T.if_then_else(valid, tv - sv, 0.0)
                    s[i, j] = T.if_then_else(valid, sv, -T.infinity("float32"))
                    t[i, j] = T.if_then_else(valid, tv, -T.infinity("float32"))
                T.copy(ms, ms_old)
                T.copy(mt, mt_old)
                T.reduce_max(s, ms, dim=1, clear=False)
                T.reduce_max(t, mt, dim=1, clear=False)
                for i, j in T.Parallel(block_m, block_v):
                    s[i, j] = T.exp(s[i, j] - ms[i])
                    t[i, j] = T.exp(t[i, j] - mt[i])
                    d[i, j] = t[i, j] * d[i, j]
                T.reduce_sum(s, ls_tile, dim=1)
                T.reduce_sum(t, lt_tile, dim=1)
                T.reduce_sum(d, a_tile, dim=1)
                for i in T.Parallel(block_m):
                    alpha_s = T.exp(ms_old[i] - ms[i])
                    alpha_t = T.exp(mt_old[i] - mt[i])
                    ls[i] = ls[i] * alpha_s + ls_tile[i]
                    lt[i] = lt[i] * alpha_t + lt_tile[i]
                    a[i] = a[i] * alpha_t + a_tile[i]
            for i in T.Parallel(block_m):
                a[i] = a[i] / lt[i] - (mt[i] - ms[i]) - T.log(lt[i]) + T.log(ls[i])
            T.copy(a, Rows[bm * block_m])                 # rows past M are not stored

        with T.Kernel(1, threads=256) as b0:
            acc = T.alloc_fragment((block_r,), "float32")
            x = T.alloc_fragment((block_r,), "float32")
            tot = T.alloc_fragment((1,), "float32")
            T.clear(acc)
            for r in T.serial(T.ceildiv(M, block_r)):
                T.copy(Rows[r * block_r], x)              # past M reads 0
                for j in T.Parallel(block_r):
                    acc[j] += x[j]
            T.reduce_sum(acc, tot, dim=0)
            for i in T.Parallel(1):
                tot[i] = tot[i] / T.cast(M, "float32") * tt
            T.copy(tot, Y[0])

    return main


class ModelNew(nn.Module):
    def __init__(self, temperature=2.0):
        super().__init__()
        self.temperature = temperature

    def forward(self, student_logits, teacher_logits):
        M, V = student_logits.shape
        t = float(self.temperature)
        block_v, threads = schedule(V)
        rows = torch.empty((M,), dtype=torch.float32, device=student_logits.device)
        kern = kl_rows(V, 1.0 / t, t * t, BLOCK_V or block_v, THREADS or threads, _DT[student_logits.dtype])
        y = kern(student_logits, teacher_logits, rows)
        return y.view(())
