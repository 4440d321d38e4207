"""Mamba-1 selective scan (selective_scan_ref with delta_softplus, D skip and z gate) over a short sequence:
u, delta, z (B, Dm, L) bf16; Bm, Cm (B, N, L) bf16 (input-dependent B and C shared by all channels); A_log (Dm, N)
and Dskip (Dm,) fp32. With A = -exp(A_log) and dt = softplus(delta), per channel the N-state recurrence
h_t = exp(dt_t * A) * h_{t-1} + dt_t * Bm_t * u_t (h_{-1} = 0), y_t = sum_n Cm_t h_t + Dskip * u_t, then
y * silu(z); math in float32, output bf16 (B, Dm, L). Mamba-130m (Dm = 1536), Mamba-2.8B (5120) and Mamba-370m
(2048), N = 16. B, Dm and L are free.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"B": 8, "Dm": 1536, "L": 256, "N": 16},
    {"B": 2, "Dm": 5120, "L": 512, "N": 16},
    {"B": 1, "Dm": 2048, "L": 1024, "N": 16},
]
SMALL_CONFIG = {"B": 2, "Dm": 40, "L": 70, "N": 16}
FREE_DIMS = ["B", "Dm", "L"]
FIXED_INPUTS = [2, 5]   # A_log and Dskip (model parameters) as get_inputs draws them; see RESULTS.md, session 25


def BYTES(B, Dm, L, N):
    return 4 * B * Dm * L * 2 + 2 * B * N * L * 2 + Dm * N * 4 + Dm * 4


def FLOPS(B, Dm, L, N):
    return 7 * B * Dm * L * N


class Model(nn.Module):
    def forward(self, u, delta, A_log, Bm, Cm, Dskip, z):
        A = -torch.exp(A_log.float())                   # (Dm, N)
        dt = F.softplus(delta.float())                  # (B, Dm, L)
        uf, Bf, Cf = u.float(), Bm.float(), Cm.float()
        h = torch.zeros(u.shape[0], u.shape[1], A.shape[1], dtype=torch.float32, device=u.device)
        ys = []
        for t in range(u.shape[2]):
            dA = torch.exp(dt[:, :, t, None] * A)
            h = dA * h + dt[:, :, t, None] * Bf[:, None, :, t] * uf[:, :, t, None]
            ys.append((h * Cf[:, None, :, t]).sum(dim=-1))
        y = torch.stack(ys, dim=-1) + uf * Dskip[None, :, None]
        return (y * F.silu(z.float())).to(u.dtype)


def get_inputs(B=8, Dm=1536, L=256, N=16):
    A_log = torch.log(torch.arange(1, N + 1, dtype=torch.float32)).repeat(Dm, 1)
    return [torch.randn(B, Dm, L, dtype=torch.bfloat16), torch.randn(B, Dm, L, dtype=torch.bfloat16) - 2.0, A_log,
            torch.randn(B, N, L, dtype=torch.bfloat16), torch.randn(B, N, L, dtype=torch.bfloat16),
            torch.ones(Dm, dtype=torch.float32), torch.randn(B, Dm, L, dtype=torch.bfloat16)]


def get_init_inputs(B=8, Dm=1536, L=256, N=16):
    return []
