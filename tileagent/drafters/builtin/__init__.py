"""The built-in drafter: recognize the op family from the reference's traced graph, fill a DSL template, search
schedules.

In: a reference file (KernelBench format). Out: ``recognize_family(path) -> FamilyMatch | None`` and
``BuiltinDrafter(seed).draft(task) -> list[Draft]`` (the ``tileagent.drafters.base`` interface).
Guarantees: recognition never guesses from the file name; candidates follow the evaluator's format (prompts/system.md);
references outside the families raise ``DrafterUnavailable`` from ``draft`` with a plain message.

Modules: ``graph`` (fx trace -> expression DAG), ``recognize`` (families), ``translate`` (pointwise DAG -> DSL
statements), ``templates/*`` (one per template), ``drafter`` (turn policy). docs/builtin_drafter.md describes them.
"""

from tileagent.drafters.builtin.drafter import BuiltinDrafter, outside_message, render, variants
from tileagent.drafters.builtin.recognize import FAMILIES, FamilyMatch, explain, recognize_family

__all__ = ["BuiltinDrafter", "FAMILIES", "FamilyMatch", "explain", "outside_message", "recognize_family", "render",
           "variants"]
