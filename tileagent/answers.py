"""The candidate module inside an LLM's answer.

In: the answer's text (an LLM completion, a response file) and, when known, the API's ``finish_reason``.
Out: a :class:`ParsedAnswer`: the module's source, or ``None`` and a ``problem`` worded to fill
``prompts.render("feedback.malformed_answer", problem=...)`` ("Your answer could not be used: {problem}.").
Guarantees: never raises for any text; exactly one of ``source`` and ``problem`` is set; a returned source ends with
one newline and parses as Python (``ast.parse``).

What counts as a code block (CommonMark fences, the form ``prompts/system.md`` asks for):

- a fence is a line of three or more backticks, indented by at most three spaces, with an info string; the block ends
  at a line of at least as many backticks and nothing else (so a ````` ```` ````` fence may hold ``` lines);
- blocks tagged ``python``, ``py``, ``python3`` (any case) are code blocks; when there is none, untagged blocks are
  taken instead (some models drop the tag); blocks in other languages (```text, ```bash) are ignored;
- a reasoning section ``<think>...</think>`` at the start (DeepSeek-R1, Qwen3 served raw) is skipped, so drafts in
  the model's thinking do not count.

Problems, checked in this order (the exact strings):

- ``"no python code block"``: nothing counts as a code block (with ``finish_reason == "length"``:
  ``"the answer is cut off before its code block"``, the token limit struck while the model was still writing prose);
- ``"N code blocks"`` (N >= 2), counting a final unclosed block too;
- ``"the code block is cut off after its line N: `<that line>`"``: the only block has no closing fence (a block that
  closed before the token limit struck is complete and is accepted: only the text after it was lost); a block
  without its closing fence that defines ``ModelNew`` and parses is taken as it is unless the token limit struck
  (``finish_reason == "length"``): a forgotten fence, the file provider having no finish reason (played LLM session
  38: a whole module lost a turn for its last line);
- ``"the code block is empty"``;
- ``"the code block is not valid Python: line L: msg"`` (``L`` counts lines of the block, i.e. of the candidate file,
  ``msg`` is the ``SyntaxError``'s message). Decision: a module that does not parse is reported here rather than handed
  to the evaluator, because it would only come back as a load failure after a worker start, with a less direct
  message; the answer is still not runnable, so it is a malformed answer like the others.
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from tileagent.compiler import python_ast

NO_BLOCK = "no python code block"
CUT_OFF = "the code block is cut off"
CUT_OFF_BEFORE = "the answer is cut off before its code block"
EMPTY = "the code block is empty"
PYTHON_TAGS = frozenset({"python", "py", "python3"})

_FENCE_OPEN = re.compile(r"^( {0,3})(`{3,})[ \t]*([^`\s]*)[^`]*$")
_THINK = re.compile(r"\A\s*<think>.*?(</think>|\Z)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ParsedAnswer:
    """The module found in an answer, or what was wrong with the answer."""

    source: str | None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.source is not None


@dataclass(frozen=True, slots=True)
class _Block:
    tag: str
    text: str
    closed: bool


def _blocks(text: str) -> list[_Block]:
    """Every fenced block of ``text`` in order (the last may be unclosed)."""
    lines = text.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        opened = _FENCE_OPEN.match(lines[i])
        if not opened:
            i += 1
            continue
        indent, fence, tag = len(opened.group(1)), opened.group(2), opened.group(3).lower()
        close = re.compile(rf"^ {{0,3}}`{{{len(fence)},}}[ \t]*$")
        body, i, closed = [], i + 1, False
        while i < len(lines):
            if close.match(lines[i]):
                closed = True
                i += 1
                break
            line = lines[i]
            strip = len(line) - len(line.lstrip(" "))
            body.append(line[min(indent, strip):])
            i += 1
        blocks.append(_Block(tag, "\n".join(body), closed))
    return blocks


def _syntax_problem(source: str) -> str | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. SyntaxWarning for an invalid escape: the evaluator's concern
            python_ast.parse(source)
    except SyntaxError as e:
        return f"the code block is not valid Python: line {e.lineno}: {e.msg}"
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes, absurd nesting
        return f"the code block is not valid Python: {e}"
    return None


def parse_answer(text: str | None, finish_reason: str | None = None, *, check_syntax: bool = True) -> ParsedAnswer:
    """The candidate module in ``text`` (see the module docstring for the rules and the exact problem strings).

    Args:
        text: the whole answer; ``None`` (an API message without content) is treated as "".
        finish_reason: the API's finish reason for this answer; ``"length"`` means the token limit cut it.
        check_syntax: report a block that does not parse as Python (on by default).
    """
    text = (text or "").replace("\r\n", "\n").replace("\r", "\n")
    text = _THINK.sub("", text, count=1)
    found = _blocks(text)
    blocks = [b for b in found if b.tag in PYTHON_TAGS] or [b for b in found if not b.tag]
    if not blocks:
        return ParsedAnswer(None, CUT_OFF_BEFORE if finish_reason == "length" else NO_BLOCK)
    if len(blocks) > 1:
        return ParsedAnswer(None, f"{len(blocks)} code blocks")
    block = blocks[0]
    source = block.text.strip("\n")
    if not block.closed and not (finish_reason != "length" and "class ModelNew" in source and
                                 _syntax_problem(source + "\n") is None):
        lines = source.split("\n")
        last = lines[-1].strip() if source.strip() else ""
        return ParsedAnswer(None, f"{CUT_OFF} after its line {len(lines)}: `{last[:80]}`" if last else CUT_OFF)
    if not source.strip():
        return ParsedAnswer(None, EMPTY)
    source += "\n"
    problem = _syntax_problem(source) if check_syntax else None
    return ParsedAnswer(None, problem) if problem else ParsedAnswer(source)


def answer_file(path: Path) -> Path:
    """``path``, or where it holds an LLM's whole answer (not Python, one python block: what ``--provider file``
    responses and saved chat answers are), that block written to a file of the same name in a fresh temporary
    folder (removed when the process ends), for ``tileagent eval``. A file that is neither stays as it is: the
    evaluator reports its syntax error."""
    text = path.read_text(errors="replace")
    if _syntax_problem(text) is None:
        return path
    parsed = parse_answer(text)
    if parsed.source is None:
        return path
    folder = tempfile.mkdtemp(prefix="tileagent-answer-")
    atexit.register(shutil.rmtree, folder, True)  # removed when the process ends
    block = Path(folder) / path.name
    block.write_text(parsed.source)
    return block


__all__ = ["CUT_OFF", "CUT_OFF_BEFORE", "EMPTY", "NO_BLOCK", "PYTHON_TAGS", "ParsedAnswer", "answer_file",
           "parse_answer"]
