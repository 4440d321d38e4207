"""Softmax over the incoming edges of each node (GAT / GATv2 / graph-transformer attention; PyG's
torch_geometric.utils.softmax(src, index, num_nodes=V)): scores (E, H) float32, one row per edge and a column per
head; seg (E,) int64, the destination node of each edge, sorted ascending (CSR order: node v owns a contiguous run of
edges, possibly none); V = num_nodes (a constructor argument). Per node v and head h, over the edges e with seg[e] = v:
    m[v, h] = max_e scores[e, h];   out[e, h] = exp(scores[e, h] - m) / sum over v's edges of exp(scores[., h] - m)
output (E, H) float32 (each node's column sums to 1; a node with one edge gets exactly 1; an empty node gets nothing).
The reference works in float64 (the segment sums as differences of a prefix sum: deterministic, unlike an atomic
index_add on CUDA). Degrees are power-law-ish: 80% of the nodes (a random subset) receive edges, node of rank r
(a random order) with probability ~ r^(-2/3), so a few hub nodes hold thousands of edges (the largest about 2% of E
at V = 100k, 5% at 10k), the median node a handful to a dozen, some 1, and the other 20% of the nodes are empty
(seg may start above 0 and end below V - 1). E is fixed by the config (the shapes are Python numbers on the meta device).
Configs (E, V, H): a Reddit/ogbn-products-like sampled graph (1M edges, 100k nodes, 8 heads), a citation-like graph
(200k edges, 10k nodes, 4 heads), a 2-head large graph (4M edges, 200k nodes). E and V are free; H is the head count.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"E": 1000000, "V": 100000, "H": 8},
    {"E": 200000, "V": 10000, "H": 4},
    {"E": 4000000, "V": 200000, "H": 2},
]
SMALL_CONFIG = {"E": 300, "V": 40, "H": 4}
FREE_DIMS = ["E", "V"]


def BYTES(E, V, H):
    return 2 * E * H * 4 + E * 8


class Model(nn.Module):
    def __init__(self, V=100000):
        super().__init__()
        self.V = V

    def forward(self, scores, seg):
        E, H = scores.shape
        s = scores.double()
        idx = seg.long()
        m = torch.full((self.V, H), float("-inf"), dtype=torch.float64, device=s.device)
        m = m.scatter_reduce(0, idx[:, None].expand(E, H), s, reduce="amax", include_self=True)
        ex = torch.exp(s - m.index_select(0, idx))
        c = torch.cat([ex.new_zeros(1, H), ex.cumsum(dim=0)])          # c[k] = sum of ex[:k]
        start = torch.searchsorted(idx, idx, right=False)              # first edge of e's node
        end = torch.searchsorted(idx, idx, right=True)                 # one past its last edge
        denom = c.index_select(0, end) - c.index_select(0, start)
        return (ex / denom).to(scores.dtype)


def get_inputs(E=1000000, V=100000, H=8):
    active = max(1, (V * 4) // 5)
    nodes = torch.randperm(V)[:active]                                 # the nodes that receive edges, in rank order
    rank = (torch.rand(E, dtype=torch.float64) ** 3 * active).long().clamp(max=active - 1)
    seg = torch.sort(nodes[rank]).values
    return [torch.randn(E, H, dtype=torch.float32), seg]


def get_init_inputs(E=1000000, V=100000, H=8):
    return [V]
