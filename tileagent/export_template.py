"""The exported module's text: its dispatcher (real code here, copied verbatim into each export) and ``render``.

In: what ``tileagent.export.export_module`` derived from the reference and the entries (names, shape patterns,
constructor arguments, candidate sources, kernel descriptors, header text).
Out: ``render(...)``: the text of a standalone ``<name>_tileagent.py``: the kernel runtime
(``tileagent/export_runtime.py``'s runtime section), then this file's runtime section (``ExportedOp``: dispatch,
fallback, fake, autograd; the ``tileagent`` stand-ins that candidates' host code imports), then the data and the op.
Guarantees: both runtime sections import only the standard library and torch (cuda-python lazily, to launch), so
the exported module never imports ``tileagent``; embedded sources round-trip exactly (``literal`` checks them with
``ast.literal_eval``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tileagent.export_runtime import ArgumentError, KernelUnavailable, load

# --- runtime: begin (copied into every exported module, after tileagent/export_runtime.py's runtime)
import builtins
import inspect
import linecache
import sys
import types
import warnings

import torch


def call_key(args, kwargs) -> str:
    """The text that identifies a ``@jit`` factory call (its compile-time arguments)."""
    return repr((tuple(args), tuple(sorted(kwargs.items()))))


_DTYPE_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2")


class _Anything:
    """Stands for the DSL in a candidate's host code: kernel bodies are never traced here (their CUDA is shipped)."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Anything(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:  # used as a decorator: keep the function
            return args[0]
        return _Anything(f"{self._name}(...)")

    def __repr__(self) -> str:
        return self._name


def stub_tileagent(lookup) -> dict:
    """Stand-ins for ``tileagent`` and ``tileagent.language`` in an exported candidate: ``@tileagent.jit`` factories
    return the exported kernels through ``lookup(factory name, call key, args)``; dtype names (``T.float16``) are
    their strings; anything else of the DSL is inert (only kernel bodies, which never run here, use it)."""
    language = types.ModuleType("tileagent.language")
    language.__getattr__ = lambda attr: attr if attr in _DTYPE_NAMES else _Anything(f"T.{attr}")
    top = types.ModuleType("tileagent")

    class Factory:
        def __init__(self, fn):
            self.__name__ = self.name = fn.__name__
            self.__wrapped__ = fn

        def __call__(self, *args, **kwargs):
            return lookup(self.name, call_key(args, kwargs), args, kwargs)

    def jit(func=None, **options):
        return Factory(func) if func is not None else Factory

    def compile(*args, **kwargs):  # noqa: A001 - tileagent.compile
        raise KernelUnavailable("the candidate calls tileagent.compile directly; only @tileagent.jit factories "
                                "are exported")

    top.jit, top.compile, top.language = jit, compile, language
    top.__getattr__ = lambda attr: _Anything(f"tileagent.{attr}")
    return {"tileagent": top, "tileagent.language": language}


def exec_source(source: str, module_name: str, filename: str, stubs: dict | None = None) -> types.ModuleType:
    """Execute ``source`` as a fresh module registered as ``module_name``; ``filename`` is put in linecache so that
    tracebacks (and the DSL frontend, which reads kernels' source) see the text. With ``stubs`` (module name ->
    module), ``import`` of those names inside the source gets the stubs instead (nothing global changes)."""
    module = types.ModuleType(module_name)
    module.__file__ = filename
    if stubs:
        real_import = builtins.__import__

        def hooked(name, globals=None, locals=None, fromlist=(), level=0):
            if level == 0 and name.split(".")[0] in {n.split(".")[0] for n in stubs}:
                if name not in stubs:
                    raise ImportError(f"an exported candidate can import only {', '.join(stubs)}, not {name}")
                return stubs[name] if fromlist else stubs[name.split(".")[0]]
            return real_import(name, globals, locals, fromlist, level)

        module.__dict__["__builtins__"] = {**builtins.__dict__, "__import__": hooked}
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    sys.modules[module_name] = module  # dataclasses and inspect look modules up by name
    exec(compile(source, filename, "exec"), module.__dict__)  # noqa: S102 - the embedded, exported source
    return module


def shape_matches(pattern, shape) -> bool:
    """``pattern``: a shape whose None dims match any size."""
    return len(pattern) == len(shape) and all(p is None or p == s for p, s in zip(pattern, shape))


def _shape_text(pattern) -> str:
    return "(" + ", ".join("*" if d is None else str(d) for d in pattern) + ("," if len(pattern) == 1 else "") + ")"


def _dtype_name(t) -> str:
    return str(t.dtype).removeprefix("torch.")


class ExportedOp:
    """The dispatcher behind an exported op: exported kernels per config, the reference everywhere else.

    ``entries``: dicts with config, source (index into ``sources``), tunables, time_ms, init (the constructor's
    arguments in ``init_params`` order), args (what ModelNew is built with), tensors (one (shape pattern, dtype name)
    per input, then per state tensor) and kernels ({factory name: {call key: index into ``kernels``}}).
    ``init_params``: (op argument name, constructor parameter name, positional?) per constructor argument.
    """

    def __init__(self, name, module_name, reference_source, sources, entries, kernels, devices, input_names,
                 state_names, arg_names, init_params, n_outputs, cast_dtype=None, cubin_dir=None):
        self.name, self.module_name, self.sources, self.entries = name, module_name, sources, entries
        self.kernel_descriptors, self.cubin_dir = kernels, cubin_dir
        self.devices, self.n_inputs, self.state_names = tuple(devices), len(input_names), list(state_names)
        self.arg_names, self.init_params, self.n_outputs = list(arg_names), list(init_params), n_outputs
        self.n_tensors = self.n_inputs + len(self.state_names)
        self.cast_dtype = getattr(torch, cast_dtype) if cast_dtype else None
        self.reference = exec_source(reference_source, f"{module_name}._reference", f"<{name}_tileagent reference>")
        self.namespaces: dict = {}  # (source index, tunables text) -> candidate module, tunables assigned
        self._kernels: dict = {}  # index -> runtime Kernel
        self._models: dict = {}  # (entry index, device) -> ModelNew instance
        self._references: dict = {}  # (init text, device) -> reference Model instance
        self._warned: set = set()
        self.fallbacks: dict = {}  # reason -> calls that ran the reference for it

    # -- constructor arguments ---------------------------------------------------------------------------------------

    def init_values(self, args, kwargs) -> tuple:
        """The constructor arguments of ``Model(*args, **kwargs)`` as the op takes them (defaults applied)."""
        bound = inspect.signature(self.reference.Model.__init__).bind(None, *args, **kwargs)
        bound.apply_defaults()
        return tuple(list(v) if isinstance(v, tuple) else v
                     for v in (bound.arguments[param] for _, param, _ in self.init_params))

    def _model_args(self, init) -> tuple:
        args = [v for (_, _, positional), v in zip(self.init_params, init) if positional]
        kwargs = {param: v for (_, param, positional), v in zip(self.init_params, init) if not positional}
        return args, kwargs

    # -- dispatch ----------------------------------------------------------------------------------------------------

    def match(self, tensors, init):
        """(index of the first entry serving these tensors and constructor arguments, None) or (None, why not)."""
        if not tensors:
            return None, "the call has no tensor arguments"
        first = tensors[0].device
        for name, t in zip(self.arg_names, tensors):
            if t.device.type not in self.devices:
                return None, f"{name} is on {t.device.type}; the kernels run on {'/'.join(self.devices)}"
            if t.device != first:
                return None, f"{name} is on {t.device} and {self.arg_names[0]} on {first}"
        alive = list(range(len(self.entries)))
        for i, (name, t) in enumerate(zip(self.arg_names, tensors)):
            pats = {k: self.entries[k]["tensors"][i] for k in alive}
            keep = [k for k in alive if pats[k][1] == _dtype_name(t) and shape_matches(pats[k][0], t.shape)]
            if keep:
                alive = keep
                continue
            if not any(d == _dtype_name(t) for _, d in pats.values()):
                have = ", ".join(sorted({d for _, d in pats.values()}))
                return None, f"{name} has dtype {_dtype_name(t)}; the kernels take {have}"
            have = ", ".join(dict.fromkeys(_shape_text(s) for s, d in pats.values() if d == _dtype_name(t)))
            return None, f"{name} has shape {_shape_text(tuple(t.shape))}; the kernels take {have} (* is any size)"
        for j, (arg, _, _) in enumerate(self.init_params):
            keep = [k for k in alive if self.entries[k]["init"][j] == init[j]]
            if not keep:
                have = ", ".join(dict.fromkeys(repr(self.entries[k]["init"][j]) for k in alive))
                return None, f"{arg}={init[j]!r}; the kernels were exported for {arg} in {{{have}}}"
            alive = keep
        return alive[0], None

    def kernel(self, index: int):
        if index not in self._kernels:
            self._kernels[index] = load(self.kernel_descriptors[index], self.cubin_dir)
        return self._kernels[index]

    def namespace(self, k: int) -> types.ModuleType:
        """Entry ``k``'s candidate module (executed once per distinct source and tunables, tunables assigned), its
        ``@tileagent.jit`` factories returning the exported kernels of every entry that shares it."""
        entry = self.entries[k]
        key = (entry["source"], repr(sorted(entry["tunables"].items())))
        if key not in self.namespaces:
            table: dict = {}
            for e in self.entries:
                if (e["source"], repr(sorted(e["tunables"].items()))) == key:
                    for factory, calls in e["kernels"].items():
                        table.setdefault(factory, {}).update(calls)

            def lookup(factory, call, args, kwargs):
                if call not in table.get(factory, {}):
                    text = ", ".join([repr(a) for a in args] + [f"{n}={v!r}" for n, v in kwargs.items()])
                    raise KernelUnavailable(f"the candidate asked for {factory}({text}), a kernel that was not "
                                            f"exported (its arguments depend on sizes the export did not see)")
                return self.kernel(table[factory][call])

            n = len(self.namespaces)
            module = exec_source(self.sources[entry["source"]], f"{self.module_name}._candidate_{n}",
                                 f"<{self.name}_tileagent candidate {entry['source']}.{n}>", stub_tileagent(lookup))
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

    def __call__(self, args):
        """The op's real implementation: ``args`` as the op got them (inputs, state tensors, constructor args)."""
        inputs, state = list(args[:self.n_inputs]), list(args[self.n_inputs:self.n_tensors])
        init = tuple(args[self.n_tensors:])
        k, reason = self.match([*inputs, *state], init)
        if k is None:
            return self.fallback(inputs, state, init, reason)
        # the kernels take dense row-major tensors whose data starts 16-byte aligned: copy the others (strided views,
        # offset views)
        inputs, state = ([t if t.is_contiguous() and t.data_ptr() % 16 == 0 else t.clone(
            memory_format=torch.contiguous_format) for t in ts] for ts in (inputs, state))
        try:
            model = self.candidate(k, inputs[0].device if inputs else state[0].device)
            own = model.state_dict(keep_vars=True)
            params = {n: t for n, t in zip(self.state_names, state) if n in own and own[n].shape == t.shape}
            with torch.no_grad():
                out = torch.func.functional_call(model, params, tuple(inputs))
        except (KernelUnavailable, ArgumentError) as e:
            return self.fallback(inputs, state, init, str(e))
        return self._outputs(out, [*inputs, *state])

    def fallback(self, inputs, state, init, reason: str):
        """The reference's forward, with one RuntimeWarning per reason."""
        self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1
        if reason not in self._warned:
            self._warned.add(reason)
            warnings.warn(f"tileagent::{self.name}: running the PyTorch reference: {reason}", RuntimeWarning,
                          stacklevel=4)
        tensors = [*inputs, *state]
        model = self._reference_model(init, tensors[0].device)
        with torch.no_grad():
            out = torch.func.functional_call(model, dict(zip(self.state_names, state)), tuple(inputs))
        return self._outputs(out, tensors)

    def _reference_model(self, init, device) -> torch.nn.Module:
        key = (repr(init), str(device))
        if key not in self._references:
            args, kwargs = self._model_args(init)
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

    # -- tracing and autograd ----------------------------------------------------------------------------------------

    def reference_forward(self, tensors, init):
        """The reference's forward on ``tensors`` (inputs then state) through a Model built on the meta device."""
        args, kwargs = self._model_args(init)
        with torch.device("meta"):
            model = self.reference.Model(*args, **kwargs)
        inputs, state = tuple(tensors[:self.n_inputs]), tensors[self.n_inputs:]
        out = torch.func.functional_call(model, dict(zip(self.state_names, state)), inputs)
        return (out,) if isinstance(out, torch.Tensor) else tuple(out)

    def fake(self, args):
        """The op's fake implementation: the reference's forward on meta weights, outputs as fresh tensors."""
        tensors, init = list(args[:self.n_tensors]), tuple(args[self.n_tensors:])
        outs = self.reference_forward(tensors, init)
        fresh = [torch.empty(o.shape, dtype=o.dtype, device=tensors[0].device) for o in outs]
        return fresh[0] if self.n_outputs == 1 else tuple(fresh)

    def setup_context(self, ctx, inputs, output) -> None:
        ctx.save_for_backward(*inputs[:self.n_tensors])
        ctx.tileagent_init = tuple(inputs[self.n_tensors:])
        outs = (output,) if isinstance(output, torch.Tensor) else tuple(output)
        ctx.tileagent_outputs = [(o.shape, o.dtype) for o in outs]

    def backward(self, ctx, grads):
        """The op's backward formula: the backward op (``tileagent::<name>_backward``, whose implementation runs the
        reference's own autograd eagerly and whose fake gives the gradients' shapes, so tracers never enter it) on
        the saved inputs; None for arguments that need no gradient."""
        tensors, init = list(ctx.saved_tensors), ctx.tileagent_init
        needed = [ctx.needs_input_grad[i] and t.is_floating_point() for i, t in enumerate(tensors)]
        if not any(needed):
            return (None,) * (self.n_tensors + len(init))
        grads = [g if g is not None else torch.zeros(shape, dtype=dtype, device=tensors[0].device)
                 for g, (shape, dtype) in zip(grads, ctx.tileagent_outputs)]
        backward_op = getattr(torch.ops.tileagent, f"{self.name}_backward")
        out = backward_op(grads, *tensors, *init)
        return tuple(g if need else None for g, need in zip(out, needed)) + (None,) * len(init)

    def reference_grads(self, grads, args) -> list:
        """Gradients of every tensor argument (zeros where none flows) for the output gradients ``grads``: the
        reference's own autograd (``torch.func.vjp``) on ``args`` (tensors, then constructor values)."""
        tensors, init = list(args[:self.n_tensors]), tuple(args[self.n_tensors:])
        want = [i for i, t in enumerate(tensors) if t.is_floating_point()]
        floating: list = []  # whether each output of the reference is differentiable

        def forward(*diff):
            ts = list(tensors)
            for i, d in zip(want, diff):
                ts[i] = d
            outs = self.reference_forward(ts, init)
            floating[:] = [o.is_floating_point() for o in outs]
            return tuple(o for o, f in zip(outs, floating) if f)

        with torch.enable_grad():
            outs, vjp = torch.func.vjp(forward, *[tensors[i] for i in want])
        cotangents = tuple(g.to(o.dtype) for g, o in zip([g for g, f in zip(grads, floating) if f], outs))
        result = [torch.zeros_like(t) for t in tensors]
        for i, g in zip(want, vjp(cotangents)):
            result[i] = g
        return result

    def grads_fake(self, args) -> list:
        """The backward op's fake implementation: one gradient per tensor argument, shaped like it."""
        return [torch.empty_like(t) for t in args[:self.n_tensors]]


# --- runtime: end


def runtime_source(path: Path | None = None) -> str:
    """The runtime section of ``path`` (default this file), as it is copied into exported modules."""
    text = (path or Path(__file__)).read_text()
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
           kernels: list[dict], devices: tuple, input_names: list[str], state_names: list[str], arg_names: list[str],
           init_params: list[dict], n_outputs: int, cast_dtype: str | None, cubin_dir: str) -> str:
    """The exported module's text.

    ``arg_names``: the op's tensor argument names (inputs, then state tensors); ``init_params``: one dict per
    constructor argument (``arg``: the op's argument name, ``param``: the constructor's, ``positional``, ``type``: its
    annotation text, ``default``: present when the constructor has one)."""
    ret = "Tensor" if n_outputs == 1 else "typing.Tuple[" + ", ".join(["Tensor"] * n_outputs) + "]"
    sig = [f"{a}: Tensor" for a in arg_names]
    plain = list(arg_names)
    for p in init_params:
        default = f" = {literal(p['default'])}" if "default" in p else ""
        sig.append(f"{p['arg']}: {p['type']}{default}")
        plain.append(p["arg"] + (f"={literal(p['default'])}" if "default" in p else ""))
    every = ", ".join(arg_names + [p["arg"] for p in init_params])
    entry_lines = "\n".join(f"    {literal(e)}," for e in entries)
    kernel_lines = "\n".join(f"    {literal(k)}," for k in kernels)
    source_lines = "\n".join(f"    # --- candidate source {k}\n    {literal(s)}," for k, s in enumerate(sources))
    fwd_args = ", ".join(input_names)
    init_rows = [(p["arg"], p["param"], p["positional"]) for p in init_params]
    return f"""{header}
import typing
from pathlib import Path

{runtime_source(Path(__file__).with_name("export_runtime.py"))}

{runtime_source()}
from torch import Tensor, nn

OP_NAME = {name!r}
DEVICES = {tuple(devices)!r}
INPUT_NAMES = {input_names!r}
STATE_NAMES = {state_names!r}  # the Model's state_dict keys, in order: the op's tensor arguments after the inputs
ARG_NAMES = {arg_names!r}  # the op's tensor arguments
INIT_PARAMS = {init_rows!r}  # (op argument, constructor parameter, positional?) per constructor argument

# --- the reference (for the fallback, the fake implementation and the backward)
REFERENCE_SOURCE = {literal(reference_source)}

# --- candidate sources (their host code), each once; entries point at them by index
SOURCES = [
{source_lines}
]

# --- the kernels the candidates launch at the exported configs (CUDA C++ and launch descriptions, for the runtime)
KERNELS = [
{kernel_lines}
]

# --- one entry per exported config: tensors are (shape with None for free dims, dtype) per input, then per state
ENTRIES = [
{entry_lines}
]

CUBIN_DIR = Path(__file__).resolve().with_name({cubin_dir!r})  # prebuilt cubins: <arch>/<kernel id>.cubin

_EXPORT = ExportedOp(OP_NAME, __name__, REFERENCE_SOURCE, SOURCES, ENTRIES, KERNELS, DEVICES, INPUT_NAMES, STATE_NAMES,
                     ARG_NAMES, INIT_PARAMS, {n_outputs}, {cast_dtype!r}, CUBIN_DIR if CUBIN_DIR.is_dir() else None)


@torch.library.custom_op("tileagent::{name}", mutates_args=())
def {name}({", ".join(sig)}) -> {ret}:
    \"\"\"The exported op: the exported kernels for covered configs, the reference otherwise.\"\"\"
    return _EXPORT(({every},))


@{name}.register_fake
def _{name}_fake({", ".join(plain)}):
    return _EXPORT.fake(({every},))


def _{name}_setup_context(ctx, inputs, output):
    _EXPORT.setup_context(ctx, inputs, output)


def _{name}_backward(ctx, *grads):
    return _EXPORT.backward(ctx, grads)


@torch.library.custom_op("tileagent::{name}_backward", mutates_args=())
def {name}_backward(grads: typing.List[Tensor], {", ".join(sig)}) -> typing.List[Tensor]:
    \"\"\"Gradients of the op's tensor arguments: the reference's own autograd, run eagerly (tracers see the fake).\"\"\"
    return _EXPORT.reference_grads(grads, ({every},))


@{name}_backward.register_fake
def _{name}_backward_fake(grads, {", ".join(plain)}):
    return _EXPORT.grads_fake(({every},))


{name}.register_autograd(_{name}_backward, setup_context=_{name}_setup_context)


class Model(_EXPORT.reference.Model):
    \"\"\"Drop-in replacement of the reference Model: same constructor and state_dict; forward calls the op.\"\"\"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._tileagent_init = _EXPORT.init_values(args, kwargs)

    def forward(self, {fwd_args}):
        named = dict(self.named_parameters(remove_duplicate=False))
        named.update(self.named_buffers(remove_duplicate=False))
        if any(n not in named for n in STATE_NAMES):  # weights unlike the exported configs': the reference
            return super().forward({fwd_args})
        return torch.ops.tileagent.{name}({fwd_args}, *[named[n] for n in STATE_NAMES], *self._tileagent_init)


__all__ = ["Model", "OP_NAME", "RUNTIME_VERSION", "{name}"]
"""
