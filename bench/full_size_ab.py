"""What the CPU evaluation's full-size run (evaluator.full_size) catches and costs: the played LLM's session-24 answers
whose size-dependent paths never ran on the CPU, correct and with a bug planted in that path, evaluated as
`tileagent eval --device cpu` does (free dims at SMALL_CONFIG's sizes, the GPU's sizes as plan configs, one seed),
with the full-size run off (``full_size_s=0``) and on (the default), in one process. Prints one line per evaluation:
status, wall seconds, the sizes each config also ran at.

    python bench/full_size_ab.py [--seeds 1]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLAYED = REPO / "bench" / "played_llm"

# op, the answer, the planted bug (text replaced; the path it lives in runs only at the GPU's sizes)
CASES = [
    ("gqa_decode", "answers/gqa_decode/turn1.py", ("acc[i, j] *= alpha[i]", "acc[i, j] = acc[i, j]"),
     "the online-softmax rescale dropped: wrong once a split holds two key tiles (S >= 2048 at B = 1)"),
    ("neox_rope_positions", "answers/neox_rope_positions/turn1.py",
     ("n = bt * block_t + r ", "n = bt * block_t "), "every token of a multi-token block is its first (N >= 1056)"),
]


def main(argv=None) -> int:
    from tileagent.configs import reduce_for_device, unique_evals
    from tileagent.evaluator.records import EvalRequest
    from tileagent.evaluator.spec import load_spec
    from tileagent.evaluator.worker import evaluate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=1)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for op, answer, (old, new), why in CASES:
            ref = PLAYED / "refs" / f"{op}.py"
            source = (PLAYED / answer).read_text()
            assert old in source, f"{answer} no longer holds {old!r}"
            broken = Path(tmp) / f"{op}_broken.py"
            broken.write_text(source.replace(old, new))
            chosen = reduce_for_device(load_spec(str(ref)), load_spec(str(ref)).configs, "cpu")
            print(f"{op}: planted bug: {why}")
            for label, path in (("answer", PLAYED / answer), ("broken", broken)):
                for full in (0.0, 90.0):
                    start = time.perf_counter()
                    r = evaluate(EvalRequest(kernel_path=str(path), reference_path=str(ref), device="cpu",
                                             seeds=a.seeds, configs=unique_evals(chosen),
                                             plan_configs=[rc.spec for rc in chosen], full_size_s=full))
                    ran = [n.split(": also run once at ")[1].split(" on the CPU")[0] for c in r.configs
                           for n in c.notes if ": also run once at " in n]
                    print(f"  {label:6s} full_size_s={full:3.0f}: {r.status:8s} {time.perf_counter() - start:6.1f} s"
                          f"  ran at: {'; '.join(ran) or '-'}"
                          + (f"  ({r.message[:90]}...)" if r.status != "ok" else ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
