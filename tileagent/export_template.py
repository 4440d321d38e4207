"""The exported module's text: its runtime (real code here, copied verbatim into each export) and ``render``.

In: what ``tileagent.export.export_module`` derived from the reference and the entries (names, shape patterns,
constructor arguments, sources, header text).
Out: ``render(...)``: the text of a standalone ``<name>_tileagent.py``.
Guarantees: the runtime section (between the ``runtime`` markers below) imports only the standard library and
torch; the exported module adds ``compiler.runtime.nvrtc`` (for shipped cubins) and, through the embedded candidates,
``tileagent``/``compiler`` -- never the agent, the drafters or the evaluator. Embedded sources round-trip exactly
(checked with ``ast.literal_eval``).
"""

from __future__ import annotations

import ast
from pathlib import Path

# --- runtime: begin (copied into every exported module)
import inspect
import linecache
import sys
import types
import warnings

import torch


def exec_source(source: str, module_name: str, filename: str) -> types.ModuleType:
    """Execute ``source`` as a fresh module registered as ``module_name``; ``filename`` is put in linecache so that
    the DSL frontend (which reads kernels' source) and tracebacks see the text."""
    module = types.ModuleType(module_name)
    module.__file__ = filename
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    sys.modules[module_name] = module  # dataclasses and inspect look modules up by name
    exec(compile(source, filename, "exec"), module.__dict__)  # noqa: S102 - the embedded, exported source
    return module


def init_key(cls, args, kwargs) -> str:
    """A canonical text for constructor arguments: bound to ``cls.__init__``'s signature with defaults applied."""
    try:
        bound = inspect.signature(cls.__init__).bind(None, *args, **kwargs)
        bound.apply_defaults()
    except (TypeError, ValueError):
        return repr((tuple(args), dict(kwargs)))
    return repr(tuple(bound.arguments.items())[1:])


def shape_matches(pattern, shape) -> bool:
    """``pattern``: a shape whose None dims match any size."""
    return len(pattern) == len(shape) and all(p is None or p == s for p, s in zip(pattern, shape))


def describe_tensors(tensors) -> str:
    return ", ".join(f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')} on {t.device.type}" for t in tensors)


class ExportedOp:
    """The dispatcher behind an exported op: candidate kernels per config, the reference everywhere else.

    ``entries``: dicts with config, source (index into ``sources``), tunables, time_ms, init (init_key text), args
    (constructor arguments) and tensors (one (shape pattern, dtype name) per input, then per state tensor).
    """

    def __init__(self, name, module_name, reference_source, sources, entries, devices, n_inputs, state_names,
                 n_outputs, cast_dtype=None):
        self.name, self.module_name, self.sources, self.entries = name, module_name, sources, entries
        self.devices, self.n_inputs, self.state_names, self.n_outputs = tuple(devices), n_inputs, state_names, n_outputs
        self.cast_dtype = getattr(torch, cast_dtype) if cast_dtype else None
        self.reference = exec_source(reference_source, f"{module_name}._reference", f"<{name}_tileagent reference>")
        self.namespaces: dict = {}  # (source index, tunables text) -> candidate module, tunables assigned
        self._models: dict = {}  # (entry index, device) -> ModelNew instance
        self._references: dict = {}  # (init text, device) -> reference Model instance
        self._inits = {e["init"]: (tuple(e["args"]), {}) for e in entries}  # init text -> (args, kwargs)
        self._warned: set = set()

    # -- constructor arguments ---------------------------------------------------------------------------------------

    def register_init(self, args, kwargs) -> str:
        """The init text of a Model built with (args, kwargs), remembered to build reference instances later."""
        key = init_key(self.reference.Model, args, kwargs)
        self._inits.setdefault(key, (tuple(args), dict(kwargs)))
        return key

    def _resolve_init(self, tensors) -> str | None:
        """For a direct call (no init given): the first entry's init whose tensors match, else whose state matches."""
        for k in (self.match(tensors, None), self._match_state(tensors)):
            if k is not None:
                return self.entries[k]["init"]
        return None

    # -- dispatch ----------------------------------------------------------------------------------------------------

    def match(self, tensors, init) -> int | None:
        """The index of the first entry covering these tensors (shapes, dtypes, device) and init text, or None."""
        if not tensors or tensors[0].device.type not in self.devices:
            return None
        if any(t.device != tensors[0].device for t in tensors):
            return None
        for k, entry in enumerate(self.entries):
            if init is not None and entry["init"] != init:
                continue
            if len(entry["tensors"]) == len(tensors) and all(
                    shape_matches(shape, t.shape) and dtype == str(t.dtype).removeprefix("torch.")
                    for (shape, dtype), t in zip(entry["tensors"], tensors)):
                return k
        return None

    def _match_state(self, tensors) -> int | None:
        state = tensors[self.n_inputs:]
        for k, entry in enumerate(self.entries):
            pats = entry["tensors"][self.n_inputs:]
            if len(pats) == len(state) and all(shape_matches(s, t.shape) for (s, _), t in zip(pats, state)):
                return k
        return None

    def namespace(self, k: int) -> types.ModuleType:
        """Entry ``k``'s candidate module: its source executed once per distinct tunables, tunables assigned."""
        entry = self.entries[k]
        key = (entry["source"], repr(sorted(entry["tunables"].items())))
        if key not in self.namespaces:
            n = len(self.namespaces)
            module = exec_source(self.sources[entry["source"]], f"{self.module_name}._candidate_{n}",
                                 f"<{self.name}_tileagent candidate {entry['source']}.{n}>")
            for name, value in entry["tunables"].items():
                setattr(module, name, value)
            self.namespaces[key] = module
        return self.namespaces[key]

    def candidate(self, k: int, device) -> torch.nn.Module:
        """Entry ``k``'s ModelNew(*args) on ``device`` (cached); the call passes the weights."""
        key = (k, str(device))
        if key not in self._models:
            model = self.namespace(k).ModelNew(*self.entries[k]["args"]).to(device)
            if self.cast_dtype is not None:
                for t in list(model.parameters()) + list(model.buffers()):
                    if t.is_floating_point():
                        t.data = t.data.to(self.cast_dtype)
            self._models[key] = model.eval()
        return self._models[key]

    def __call__(self, inputs, state, init: str):
        """The op's real implementation."""
        tensors = [*inputs, *state]
        init = init or self._resolve_init(tensors)
        k = self.match(tensors, init)
        if k is None:
            return self.fallback(inputs, state, init)
        model = self.candidate(k, tensors[0].device)
        own = model.state_dict(keep_vars=True)
        params = {n: t for n, t in zip(self.state_names, state) if n in own and own[n].shape == t.shape}
        with torch.no_grad():
            out = torch.func.functional_call(model, params, tuple(inputs))
        return self._outputs(out, tensors)

    def fallback(self, inputs, state, init):
        """The reference's forward, with a one-time warning per (shapes, dtypes, device, init)."""
        tensors = [*inputs, *state]
        if init is None:
            raise RuntimeError(f"tileagent::{self.name}: no exported config matches {describe_tensors(tensors)} and "
                               f"the constructor arguments cannot be told from them; call through Model(...) or pass "
                               f"init=<the Model's constructor arguments as Model(...) binds them>")
        what = (describe_tensors(tensors), init)
        if what not in self._warned:
            self._warned.add(what)
            covered = "; ".join(f"{e['config']} on {'/'.join(self.devices)}" for e in self.entries)
            warnings.warn(f"tileagent::{self.name}: no generated kernel for inputs {describe_tensors(inputs)} "
                          f"(constructor {init}); running the PyTorch reference. Covered configs: {covered}",
                          RuntimeWarning, stacklevel=4)
        model = self._reference_model(init, tensors[0].device)
        with torch.no_grad():
            out = torch.func.functional_call(model, dict(zip(self.state_names, state)), tuple(inputs))
        return self._outputs(out, tensors)

    def _reference_model(self, init: str, device) -> torch.nn.Module:
        key = (init, str(device))
        if key not in self._references:
            args, kwargs = self._inits[init]
            self._references[key] = self.reference.Model(*args, **kwargs).to(device).eval()
        return self._references[key]

    def _outputs(self, out, tensors):
        outs = (out,) if isinstance(out, torch.Tensor) else tuple(out)
        if len(outs) != self.n_outputs:
            raise RuntimeError(f"tileagent::{self.name}: expected {self.n_outputs} output(s), got {len(outs)}")
        storages = {t.untyped_storage().data_ptr() for t in tensors}
        fixed = []
        for o in outs:  # a custom op's outputs may not alias its inputs and are returned contiguous
            if o.untyped_storage().data_ptr() in storages or not o.is_contiguous():
                o = o.clone(memory_format=torch.contiguous_format)
            fixed.append(o)
        return fixed[0] if self.n_outputs == 1 else tuple(fixed)

    def fake(self, inputs, state, init: str):
        """The op's fake implementation: the reference's forward on meta weights, outputs as fresh tensors."""
        tensors = [*inputs, *state]
        init = init or self._resolve_init(tensors) or self.entries[0]["init"]
        args, kwargs = self._inits.get(init, (tuple(self.entries[0]["args"]), {}))
        with torch.device("meta"):
            model = self.reference.Model(*args, **kwargs)
        out = torch.func.functional_call(model, dict(zip(self.state_names, state)), tuple(inputs))
        outs = (out,) if isinstance(out, torch.Tensor) else tuple(out)
        fresh = [torch.empty(o.shape, dtype=o.dtype, device=tensors[0].device) for o in outs]
        return fresh[0] if self.n_outputs == 1 else tuple(fresh)


# --- runtime: end


def runtime_source() -> str:
    """The runtime section of this file, as it is copied into exported modules."""
    text = Path(__file__).read_text()
    begin = text.index("# --- runtime: begin")
    end = text.index("# --- runtime: end")
    body = text[text.index("\n", begin) + 1:end].rstrip() + "\n"
    return body


def literal(value) -> str:
    """``value`` as Python source that ``ast.literal_eval`` reads back equal; a str becomes a raw triple-quoted
    block when that is exact (readable embedded sources), else its repr."""
    if isinstance(value, str) and "\n" in value:
        text = "r'''" + value + "'''"
        if "'''" not in value and not value.endswith("\\") and "\r" not in value:
            try:
                if ast.literal_eval(text) == value:
                    return text
            except (SyntaxError, ValueError):
                pass
    text = repr(value)
    if ast.literal_eval(text) != value:
        raise ValueError(f"cannot embed {type(value).__name__} {text[:80]} as a Python literal")
    return text


def render(*, name: str, header: str, reference_source: str, sources: list[str], entries: list[dict],
           devices: tuple, input_names: list[str], state_names: list[str], arg_names: list[str], n_outputs: int,
           cast_dtype: str | None, cubin_dir: str) -> str:
    """The exported module's text. ``arg_names``: the op's Python argument names (inputs, then state tensors)."""
    ret = "Tensor" if n_outputs == 1 else "typing.Tuple[" + ", ".join(["Tensor"] * n_outputs) + "]"
    params = ", ".join(f"{a}: Tensor" for a in arg_names)
    n_in = len(input_names)
    ins = ", ".join(arg_names[:n_in]) + ("," if n_in == 1 else "")
    sts = ", ".join(arg_names[n_in:]) + ("," if len(arg_names) - n_in == 1 else "")
    entry_lines = "\n".join(f"    {literal(e)}," for e in entries)
    source_lines = "\n".join(f"    # --- candidate source {k}\n    {literal(s)}," for k, s in enumerate(sources))
    fwd_args = ", ".join(input_names)
    return f'''{header}
import typing
from pathlib import Path

{runtime_source()}
from torch import Tensor, nn

OP_NAME = {name!r}
DEVICES = {tuple(devices)!r}
INPUT_NAMES = {input_names!r}
STATE_NAMES = {state_names!r}  # the Model's state_dict keys, in order: the op's arguments after the inputs

# --- the reference (for the fallback and the fake implementation)
REFERENCE_SOURCE = {literal(reference_source)}

# --- candidate sources, each once; entries point at them by index
SOURCES = [
{source_lines}
]

# --- one entry per exported config: tensors are (shape with None for free dims, dtype) per input, then per state
ENTRIES = [
{entry_lines}
]

CUBIN_DIR = Path(__file__).resolve().with_name({cubin_dir!r})
if CUBIN_DIR.is_dir():  # prebuilt cubins, one folder per arch: loading on that arch skips NVRTC
    from tileagent.compiler.runtime import nvrtc as _nvrtc

    for _arch_dir in sorted(CUBIN_DIR.iterdir()):
        if _arch_dir.is_dir():
            _nvrtc.add_cubin_dir(_arch_dir)

_EXPORT = ExportedOp(OP_NAME, __name__, REFERENCE_SOURCE, SOURCES, ENTRIES, DEVICES, {n_in}, STATE_NAMES, {n_outputs},
                     {cast_dtype!r})


@torch.library.custom_op("tileagent::{name}", mutates_args=())
def {name}({params}, init: str = "") -> {ret}:
    """The exported op: generated kernels for covered configs, the reference otherwise."""
    return _EXPORT(({ins}), ({sts}), init)


@{name}.register_fake
def _{name}_fake({", ".join(arg_names)}, init=""):
    return _EXPORT.fake(({ins}), ({sts}), init)


class Model(_EXPORT.reference.Model):
    """Drop-in replacement of the reference Model: same constructor and state_dict; forward calls the op."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._tileagent_init = _EXPORT.register_init(args, kwargs)

    def forward(self, {fwd_args}):
        named = dict(self.named_parameters(remove_duplicate=False))
        named.update(self.named_buffers(remove_duplicate=False))
        if any(n not in named for n in STATE_NAMES):  # weights unlike the exported configs': the reference
            return super().forward({fwd_args})
        return torch.ops.tileagent.{name}({fwd_args}, *[named[n] for n in STATE_NAMES], init=self._tileagent_init)


__all__ = ["Model", "OP_NAME", "{name}"]
'''
