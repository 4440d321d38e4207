"""The per-turn context an LLM drafter reads: chat messages built from ``prompts/`` and the run so far.

In: the reference, the configs, the device, the best kernel so far, the history of attempts (``AttemptSummary``)
and example kernels (the archive's verified kernels of the op family first when archive reuse is on, then
``prompts/examples`` of the family and of the idioms the reference shows, then the candidate-format example).
Out: ``[{"role": "system", ...}, {"role": "user", ...}]``: the system prompt and the DSL guide; then one user
message with the examples, the task, the best kernel, the last candidates with their feedback, and the ask.
Guarantees: deterministic for the same inputs (a resumed run rebuilds the same prompts); bounded: at most
``MAX_EXAMPLES`` examples, the last turn's candidates with their source (each cut to ``MAX_SOURCE_CHARS``) and
feedback (``MAX_RECENT_FEEDBACK_CHARS``), older attempts as feedback only (``MAX_OLDER``, each cut to
``MAX_FEEDBACK_CHARS``), every cut at a line boundary, and older items dropped first until the estimate
(characters / 4) is under ``max_tokens``.
"""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path

from tileagent.compiler import python_ast
from tileagent.drafters.base import AttemptSummary
from tileagent.prompts import evaluator_facts, example_kernels, render

log = logging.getLogger("tileagent.context")

MAX_EXAMPLES, MAX_OLDER = 3, 6
MAX_SOURCE_CHARS, MAX_FEEDBACK_CHARS, MAX_RECENT_FEEDBACK_CHARS = 12_000, 5_000, 12_000  # older: costs kept
REPEATED_PARAGRAPH_CHARS = 300  # feedback paragraphs this long are printed once a prompt (``_once``)
MAX_TOKENS = 32_000
FAMILY_EXAMPLES = {  # op family (the built-in drafter's recognition) -> prompts/examples stems, most relevant first
    "rmsnorm": ["rmsnorm_silu"],
    "layernorm": ["layernorm"],
    "softmax": ["softmax"],
    "row_reduction": ["sum_dim1"],
    "elementwise": ["bias_gelu"],
    "gemm_epilogue": ["gemm_relu"],
    "attention": ["attention"],
}
FORMAT_EXAMPLE = "candidate_rmsnorm_silu"  # a complete answer module: always the last example that fits
IDIOM_EXAMPLES = {  # an idiom seen in the reference -> the prompts/examples stem that shows it
    "several_outputs": "add_rmsnorm",
    "lookup": "cross_entropy",
    "streamed_row": "cross_entropy",
    "attention": "attention",
    "gemm": "gemm_relu",
    "softmax": "softmax",
    "mean_variance": "layernorm",
    "rms": "rmsnorm_silu",
    "dim_reduction": "sum_dim1",
    "counts": "bincount",
    "broadcast": "bias_gelu",
}
_IDIOM_CALLS = {  # names of torch functions, methods and nn layers -> idiom
    "lookup": {"cross_entropy", "nll_loss", "gather", "take_along_dim", "index_select", "embedding", "Embedding",
               "one_hot", "CrossEntropyLoss", "NLLLoss"},
    "streamed_row": {"logsumexp", "cross_entropy", "CrossEntropyLoss", "log_softmax", "topk"},
    "attention": {"scaled_dot_product_attention", "MultiheadAttention"},
    "gemm": {"matmul", "mm", "bmm", "linear", "Linear", "einsum", "addmm", "baddbmm",  # and convolutions: a GEMM
             "conv1d", "conv2d", "conv3d", "Conv1d", "Conv2d", "Conv3d"},  # over gathered patches (played LLM s40)
    "softmax": {"softmax", "log_softmax", "Softmax", "LogSoftmax", "topk"},
    "mean_variance": {"layer_norm", "LayerNorm", "group_norm", "GroupNorm", "var", "std", "var_mean",
                      "instance_norm", "InstanceNorm1d", "InstanceNorm2d", "batch_norm", "BatchNorm1d", "BatchNorm2d"},
    "rms": {"rsqrt", "rms_norm", "RMSNorm", "normalize", "cosine_similarity", "CosineSimilarity"},
    "dim_reduction": {"sum", "mean", "amax", "amin", "max", "min", "prod", "norm", "cumsum", "argmax", "argmin",
                      "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy", "kl_div",  # a
                      "binary_cross_entropy_with_logits", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss",  # mean
                      "BCELoss", "BCEWithLogitsLoss", "KLDivLoss"},  # over everything (played LLM 48)
    "counts": {"bincount", "histc", "histogram", "scatter_add", "scatter_add_", "index_add", "index_add_",
               "scatter_reduce", "scatter_reduce_", "index_put_"},
}


_CONV = re.compile(r"^(conv[123]d|Conv[123]d)$")
GENERIC_FAMILY = "fusion"  # the built-in fusion drafter's: any graph of pointwise, shape and reduction ops


def family_of(reference_path: str | Path) -> str:
    """The op family of a reference (``recognize_family`` of the built-in drafter), else the file's stem."""
    try:
        from tileagent.drafters.builtin import recognize_family

        match = recognize_family(str(reference_path))
    except Exception as e:  # noqa: BLE001 - recognition is a hint; any failure falls back to the stem
        log.info("op family of %s not recognized (%s: %s)", reference_path, type(e).__name__, e)
        match = None
    return getattr(match, "family", None) or Path(reference_path).stem


def device_words(device: str) -> str:
    """The device in words for the system prompt."""
    if device.startswith("cuda"):
        try:
            import torch

            from tileagent.archive import device_arch

            props = torch.cuda.get_device_properties(device)
            arch = device_arch(device)
            return f"one {props.name} ({arch}, {props.multi_processor_count} SMs)"
        except Exception:  # noqa: BLE001 - words only
            return "one NVIDIA GPU"
    return "the CPU (TileAgent's tile interpreter: checked for correctness only, not timed)"


def idioms_of(reference_source: str) -> list[str]:
    """The idioms (keys of ``IDIOM_EXAMPLES``) a reference's source shows, in ``IDIOM_EXAMPLES``' order: the torch
    functions, methods and layers it names outside ``get_inputs`` / ``get_init_inputs`` (a convolution with
    ``groups=`` is a window a channel, not a GEMM), ``@`` (a GEMM), and a ``forward`` returning a tuple (several
    outputs). A source that does not parse shows none."""
    try:
        tree = python_ast.parse(reference_source)
    except SyntaxError:
        return []
    names, found, skipped = set(), set(), set()
    inputs = {"get_inputs", "get_init_inputs"}  # how the inputs are drawn is not the op (a router's topk)
    for node in (n for top in tree.body if not (isinstance(top, ast.FunctionDef) and top.name in inputs)
                 for n in ast.walk(top)):
        if isinstance(node, ast.Call) and _CONV.match(ast.unparse(node.func).rsplit(".", 1)[-1]) and \
                any(k.arg == "groups" for k in node.keywords):
            for n in ast.walk(node.func):  # groups=C: a window a channel, no GEMM (played LLM session 43b)
                skipped.add(id(n))
        elif id(node) in skipped:
            continue
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            found.add("gemm")
        elif isinstance(node, ast.FunctionDef) and node.name == "forward":
            if any(isinstance(r, ast.Return) and isinstance(r.value, (ast.Tuple, ast.List)) for r in ast.walk(node)):
                found.add("several_outputs")
    found |= {idiom for idiom, calls in _IDIOM_CALLS.items() if names & calls}
    if {"gemm", "softmax"} <= found:  # softmax(q k^T) v written out (a decode step's GQA: played LLM, session 24)
        found.add("attention")
    if not found & {"gemm", "attention", "lookup", "counts"}:
        found.add("broadcast")  # a pointwise op: the 2-d elementwise example with a broadcast operand
    return [idiom for idiom in IDIOM_EXAMPLES if idiom in found]


def pick_examples(family: str, archived: list[tuple[str, str]] | None = None, limit: int = MAX_EXAMPLES,
                  reference_source: str = "") -> list[tuple[str, str]]:
    """Up to ``limit`` (title, source) examples: ``archived`` ones (verified kernels of this family) first, at most
    ``limit - 2`` of them (played LLM session 41: three of other ops' CPU-checked kernels took every place, and the
    prompt's curated examples, with their references, were gone), then ``prompts/examples`` for the family, then
    those showing the reference's idioms (``idioms_of``), then the candidate-format example; no file twice. The
    fusion family's archive holds every op that family drafts, so there archived kernels only fill the places the
    curated examples leave, after them (played LLM session 42: a segmented sum lost the column-sum example to an
    RMSNorm's; 43b: a causal conv's first example was a SwiGLU's)."""
    files = {p.stem: p for p in example_kernels()}
    stems = FAMILY_EXAMPLES.get(family, []) + [IDIOM_EXAMPLES[i] for i in idioms_of(reference_source)]
    stems = [s for s in dict.fromkeys(stems) if s in files and s != FORMAT_EXAMPLE]
    places = max(0, limit - 2) if family != GENERIC_FAMILY else max(0, limit - 1 - len(stems))
    kept = list(archived or [])[:places]
    curated = [(f"prompts/examples/{stem}.py", files[stem].read_text())
               for stem in [*stems[:max(0, limit - len(kept) - 1)], FORMAT_EXAMPLE] if stem in files]
    if family == GENERIC_FAMILY:  # another op's kernel after the curated ones it fills in for (session 43b)
        return (curated[:-1] + kept + curated[-1:])[:limit]
    return (kept + curated)[:limit]


def _cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, cut at a line boundary (a line is never cut in the middle), saying what
    was left out."""
    if len(text) <= limit:
        return text
    kept = text[:limit].rsplit("\n", 1)[0] if "\n" in text[:limit] else text[:limit]
    rest = text[len(kept):]
    return kept + f"\n... [{rest.count(chr(10)) + 1} more line(s), {len(rest)} characters, cut]"


def _fence(source: str) -> str:
    return f"```python\n{source.rstrip()}\n```"


def _attempt_block(a: AttemptSummary, with_source: bool) -> str:
    """One attempt: the last turn's (``with_source``) with its source and whole feedback (timings and the cost of
    every config: what the next turn works from), an older one with its feedback cut to ``MAX_FEEDBACK_CHARS``."""
    head = f"### {a.attempt_id} ({a.label or 'candidate'}): {a.status}"
    parts = [head]
    if with_source and a.source:
        parts.append(_fence(_cut(a.source, MAX_SOURCE_CHARS)))
    parts.append(_cut(a.feedback, MAX_RECENT_FEEDBACK_CHARS if with_source else MAX_FEEDBACK_CHARS))
    return "\n\n".join(parts)


def _once(block: str, seen: set) -> str:
    """``block`` with each long paragraph of feedback that an earlier block printed (the mismatch's "Reading it: ..."
    guide, the cost section's explanation) replaced by a pointer to it: a turn-3 prompt repeated the same 14 lines
    for every failed attempt (played LLM, session 24: 60 KB). Code blocks are kept whole."""
    out = []
    for para in block.split("\n\n"):
        if len(para) >= REPEATED_PARAGRAPH_CHARS and "```" not in para and para in seen:
            out.append(f"({' '.join(para.split()[:3])} ...: the same paragraph as in the feedback above.)")
            continue
        if len(para) >= REPEATED_PARAGRAPH_CHARS:
            seen.add(para)
        out.append(para)
    return "\n\n".join(out)


def build_messages(*, device: str, reference_path: str, reference_source: str, configs: list[dict], turn: int,
                   n: int, history: list[AttemptSummary], best: AttemptSummary | None, examples: list[tuple[str, str]],
                   config_note: str = "", max_tokens: int = MAX_TOKENS) -> list[dict]:
    """The messages of one turn (see the module docstring)."""
    system = render("system", device=device_words(device), **evaluator_facts()) + "\n\n" + render("dsl_guide")
    last_turn = max((a.turn for a in history), default=0)
    recent = [a for a in history if a.turn == last_turn]
    older = [a for a in history if a.turn != last_turn][-MAX_OLDER:]

    def user(examples, older, recent) -> str:
        parts = []
        if examples:
            parts.append("## Verified example kernels")
            parts += [f"### {title}\n\n{_fence(src)}" for title, src in examples]
        configs_text = "\n".join(f"- {', '.join(f'{k}={v}' for k, v in c.items())}" for c in configs)
        # on the CPU these are the sizes the interpreter runs; the note gives its rule and the configs a GPU runs
        listed = "is checked on" if device.startswith("cuda") else \
            "is checked on, at the CPU interpreter's sizes (the note below gives its rule and the configs a GPU runs)"
        parts.append(f"## The task: {Path(reference_path).name}\n\n{_fence(reference_source)}\n\nConfigs your "
                     f"kernel {listed}:\n{configs_text}" + (f"\n\n{config_note}" if config_note else ""))
        if best is not None and best.source:
            said = best.label or best.status
            shown = next((a.attempt_id for a in recent if a.source == best.source), None)  # printed once, below
            module = f"Its module is {shown}'s, below." if shown else _fence(_cut(best.source, MAX_SOURCE_CHARS))
            parts.append(f"## Best kernel so far: {best.attempt_id} ({said})\n\n{module}" +
                         (f"\n\n{best.gains}" if best.gains else ""))
        seen: set = set()
        if older:
            parts.append("## Earlier attempts (feedback only)")
            parts += [_once(_attempt_block(a, with_source=False), seen) for a in older]
        if recent:
            parts.append(f"## Your candidates of turn {last_turn} and their feedback")
            parts += [_once(_attempt_block(a, with_source=True), seen) for a in recent]
        ask = "Write the module" if not history else "Write an improved module"
        parts.append(f"## Turn {turn}\n\n{ask}: one ```python block with the complete module (class ModelNew)."
                     + (f" This turn asks for {n} candidates; make this one differ from the others in its schedule."
                        if n > 1 else ""))
        return "\n\n".join(parts)

    text = user(examples, older, recent)
    while (len(system) + len(text)) / 4 > max_tokens and (older or len(examples) > 1 or len(recent) > 1):
        if older:
            older = older[1:]
        elif len(examples) > 1:
            examples = examples[:-1]
        else:
            recent = recent[:-1]
        text = user(examples, older, recent)
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


__all__ = ["FAMILY_EXAMPLES", "IDIOM_EXAMPLES", "build_messages", "device_words", "family_of", "idioms_of",
           "pick_examples"]
