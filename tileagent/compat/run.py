"""Run a TileLang program unchanged on TileAgent: ``tileagent tilelang SCRIPT [ARGS...]``.

In: the path of a Python script written for TileLang and its command-line arguments. Out: the script's own output;
the exit status ``run_script`` returns: the script's (``sys.exit``), 0 when it ends normally, 1 when it raises
(a failed check is an AssertionError), 2 for a compile error or a TileLang API TileAgent does not support.
Guarantees: ``import tilelang`` inside the script (and everything it imports) is TileAgent (``compat.install()``);
the script runs as ``__main__`` with ``sys.argv = [SCRIPT, *ARGS]`` and its folder first on ``sys.path``, as
``python SCRIPT`` would; a CompileError (including E701) is printed as a diagnostic with the DSL line and the line of
the script that reached it, not as a traceback.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from pathlib import Path

from tileagent.compiler.diagnostics import CompileError, Span

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
_PACKAGE_DIRS = tuple(str(Path(p).resolve()) + os.sep for p in (
    Path(__file__).resolve().parents[1],  # tileagent/
    Path(__file__).resolve().parents[2] / "compiler", Path(__file__).resolve().parents[2] / "evaluator"))


def _user_frames(tb) -> list:
    """The traceback's frames that are in the user's code (not TileAgent's, not the import machinery's)."""
    out = []
    for frame in traceback.extract_tb(tb):
        name = frame.filename
        if name.startswith("<") or str(Path(name).resolve()).startswith(_PACKAGE_DIRS) or \
                os.sep + "importlib" + os.sep in name or name.endswith("runpy.py"):
            continue
        out.append(frame)
    return out


def report(error: BaseException, stream=None) -> None:
    """Print a CompileError the way the compiler renders it, located in the user's code."""
    stream = stream or sys.stderr
    frames = _user_frames(error.__traceback__)
    if isinstance(error, CompileError) and error.span is None and frames:
        error.with_span(Span(frames[-1].filename, frames[-1].lineno, 0))
    print(str(error), file=stream)
    if frames and isinstance(error, CompileError) and error.span is not None and \
            (error.span.file, error.span.line) != (frames[-1].filename, frames[-1].lineno):
        print(f"  note: reached from {frames[-1].filename}:{frames[-1].lineno}: {frames[-1].line}", file=stream)


def run_script(script: str | os.PathLike, args: list[str] | None = None) -> int:
    """Run ``script`` with ``args`` under the TileLang compatibility layer; return the exit status (see above)."""
    from tileagent import compat

    path = Path(script)
    if not path.is_file():
        print(f"error: no such file: {path}", file=sys.stderr)
        return EXIT_BAD_INPUT
    compat.install()
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(path), *(args or [])]
    sys.path.insert(0, str(path.resolve().parent))
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as e:
        code = e.code
        if code is None:
            return EXIT_OK
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return EXIT_FAILED
    except CompileError as e:
        report(e)
        return EXIT_BAD_INPUT
    except Exception:  # noqa: BLE001 -- the script's own failure: its traceback, as python would print it
        traceback.print_exc()
        return EXIT_FAILED
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return EXIT_OK


def load_script(script: str | os.PathLike) -> dict:
    """The globals of ``script`` executed under the compatibility layer as a module (not ``__main__``): its kernels
    and reference functions, to call at chosen sizes."""
    from tileagent import compat

    compat.install()
    path = Path(script)
    sys.path.insert(0, str(path.resolve().parent))
    try:
        return runpy.run_path(str(path), run_name=f"tilelang_script_{path.stem}")
    finally:
        sys.path.remove(str(path.resolve().parent))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m tileagent.tilelang SCRIPT [ARGS...]\n\nRun a TileLang program with `import tilelang` "
              "resolved to TileAgent.", file=sys.stderr if not argv else sys.stdout)
        return EXIT_BAD_INPUT if not argv else EXIT_OK
    return run_script(argv[0], argv[1:])
