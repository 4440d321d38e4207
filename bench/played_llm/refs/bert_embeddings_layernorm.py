"""BERT / RoBERTa input embeddings (transformers' BertEmbeddings.forward, eval mode, absolute positions):
    input_ids (B, S) int64 in [0, V), token_type_ids (B, S) int64 in {0, 1} (segment A, then segment B)
    e = word[input_ids] + pos[arange(S)] + tok_type[token_type_ids]           (B, S, H)
    out = LayerNorm(e) = (e - mean) / sqrt(var + 1e-12) * ln_weight + ln_bias   (biased variance over H)
The tables word (V, H), pos (512, H), tok_type (2, H) and the LayerNorm weight and bias (H,) are bf16 parameters, as a
bf16 serving stack (text-embeddings-inference, vLLM's BERT embedding models) loads them; the three rows are summed
in float32 and the LayerNorm is computed in float32 (a fused embedding kernel's arithmetic), output (B, S, H) bf16,
rounded once. eps = 1e-12 as BERT's config. Positions are 0..S-1 (BERT; RoBERTa's offset of padding_idx + 1 is not
modelled: its configs here stand for its table sizes).
Configs (B, S, V, H): bert-base (30522 x 768) at one 512-token sequence and a batch of 32, roberta-large
(50265 x 1024) at a batch of 32. B and S (S <= 512) are free.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_POS = 512
EPS = 1e-12

CONFIGS = [
    {"B": 1, "S": 512, "V": 30522, "H": 768},
    {"B": 32, "S": 512, "V": 30522, "H": 768},
    {"B": 32, "S": 512, "V": 50265, "H": 1024},
]
SMALL_CONFIG = {"V": 1000, "B": 2, "S": 37, "H": 256}
FREE_DIMS = ["B", "S"]


def BYTES(B, S, V, H):
    return 2 * B * S * 8 + B * S * H * 2 + S * H * 2 + 2 * H * 2 + 2 * H * 2 + B * S * H * 2


class Model(nn.Module):
    def __init__(self, V=30522, H=768):
        super().__init__()
        self.word = nn.Parameter(torch.randn(V, H).to(torch.bfloat16))
        self.pos = nn.Parameter(torch.randn(MAX_POS, H).to(torch.bfloat16))
        self.tok_type = nn.Parameter(torch.randn(2, H).to(torch.bfloat16))
        self.ln_weight = nn.Parameter((1.0 + 0.2 * torch.randn(H)).to(torch.bfloat16))
        self.ln_bias = nn.Parameter((0.2 * torch.randn(H)).to(torch.bfloat16))

    def forward(self, input_ids, token_type_ids):
        S = input_ids.shape[1]
        pos_ids = torch.arange(S, device=input_ids.device)
        e = self.word[input_ids].float() + self.tok_type[token_type_ids].float()
        e = e + self.pos[pos_ids].float()[None, :, :]
        y = F.layer_norm(e, (e.shape[-1],), self.ln_weight.float(), self.ln_bias.float(), EPS)
        return y.to(torch.bfloat16)


def get_inputs(B=1, S=512, V=30522, H=768):
    ids = torch.randint(0, V, (B, S), dtype=torch.int64)
    split = torch.randint(1, S + 1, (B, 1))                    # segment B starts at split (none when split == S)
    tt = (torch.arange(S)[None, :] >= split).to(torch.int64)
    return [ids, tt]


def get_init_inputs(B=1, S=512, V=30522, H=768):
    return [V, H]
