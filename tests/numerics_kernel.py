"""A kernel applying the conversions and math whose results must agree between the CPU interpreter and the GPU
(tests/test_numerics.py): float -> int casts, float -> fp16 casts, division, exp2, floor, and the round-half-to-even
recipe that prompts/system.md gives the model."""
import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[2, 3, 4, 5, 6, 7, 8])
def numerics(N, block=64):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"), trunc: T.Tensor((N,), "int32"),
             half: T.Tensor((N,), "float16"), quot: T.Tensor((N,), "float32"), ex2: T.Tensor((N,), "float32"),
             flo: T.Tensor((N,), "float32"), rne: T.Tensor((N,), "int32"), fmod: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=block) as b:
            for i in T.Parallel(block):
                v = X[b * block + i]
                trunc[b * block + i] = T.cast(v, "int32")
                half[b * block + i] = T.cast(v, "float16")
                quot[b * block + i] = v / Y[b * block + i]
                ex2[b * block + i] = T.exp2(v)
                f = T.floor(v)
                flo[b * block + i] = f
                d = v - f
                r = T.if_then_else(d > 0.5, f + 1.0, T.if_then_else(d < 0.5, f, f + (f - 2.0 * T.floor(f * 0.5))))
                rne[b * block + i] = T.cast(r, "int32")
                fmod[b * block + i] = T.floormod(v, 3.0)

    return main
