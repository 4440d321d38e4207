"""The reference, loaded once in a throw-away process before any work: its failures are reported as the reference's.

In: the path of a reference file (KernelBench format, ``evaluator.spec``) and a time limit. Out: ``probe_reference``
returns a ``ReferenceSummary`` (its config grid, FREE_DIMS, SMALL_CONFIG, and the config keys its functions take),
or raises ``SpecError`` with a message that names the reference. The CLI calls it before it starts a worker or makes
a run directory, so bad references end in exit 2 with one line (``tileagent eval``, ``generate``, ``batch``).

Guarantees: the reference is imported and sanity-run (``load_spec(path, check=True)``: its SMALL_CONFIG or first
config, twice, on the CPU) in a subprocess of its own session, never in the caller. Each way a reference can fail
becomes one ``SpecError``:

- any ``SpecError`` of ``load_spec`` (syntax, missing class or function, not UTF-8, unknown config keys, raising);
- it does not finish within ``timeout_s`` (it hangs or sleeps at import or in its sanity run): the process group is
  killed;
- it calls ``sys.exit`` (reported with its code) or ``os._exit`` / is killed (reported with the exit code or signal);
- it runs out of memory (``MemoryError``, an allocator's "can't allocate memory", or the process killed by SIGKILL).

Messages start with ``the reference <file name>``. The reference's own prints go to the probe's stderr (the last of
which is quoted when the process dies), never into its answer.

Limits: the probe runs the reference on one config on the CPU; a reference that fails only at another config or on
the GPU fails later, inside the evaluation.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tileagent.evaluator.errors import SpecError

REFERENCE_TIMEOUT_S = 120.0
"""The default limit for importing and sanity-running a reference."""
STARTUP_TIMEOUT_S = 300.0
"""The limit for the probe process to import torch and the evaluator, before the reference's clock starts."""
_REPO = Path(__file__).resolve().parents[1]


@dataclass
class ReferenceSummary:
    """What the caller needs of a reference without importing it: ``configs`` (the grid, or ``[{}]``), whether it
    states a grid, ``free_dims``, ``small_config``, and ``accepts``: the config keys that reach ``get_inputs`` or
    ``get_init_inputs`` (None: any key, one of them takes ``**kwargs``). Works with ``configs.reduce_for_device``."""

    path: Path
    configs: list[dict]
    has_grid: bool = False
    free_dims: tuple[str, ...] = ()
    small_config: dict | None = None
    accepts: frozenset[str] | None = None
    keys: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what the reference does that the checks will not see

    def check_config(self, config: dict, where: str) -> None:
        """Raise SpecError when ``config`` names a key that neither get_inputs nor get_init_inputs takes."""
        from tileagent.evaluator.spec import check_config_keys

        check_config_keys(config, self.accepts, where)


def _out_of_memory(error: BaseException) -> bool:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = str(error).lower()
        if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError" or \
                "can't allocate memory" in text or "out of memory" in text:
            return True
        error = error.__cause__ or error.__context__
    return False


def _probe(path: Path) -> dict:
    """Load ``path`` (in this process) and describe it, or say why it cannot be used."""
    from tileagent.evaluator.spec import accepted_config_keys, load_spec

    name = path.name
    try:
        spec = load_spec(path)
    except SystemExit as e:
        return {"ok": False, "message": f"the reference {name} called sys.exit({e.code!r}) while loading; a reference "
                                        f"must not exit"}
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - whatever the reference does is reported as the reference's
        if _out_of_memory(e):
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            return {"ok": False, "message": f"the reference {name} ran out of memory while loading ({first})"}
        if isinstance(e, SpecError):
            return {"ok": False, "message": e.message}
        return {"ok": False, "message": f"the reference {name}: loading it raised {type(e).__name__}: {e}"}
    accepts = accepted_config_keys(spec.module)
    try:
        warnings = spec.unchecked_values(spec.small_config if spec.small_config is not None else spec.configs[0])
    except Exception:  # noqa: BLE001 - a warning only; the checks report what fails
        warnings = []
    return {"ok": True, "configs": spec.configs, "has_grid": spec.has_grid, "free_dims": list(spec.free_dims),
            "small_config": spec.small_config, "accepts": sorted(accepts) if accepts is not None else None,
            "warnings": warnings}


def probe_reference(path: str | Path, timeout_s: float = REFERENCE_TIMEOUT_S) -> ReferenceSummary:
    """Import and sanity-run the reference at ``path`` in a subprocess (see the module docstring). ``timeout_s``
    counts from the moment the probe has imported torch and the evaluator (a loaded machine's slow start is not
    held against the reference; that start has ``STARTUP_TIMEOUT_S``).

    Raises:
        SpecError: the reference cannot be used; the message names it and says why.
    """
    path = Path(path).resolve()
    name = path.name
    env = {**os.environ}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), *sys.path, env.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen([sys.executable, "-m", "tileagent.evaluator.probe", str(path)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, env=env,
                                cwd=str(_REPO), start_new_session=True)
        answer_lines = _Lines(proc)
        try:
            if answer_lines.read(1, STARTUP_TIMEOUT_S) == 1:
                answer_lines.read(1, timeout_s)
        except TimeoutError:
            _kill(proc)
            if not answer_lines.lines():
                raise SpecError(f"the probe of the reference {name} did not start within {STARTUP_TIMEOUT_S:g} s "
                                f"(importing torch); the machine is overloaded") from None
            raise SpecError(f"the reference {name} did not finish loading within {timeout_s:g} s (importing it and "
                            f"running it once on its SMALL_CONFIG): it hangs, sleeps or is too slow") from None
        except BaseException:
            _kill(proc)
            raise
        _kill(proc)  # anything the reference left running in its session
        errors.seek(0)
        tail = errors.read().decode(errors="replace").strip()[-600:]
    last = f"; its last output: {tail}" if tail else ""
    out = answer_lines.lines()
    try:
        answer = json.loads(out[1]) if len(out) > 1 else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        code = proc.returncode
        if code == -signal.SIGKILL:
            raise SpecError(f"the reference {name} was killed (SIGKILL) while loading, most likely for running out "
                            f"of memory{last}")
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                raise SpecError(f"the reference {name} died from signal {signal.Signals(-code).name} while "
                                f"loading{last}")
        if not out:
            raise SpecError(f"the probe of the reference {name} could not start (exit code {code}){last}")
        raise SpecError(f"the reference {name} exited with code {code} while loading (os._exit or a crash); a "
                        f"reference must not exit{last}")
    if not answer.get("ok"):
        raise SpecError(str(answer.get("message")))
    accepts = answer.get("accepts")
    configs = answer["configs"]
    return ReferenceSummary(path=path, configs=configs, has_grid=bool(answer.get("has_grid")),
                            free_dims=tuple(answer.get("free_dims") or ()), small_config=answer.get("small_config"),
                            accepts=frozenset(accepts) if accepts is not None else None,
                            keys=sorted({k for c in configs for k in c}), warnings=list(answer.get("warnings") or []))


class _Lines:
    """The probe's stdout, read line by line against deadlines (``select``), so a hang is seen as one."""

    def __init__(self, proc: subprocess.Popen):
        self.fd, self.buf = proc.stdout.fileno(), b""

    def lines(self) -> list[str]:
        """The complete lines read so far."""
        return self.buf.decode(errors="replace").split("\n")[:-1]

    def read(self, want: int, timeout_s: float) -> int:
        """Read until ``want`` more complete lines arrived (returns ``want``) or the output closed (returns how many
        did); raises TimeoutError after ``timeout_s``."""
        have = self.buf.count(b"\n")
        deadline = time.monotonic() + timeout_s
        while self.buf.count(b"\n") < have + want:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if ready:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    break
                self.buf += chunk
        return self.buf.count(b"\n") - have


def _kill(proc: subprocess.Popen) -> None:
    """Kill the probe's whole session (the reference may have started processes), reap it, close its pipes."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def main(path: str) -> None:
    """The probe process: "ready" once torch is imported, then the answer (one JSON line), on the original stdout;
    the reference's prints go to stderr."""
    answer_to = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    import tileagent.evaluator.spec  # noqa: F401 - torch and the evaluator, before the reference's clock starts

    answer_to.write("ready\n")
    answer_to.flush()
    answer = _probe(Path(path))
    answer_to.write(json.dumps(answer, default=repr) + "\n")
    answer_to.flush()
    sys.stderr.flush()
    os._exit(0)  # skip the reference's atexit handlers and threads


if __name__ == "__main__":
    main(sys.argv[1])


__all__ = ["REFERENCE_TIMEOUT_S", "ReferenceSummary", "probe_reference"]
