"""The text an LLM drafter reads: ``prompts/*.md`` rendered strictly, and the verified example kernels.

In: a template name and its fields. ``render("system", device=...)`` renders the whole of ``prompts/system.md``;
``render("feedback.mismatch", config=..., ...)`` renders the template under the heading ``## mismatch`` of
``prompts/feedback.md`` (the first fenced block after that heading, without its final newline). Out: the text.
Guarantees: templates are Python ``str.format`` strings (literal braces are doubled); a leading ``<!-- ... -->``
comment is documentation for maintainers and is not rendered; a field the template needs and the caller did not
give raises :class:`MissingField` naming the template, the field and every field the template takes (extra fields
are ignored, so a caller may pass a whole record).
"""

from __future__ import annotations

import os
import re
import string
import sys
from pathlib import Path

_COMMENT = re.compile(r"\A\s*<!--.*?-->\s*", re.DOTALL)
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


class MissingField(KeyError):
    """A template needs a field the caller did not give."""

    def __init__(self, template: str, field: str, needed: list[str]):
        super().__init__(field)
        self.template, self.field, self.needed = template, field, needed

    def __str__(self) -> str:
        return (f"template {self.template!r} needs field {self.field!r}, which was not given "
                f"(its fields: {', '.join(self.needed)})")


def prompts_dir() -> Path:
    """``$TILEAGENT_PROMPTS``, else ``prompts/`` of this checkout, else ``<prefix>/share/tileagent/prompts``."""
    env = os.environ.get("TILEAGENT_PROMPTS")
    if env:
        return Path(env)
    checkout = Path(__file__).resolve().parents[1] / "prompts"
    return checkout if checkout.is_dir() else Path(sys.prefix) / "share" / "tileagent" / "prompts"


def template(name: str) -> str:
    """The raw text of template ``name`` ("system", or "feedback.mismatch" for a section of feedback.md)."""
    file, _, section = name.partition(".")
    path = prompts_dir() / f"{file}.md"
    if not path.is_file():
        raise FileNotFoundError(f"no prompt file {path} for template {name!r}")
    text = _COMMENT.sub("", path.read_text(), count=1)
    if not section:
        return text
    heading = re.search(rf"^## {re.escape(section)}[ \t]*$", text, re.MULTILINE)
    block = _FENCE.search(text, heading.end()) if heading else None
    if block is None:
        sections = re.findall(r"^## (\S+)[ \t]*$", text, re.MULTILINE)
        raise KeyError(f"{path.name} has no template {section!r} (a '## {section}' heading followed by a fenced "
                       f"block); it has: {', '.join(sections)}")
    return block.group(1).removesuffix("\n")


def _fields(text: str) -> list[str]:
    """The fields of the template text ``text``, in order of first use."""
    out = []
    for _, field, _, _ in string.Formatter().parse(text):
        if field is not None and field not in out:
            out.append(field)
    return out


def fields(name: str) -> list[str]:
    """The fields template ``name`` takes, in order of first use."""
    return _fields(template(name))


def render(name: str, **values) -> str:
    """Template ``name`` with its fields filled from ``values``.

    Raises:
        MissingField: the template needs a field that ``values`` lacks.
    """
    text = template(name)
    needed = _fields(text)
    for field in needed:
        if field not in values:
            raise MissingField(name, field, needed)
    return text.format(**values)


def example_kernels() -> list[Path]:
    """The verified examples, ``prompts/examples/*.py`` sorted by name: kernel programs with ``reference()`` and
    ``check()``, and ``candidate_*.py`` modules in the evaluator's candidate format."""
    return sorted((prompts_dir() / "examples").glob("*.py"))


__all__ = ["MissingField", "example_kernels", "fields", "prompts_dir", "render", "template"]


def evaluator_facts() -> dict[str, str]:
    """The system prompt's fields that restate the evaluator's rules, generated from its own constants so that the
    prompt and the checker cannot drift: ``allowed_imports`` (the guards' import allow-list), ``tolerances`` (the
    default tolerance per floating dtype), ``distributions`` (the public input distributions, one line each) and
    ``tuning`` (how the autotuner searches TUNABLES)."""
    import torch

    from tileagent import autotune
    from tileagent.evaluator import guards, spec

    imports = sorted(guards.ALLOWED_IMPORTS, key=lambda m: (m.split(".")[0] not in ("torch", "tileagent"), m))
    by_value: dict = {}
    for dtype, tol in spec.DEFAULT_TOLERANCES.items():
        if dtype != torch.float64:
            by_value.setdefault((tol.atol, tol.rtol, tol.rel_l2), []).append(str(dtype).removeprefix("torch."))
    tolerances = "; ".join(f"{' and '.join(names)} atol {a:g}, rtol {r:g}, relative L2 {l2:g}"
                           for (a, r, l2), names in by_value.items())
    distributions = "\n".join("  " + line for line in spec.public_distribution_text().splitlines())
    tuning = (f"every combination of the lists when there are at most {autotune.PRODUCT_LIMIT} (the last knob "
              "varying fastest), else one knob at a time over its list (the others at their best so far, two "
              "rounds), in the order listed, until the run's tuning time is spent (the feedback says how many "
              "variants were screened): list the likeliest winners first.")
    return {"allowed_imports": ", ".join(f"`{m}`" for m in imports), "tolerances": tolerances,
            "distributions": distributions, "tuning": tuning}

