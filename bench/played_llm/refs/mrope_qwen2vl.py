"""Qwen2-VL multimodal rotary embedding (M-RoPE; vLLM's MRotaryEmbedding.forward_native on the query, neox style):
    q (T, Hq, D) bf16, D = 128 (rotary over the whole head);  positions (3, T) int64: the temporal, height and width
    position of each token (all three equal for text tokens), in [0, P);  cos_cache, sin_cache (P, D/2) float32
    mrope_section = [16, 24, 24] (sums to D/2): rotary frequency j in [0, 16) takes the temporal position,
    j in [16, 40) the height position, j in [40, 64) the width position:
        sec(j) = 0 if j < 16 else (1 if j < 40 else 2)
        cos[t, j] = cos_cache[positions[sec(j), t], j],   sin likewise
    neox rotation (halves, not interleaved pairs), math in float32:
        x1 = q[t, h, :D/2], x2 = q[t, h, D/2:]
        out[t, h, :D/2] = x1 * cos[t] - x2 * sin[t];   out[t, h, D/2:] = x2 * cos[t] + x1 * sin[t]
output (T, Hq, D) bf16. Configs (T, Hq, P): Qwen2.5-VL-3B (16 heads) on 256 and 4096 tokens, Qwen2-VL-7B (28 heads)
on 4096 tokens, position caches of P = 8192. T and P are free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"T": 256, "Hq": 16, "P": 8192},
    {"T": 4096, "Hq": 16, "P": 8192},
    {"T": 4096, "Hq": 28, "P": 8192},
]
SMALL_CONFIG = {"T": 27, "Hq": 4, "P": 96}
FREE_DIMS = ["T", "P"]
D = 128


def BYTES(T, Hq, P):
    return 2 * T * Hq * D * 2 + 3 * T * 8 + 2 * T * (D // 2) * 4


class Model(nn.Module):
    def __init__(self, mrope_section=(16, 24, 24)):
        super().__init__()
        self.mrope_section = list(mrope_section)

    def forward(self, q, positions, cos_cache, sin_cache):
        cos = cos_cache[positions]                       # (3, T, D/2)
        sin = sin_cache[positions]
        cos = torch.cat([c[i] for i, c in enumerate(cos.split(self.mrope_section, dim=-1))], dim=-1)  # (T, D/2)
        sin = torch.cat([s[i] for i, s in enumerate(sin.split(self.mrope_section, dim=-1))], dim=-1)
        cos = cos.unsqueeze(1)                           # (T, 1, D/2)
        sin = sin.unsqueeze(1)
        qf = q.float()
        half = qf.shape[-1] // 2
        x1, x2 = qf[..., :half], qf[..., half:]
        out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        return out.to(q.dtype)


def get_inputs(T=256, Hq=16, P=8192):
    inv = 1.0 / (1000000.0 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))   # Qwen2-VL rope_theta 1e6
    freqs = torch.arange(P, dtype=torch.float32)[:, None] * inv[None, :]          # (P, D/2)
    # a text prefix (t = h = w), then an image grid (t fixed, h and w over a 2-D grid), then text again
    positions = torch.randint(0, P, (3, T), dtype=torch.int64)
    n_img = T // 2
    side = max(1, int(n_img ** 0.5))
    base = min(T // 4, P - side - 1)
    idx = torch.arange(n_img)
    positions[0, T // 4:T // 4 + n_img] = base
    positions[1, T // 4:T // 4 + n_img] = (base + idx // side).clamp(max=P - 1)
    positions[2, T // 4:T // 4 + n_img] = (base + idx % side).clamp(max=P - 1)
    return [torch.randn(T, Hq, D, dtype=torch.bfloat16), positions, freqs.cos(), freqs.sin()]


def get_init_inputs(T=256, Hq=16, P=8192):
    return []
