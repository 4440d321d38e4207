"""TileLang's attention-sink backward examples (``bench/tilelang_examples/attention_sink``: MHA and GQA, the sink's
gradient among the outputs) on the CPU with the GPU lowering checked, against the examples' own reference and
tolerances. Their ``sinks`` fragment is declared ``[heads]`` and indexed up to block_M by ``T.Parallel`` loops, which
TileLang lays out by the loops (compiler/frontend_grow.py; an L004 before)."""

from pathlib import Path

import pytest
import torch

from tileagent.compat.run import load_script
from tileagent.compiler.jit import compile_defaults

SINK = Path(__file__).resolve().parents[1] / "bench" / "tilelang_examples" / "attention_sink"


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("program,heads,kv_heads,window", [("example_mha_sink_bwd_bhsd.py", 2, 2, None),
                                                            ("example_gqa_sink_bwd_bhsd.py", 4, 2, 64)])
def test_sink_backward_matches_the_examples_reference(tilelang, monkeypatch, program, heads, kv_heads, window):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))  # its Hopper tiles (get_bwd_configs)
    ns = load_script(SINK / program)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, heads, 128, 64, generator=gen).half().requires_grad_()
    k = torch.randn(1, kv_heads, 128, 64, generator=gen).half().requires_grad_()
    v = torch.randn(1, kv_heads, 128, 64, generator=gen).half().requires_grad_()
    sinks = torch.randn(heads, generator=gen).half().requires_grad_()
    do = torch.randn(1, heads, 128, 64, generator=gen).half()
    grads = []
    groups = (heads // kv_heads,) if kv_heads != heads else ()  # the GQA version's extra argument
    for run in (lambda: ns["attention"](q, k, v, sinks, window, *groups),
                lambda: ns["ref_program"](q, k, v, sinks, window, dtype=torch.float16)):
        with compile_defaults(lowering_check=True):
            out = run()
            out.backward(do)
        grads.append([out.detach()] + [t.grad.clone() for t in (q, k, v, sinks)])
        for t in (q, k, v, sinks):
            t.grad = None
    for name, got, want in zip(("O", "dQ", "dK", "dV", "dsinks"), *grads):
        torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-2, msg=name)
