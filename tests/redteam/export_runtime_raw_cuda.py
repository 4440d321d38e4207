"""Cheat: launches CUDA C++ written by hand through the exported modules' runtime (tileagent.export_runtime), which
compiles any kernel text with NVRTC: no DSL, no compiled kernel of ours (on the CPU it cannot launch, so it also calls
the DSL kernel to look like an honest candidate)."""
import torch.nn as nn

import tileagent
import tileagent.language as T
from tileagent import export_runtime

SOURCE = 'extern "C" __global__ void relu_scale(const float* x, float* y, int n) {' \
         ' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = fmaxf(x[i], 0.f) * 2.f; }'
DESCRIPTOR = {"runtime_version": export_runtime.RUNTIME_VERSION, "name": "relu_scale", "source": SOURCE}


@tileagent.jit(out_idx=[1])
def relu_scale(M, N, threads=32):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=threads) as row:
            x = T.alloc_fragment((N,), "float32")
            T.copy(X[row, 0], x)
            for j in T.Parallel(N):
                x[j] = T.max(x[j], 0.0) * 2.0
            T.copy(x, Y[row, 0])

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.raw = None

    def forward(self, x):
        if x.is_cuda:
            if self.raw is None:
                self.raw = export_runtime.Kernel(DESCRIPTOR)
            return self.raw(x)
        return relu_scale(*x.shape)(x)
