"""Multi-head latent attention, decode step (DeepSeek MLA): one query token per sequence, 128 heads sharing one
latent KV head. q (B, H, 512), q_pe (B, H, 64), kv (B, S, 1, 512), k_pe (B, S, 1, 64), fp16 -> o (B, H, 512).

scores = (q . kv + q_pe . k_pe) / sqrt(576); o = softmax(scores) @ kv, softmax in fp32.
"""
import torch
import torch.nn as nn

DIM, PE_DIM = 512, 64
CONFIGS = [{"B": b, "H": 128, "S": s} for b, s in ((64, 1024), (64, 4096), (128, 8192), (4, 32768))]
SMALL_CONFIG = {"B": 2, "H": 16, "S": 100}
FREE_DIMS = ["B", "S"]
TOLERANCES = {"float16": (1e-3, 1e-2)}  # outputs are averages, often well below 1e-2


def BYTES(B, H, S):
    return 2 * (B * S * (DIM + PE_DIM) + B * H * (DIM + PE_DIM) + B * H * DIM)


def FLOPS(B, H, S):
    return 2 * B * H * S * (DIM + PE_DIM + DIM)


class Model(nn.Module):
    def forward(self, q, q_pe, kv, k_pe):
        latent = kv[:, :, 0]
        s = torch.bmm(q, latent.transpose(1, 2)) + torch.bmm(q_pe, k_pe[:, :, 0].transpose(1, 2))
        p = torch.softmax(s.float() * (DIM + PE_DIM) ** -0.5, dim=-1).to(q.dtype)
        return torch.bmm(p, latent)


def get_inputs(B=64, H=128, S=4096):
    return [torch.randn(B, H, DIM, dtype=torch.float16), torch.randn(B, H, PE_DIM, dtype=torch.float16),
            torch.randn(B, S, 1, DIM, dtype=torch.float16), torch.randn(B, S, 1, PE_DIM, dtype=torch.float16)]


def get_init_inputs(B=64, H=128, S=4096):
    return []
