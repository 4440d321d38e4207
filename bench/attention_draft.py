"""The built-in drafter's attention candidates on the GPU, next to SDPA in the same run (issue 12, item 7).

Usage (CUDA machine): python bench/attention_draft.py [--variants N] [--split-p]
The reference is tasks/attention.py with the evaluator's default fp16 tolerance (its own atol 1e-3 makes the
drafter add P's rounding residue as a third gemm; ``--split-p`` keeps the task as shipped). For each of the first
``--variants`` schedule variants the drafter proposes (turn 1, 2, ...): the evaluator's correctness check on the
task's first configs (every input distribution, fresh inputs, poisoned outputs), then TFLOP/s at B8 H32 S4096 D128
fp16, non-causal and causal, CUDA events, L2 flushed, medians (``bench.memory_bound.bench``), next to
``F.scaled_dot_product_attention`` on the same fp16 tensors (cuDNN / flash on an H100 / H200).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.memory_bound import bench, load  # noqa: E402


def reference_file(tmp: Path, split_p: bool) -> Path:
    text = (REPO / "tasks" / "attention.py").read_text()
    if not split_p:
        text = "\n".join(line for line in text.splitlines() if not line.startswith("TOLERANCES"))
    path = tmp / "attention.py"
    path.write_text(text)
    return path


def main() -> None:
    from tileagent.drafters.base import AttemptSummary, DraftTask
    from tileagent.drafters.builtin import BuiltinDrafter
    from tileagent.evaluator.correctness import check_candidate
    from tileagent.evaluator.spec import load_spec

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", type=int, default=3)
    ap.add_argument("--split-p", action="store_true", help="the task as shipped (atol 1e-3: a third gemm)")
    ap.add_argument("--check-configs", type=int, default=2)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="attention_draft_"))
    ref = reference_file(tmp, args.split_p)
    spec = load_spec(ref)
    B, H, S, D = 8, 32, 4096, 128
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    flops = {c: 4 * B * H * S * S * D // (2 if c else 1) for c in (False, True)}
    sdpa = {c: bench(lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=c), trials=10)[0]
            for c in (False, True)}
    rows, history = [], []
    drafter = BuiltinDrafter()
    for turn in range(1, args.variants + 1):
        task = DraftTask(task_name="attention", reference_path=str(ref), reference_source=ref.read_text(),
                         configs=[], turn=turn, history=history, device="cuda")
        draft = drafter.draft(task)[0]
        history.append(AttemptSummary(attempt_id=f"t{turn}-c0", turn=turn, label=draft.label, status="ok"))
        path = tmp / f"candidate_{turn}.py"
        path.write_text(draft.source)
        try:  # raises on the first config or input the candidate gets wrong
            check_candidate(spec, path, device="cuda", configs=spec.configs[:args.check_configs], seeds=1)
        except Exception as e:  # noqa: BLE001 -- reported, the variant is not timed
            print(f"{draft.label}: not correct ({type(e).__name__}: {str(e)[:200]})", flush=True)
            continue
        module = load(f"candidate_{turn}", tmp)
        for causal in (False, True):
            model = module.ModelNew(causal).cuda()
            out = model(q, k, v)
            torch.testing.assert_close(out.transpose(1, 2), torch.nn.functional.scaled_dot_product_attention(
                qt, kt, vt, is_causal=causal), rtol=1e-2, atol=1e-2)
            ms = bench(lambda: model(q, k, v), trials=10)[0]
            tf, base = flops[causal] / ms / 1e9, flops[causal] / sdpa[causal] / 1e9
            rows.append((draft.label, causal, tf, base))
            print(f"{draft.label} causal={causal}: checked ok, {tf:.1f} TFLOP/s, SDPA {base:.1f}, "
                  f"{tf / base:.3f} of SDPA", flush=True)
    print("\n| variant (checked ok) | causal | TFLOP/s | SDPA | ratio |\n|---|---|---|---|---|")
    for label, causal, tf, base in rows:
        print(f"| {label} | {causal} | {tf:.1f} | {base:.1f} | {tf / base:.3f} |")


if __name__ == "__main__":
    main()
