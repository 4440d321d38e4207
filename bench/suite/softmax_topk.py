"""MoE router: softmax over experts, then top-k (values and indices), fp32."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'M': 8192, 'E': 64, 'K': 8}, {'M': 8192, 'E': 256, 'K': 8}, {'M': 16384, 'E': 128, 'K': 2}]
SMALL_CONFIG = {'M': 7, 'E': 16, 'K': 2}
# torch.topk does not define which of equal values it returns first (the CPU returns tied zeros as 44, 41, 42, 43,
# ...; CUDA sorts its selection with a bitonic sort): the evaluator accepts indices of equal values in another order
# (correctness.compare_indices), but not other elements, and which of several elements tied at the k-th value are
# selected is not defined either (the CPU picks any). So the indices are checked on inputs with few ties: 'ties' has
# equal logits, and 'outliers', 'row_scales' and 'extremes' make most probabilities underflow to exactly 0; under
# normal_x0.01 the probabilities are so close that float32 rounding alone reorders them (2 of 8192 rows at E=64 pick
# other indices than in float64). 'offset' (N(0, 1) + 64) and 'offset_x1000' do have equal logits now and then
# (float32's spacing there is 2^-17 and 2^-14): about 1 and 5 rows of 8192 at E=64, K=8.
DISTRIBUTIONS = ["normal", "uniform", "normal_x3", "negative", "offset", "offset_x1000"]


class Model(nn.Module):
    def __init__(self, K):
        super().__init__()
        self.k = K

    def forward(self, logits):
        probs = torch.softmax(logits, dim=-1)
        return torch.topk(probs, self.k, dim=-1)

def get_inputs(M=8192, E=64, K=8):
    return [torch.randn(M, E)]


def get_init_inputs(M=8192, E=64, K=8):
    return [K]
