"""What a CPU evaluation will do with a reference's configs, said before it starts (``tileagent eval``, ``generate``).

In: the configs chosen for the CPU (``tileagent.configs.reduce_for_device``: each with the config a GPU runs and the
one the CPU evaluates) and the reference's path. Out: the lines the CLI prints: the sizes each config is checked at
where they differ from its own, the size rules, and warnings for a reference whose checks cannot do what they should:
its sizes cannot be counted on the meta device (no config is also run at its own sizes), or a config is still checked
at sizes too large for the interpreter (its checks may time out).
Guarantees: loads the reference once in this process (it already passed ``evaluator.probe``); a reference that does
not load gives the rules alone (its failure is reported where it is checked). Nothing is run beyond the meta device.
``stated_configs`` lists the configs for the CPU loop's prompt, with the sizes the interpreter changes beyond the
free dims.
"""

from __future__ import annotations

from pathlib import Path

from tileagent.configs import key as cfgs_key
from tileagent.evaluator.full_size import RULE as FULL_RUN_RULE, uncountable
from tileagent.evaluator.interpreter_sizes import INTERPRETER_INPUT_ELEMENTS, RULE as INTERPRETER_RULE, \
    interpreter_config, over_budget


def cpu_note(chosen, reference: Path) -> list[str]:
    """The lines to print before a CPU evaluation of ``chosen`` against ``reference``."""
    from tileagent.evaluator.spec import load_spec

    evals = [rc.eval for rc in chosen]
    try:
        spec = load_spec(reference, check=False)
    except Exception:  # noqa: BLE001 - a reference that does not load is reported where it is checked
        spec = None  # then the free-dim step alone
    runs = [interpreter_config(spec, c, evals)[0] for c in evals] if spec is not None else evals
    lines = []
    reduced = [(rc.spec, run) for rc, run in zip(chosen, runs) if run != rc.spec]
    if reduced:
        lines.append("  CPU: checked at smaller sizes (" + "; ".join(f"{cfgs_key(c)} -> {cfgs_key(run)}"
                                                                    for c, run in reduced[:3])
                     + (" ..." if len(reduced) > 3 else "") + "); not timed")
    lines.append(f"  CPU: free dims (FREE_DIMS) at their SMALL_CONFIG sizes; a config whose inputs and model tensors, "
                 f"or outputs, still hold more than 2**{INTERPRETER_INPUT_ELEMENTS.bit_length() - 1} elements is "
                 f"checked with {INTERPRETER_RULE}; {FULL_RUN_RULE}")
    if spec is None or not chosen:
        return lines
    if problem := uncountable(spec, chosen[0].spec):  # played LLM session 44c: said only after a check
        lines.append(f"  CPU: warning: the reference cannot be sized on the meta device ({problem}): its configs will "
                     "not also run at their own sizes; draw totals as Python numbers (docs/evaluator.md)")
    for text, run in {cfgs_key(r): r for r in runs}.items():  # each size checked once
        if over := over_budget(spec, run):  # said only by a check's timeout before
            lines.append(f"  CPU: warning: checked at {text}, {over}: its checks may time out; give the reference a "
                         "SMALL_CONFIG with smaller sizes, or check on a GPU")
    return lines


def stated_configs(chosen, reference: Path) -> str:
    """``chosen``'s configs as stated, one a line, each followed by the sizes other than its free dims (FREE_DIMS)
    that the interpreter checks it at (played LLM 47: a conv checked at Cin=160 for 1280, not a free dim, unsaid)."""
    from tileagent.evaluator.spec import load_spec

    try:
        spec = load_spec(reference, check=False)
    except Exception:  # noqa: BLE001 - a reference that does not load is reported where it is checked
        spec = None
    evals, lines = [rc.eval for rc in chosen], []
    for rc in chosen:
        run = interpreter_config(spec, rc.eval, evals)[0] if spec is not None else rc.eval
        changed = [f"{k}={v}" for k, v in run.items() if v != rc.spec.get(k) and k not in spec.free_dims] \
            if spec is not None else []
        lines.append("- " + ", ".join(f"{k}={v}" for k, v in rc.spec.items())
                     + (f" (on the CPU also {', '.join(changed)}: not free dims, smaller to fit the interpreter)"
                        if changed else ""))
    return "\n".join(lines)
