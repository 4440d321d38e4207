"""Export verified kernels as a drop-in module: one ``torch.library`` custom op that dispatches per config.

In: the reference file (KernelBench format + config grid, ``evaluator.spec``) and ``ExportEntry`` records (a config,
the candidate module's source, its autotuned TUNABLES values, its time).
Out: ``export_module(...)`` writes ``<out_dir>/<name>_tileagent.py`` (and ``<name>_tileagent_cubins/<arch>/*.cubin``:
the cubins of kernels built here for a CUDA device, and with ``prebuild_arches`` NVRTC's for those arches) and returns
the module's path. docs/export.md describes the module.
Guarantees:

- The written module imports torch, the standard library, and (through the embedded candidates and for shipped
  cubins) ``tileagent``/``compiler`` only: never the loop, the drafters or the evaluator.
- Each distinct candidate source is embedded once; the reference is embedded for the fallback and the fake.
- An entry covers the exact shapes and dtypes of ``get_inputs(config)`` and of the Model's state_dict, except dims
  that change when a FREE_DIMS key of the config changes (wildcards), with the constructor arguments of
  ``get_init_inputs(config)``; a call matching no entry runs the reference with one warning per kind of call.
- Problems with the reference or the entries raise ``ExportError`` before anything is written; the module is
  written atomically and is syntax-checked first.
"""

from __future__ import annotations

import ast
import datetime
import hashlib
import inspect
import keyword
import logging
import zlib
from pathlib import Path

import torch
from pydantic import BaseModel, Field

from tileagent.compiler import python_ast
from tileagent.evaluator.spec import Spec, cast_floating, load_spec
from tileagent.export_runtime import RUNTIME_VERSION, cubin_file_bytes
from tileagent.export_template import call_key, literal, render
from tileagent.runstore import write_atomic

VARIANT_ARCHES = ("sm_80", "sm_86", "sm_89", "sm_90a")  # every kernel is lowered for each (a variant where it differs)

log = logging.getLogger("tileagent.export")


class ExportError(ValueError):
    """The reference or the entries cannot be exported (the message says which and why)."""


class ExportEntry(BaseModel):
    """One covered config and the kernel that serves it."""

    config: dict = Field(description="a config of the spec's grid, e.g. {'M': 16384, 'C': 320}")
    source: str = Field(description="the candidate module's text (defines class ModelNew)")
    tunables: dict = Field(default_factory=dict, description="UPPER_CASE module constant -> value, assigned after "
                                                             "the module runs and before ModelNew is used")
    time_ms: float | None = Field(default=None, description="the measured time of one call, for the header")


def export_module(reference_path, entries: list[ExportEntry], out_dir, name: str | None = None, *,
                  devices: tuple[str, ...] = ("cuda",), prebuild_arches: list[str] | tuple[str, ...] = ()) -> Path:
    """Write the drop-in module for ``entries`` of the reference at ``reference_path``; returns its path.

    Args:
        reference_path: the reference file (``tasks/rmsnorm_silu.py``).
        entries: the exported configs, most preferred first (the first match serves a call).
        out_dir: where ``<name>_tileagent.py`` is written (created if missing).
        name: the op's name (``torch.ops.tileagent.<name>``); default: the reference file's stem.
        devices: device types the kernels run on; other devices run the reference. ``("cuda", "cpu")`` also
            serves CPU tensors (the interpreter: slow, for tests).
        prebuild_arches: NVRTC archs (``"sm_90a"``) to compile every kernel the entries launch for, shipped in
            ``<name>_tileagent_cubins/<arch>/`` (needs NVRTC, no GPU). Kernels built here for a CUDA device (an
            export on a GPU machine, as ``generate`` does) ship the cubin they were built with in any case
            (``ship_built_cubins``).

    Raises:
        ExportError: no entries, a bad name, an entry whose source has no ModelNew or whose config the reference
            rejects, state_dict keys that differ between configs, constructor arguments that are not literals.
    """
    reference_path = Path(reference_path)
    name = name or reference_path.stem
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ExportError(f"op name {name!r} is not a Python identifier; pass name=")
    entries = [e if isinstance(e, ExportEntry) else ExportEntry.model_validate(e) for e in entries]
    if not entries:
        raise ExportError("nothing to export: no entries")
    try:
        spec = load_spec(reference_path, check=False)
    except Exception as e:
        raise ExportError(f"{reference_path}: {e}") from e
    init_params = _init_params(spec, entries)
    sources: dict[str, int] = {}
    kernels: dict[str, int] = {}  # descriptor id -> index
    descriptors: list[dict] = []
    built: dict[str, object] = {}  # descriptor id -> the JITKernel it describes
    rows = []
    for entry in entries:
        _check_candidate(entry)
        index = sources.setdefault(entry.source, len(sources))
        row = _entry_row(spec, entry, index, init_params)
        for factory, calls in record_kernels(spec, entry).items():
            for key, kernel in calls.items():
                d = kernel_descriptor(kernel, VARIANT_ARCHES)
                if d["id"] not in kernels:
                    kernels[d["id"]] = len(descriptors)
                    descriptors.append(d)
                    built[d["id"]] = kernel
                row["kernels"].setdefault(factory, {})[key] = kernels[d["id"]]
        rows.append(row)
    state_names = rows[0].pop("state_names")
    for row in rows[1:]:
        if row.pop("state_names") != state_names:
            raise ExportError(f"the Model's state_dict keys differ between configs {entries[0].config} and "
                              f"{row['config']}; export those configs separately")
    input_names = _forward_names(spec, len(rows[0]["tensors"]) - len(state_names))
    cast = str(spec.dtypes).removeprefix("torch.") if isinstance(spec.dtypes, torch.dtype) else None
    cubin_dir = f"{name}_tileagent_cubins"
    arg_names = _arg_names(input_names, state_names, name)
    taken = set(arg_names) | {name}
    for p in init_params:  # the op's argument names for the constructor's, distinct from the tensors'
        while p["arg"] in taken:
            p["arg"] += "_"
        taken.add(p["arg"])
    text = render(name=name, header=_header(name, reference_path, entries, input_names, arg_names, init_params,
                                            devices),
                  reference_source=reference_path.read_text(), sources=list(sources), entries=rows,
                  kernels=descriptors, devices=tuple(devices), input_names=input_names, state_names=state_names,
                  arg_names=arg_names, init_params=init_params, n_outputs=_n_outputs(spec, entries[0].config),
                  cast_dtype=cast, cubin_dir=cubin_dir)
    compile(text, f"{name}_tileagent.py", "exec")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if prebuild_arches:
        prebuild_cubins(descriptors, out_dir / cubin_dir, prebuild_arches)
    ship_built_cubins(built, out_dir / cubin_dir)
    path = out_dir / f"{name}_tileagent.py"
    write_atomic(path, text)
    log.info("exported %d config(s) of %s to %s", len(entries), reference_path.name, path)
    return path


# -- what an entry covers ----------------------------------------------------------------------------------------------


def _check_candidate(entry: ExportEntry) -> None:
    try:
        tree = python_ast.parse(entry.source)
    except SyntaxError as e:
        raise ExportError(f"the candidate for {entry.config} has a syntax error at line {e.lineno}: {e.msg}") from None
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        raise ExportError(f"the candidate for {entry.config} defines no class ModelNew")
    for key in entry.tunables:
        if not (isinstance(key, str) and key.isidentifier() and key.isupper()):
            raise ExportError(f"tunable {key!r} of {entry.config} is not an UPPER_CASE module constant")
        literal(entry.tunables[key])  # raises ValueError for values that cannot be embedded


def _bound_init(spec: Spec, config: dict) -> dict:
    """Model's constructor arguments at ``config``, bound to ``Model.__init__`` with defaults applied."""
    init = spec.init_inputs(config)
    try:
        literal(init)
    except ValueError:
        raise ExportError(f"get_init_inputs({config}) returned {init!r}: constructor arguments must be Python "
                          f"literals (numbers, strings, tuples, ...) to be embedded") from None
    try:
        bound = inspect.signature(spec.module.Model.__init__).bind(None, *init)
    except TypeError as e:
        raise ExportError(f"Model(*get_init_inputs({config})) does not fit Model.__init__: {e}") from None
    bound.apply_defaults()
    return dict(list(bound.arguments.items())[1:])


_SCALAR_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}


def _scalar_type(values: list, where: str) -> str:
    """The op schema's type of a constructor argument that takes ``values`` (one per entry)."""
    present = [v for v in values if v is not None]
    optional = len(present) < len(values)
    if present and all(isinstance(v, (list, tuple)) for v in present):
        inner = {_scalar_type(list(v), where) for v in present if len(v)}
        if len(inner) == 1 and inner <= {"int", "float", "bool"}:
            text = f"typing.List[{inner.pop()}]"
        elif inner == {"int", "float"}:
            text = "typing.List[float]"
        else:
            raise ExportError(f"{where} takes {present!r}: a list argument must hold ints, floats or bools")
    else:
        kinds = {_SCALAR_TYPES.get(type(v)) for v in present}
        if kinds == {"int", "float"}:
            kinds = {"float"}
        if len(kinds) != 1 or None in kinds:
            raise ExportError(f"{where} takes {values!r}: a constructor argument must be a bool, int, float, str or "
                              f"a list of numbers, one type for every config, to be an argument of the op")
        text = kinds.pop()
    return f"typing.Optional[{text}]" if optional else text


def _init_params(spec: Spec, entries: list[ExportEntry]) -> list[dict]:
    """The op's scalar arguments: one per parameter of ``Model.__init__`` (after self), typed from the entries'
    values, with the constructor's default when it has one."""
    sig = inspect.signature(spec.module.Model.__init__)
    bound = [_bound_init(spec, e.config) for e in entries]
    out = []
    for param in list(sig.parameters.values())[1:]:
        values = [b.get(param.name) for b in bound]
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            if any(values):  # nn.Module's own (*args, **kwargs) with nothing passed is fine
                raise ExportError(f"Model.__init__ passes {values[0]!r} through *{param.name}: name every "
                                  f"constructor parameter to export it")
            continue
        row = {"arg": param.name, "param": param.name, "positional": param.kind != param.KEYWORD_ONLY,
               "type": _scalar_type(values, f"Model.__init__'s parameter {param.name!r}")}
        if param.default is not param.empty:
            default = list(param.default) if isinstance(param.default, tuple) else param.default
            try:
                literal(default)
            except ValueError:
                raise ExportError(f"the default of Model.__init__'s parameter {param.name!r} is not a literal") from None
            if default is None and not row["type"].startswith("typing.Optional"):
                row["type"] = f"typing.Optional[{row['type']}]"
            row["default"] = default
        out.append(row)
    return out


def _entry_row(spec: Spec, entry: ExportEntry, source: int, init_params: list[dict]) -> dict:
    """The entry as the exported module stores it (plus ``state_names``, popped by the caller)."""
    config = entry.config
    init = spec.init_inputs(config)
    bound = _bound_init(spec, config)
    init_values = [list(v) if isinstance(v, tuple) else v for v in (bound[p["param"]] for p in init_params)]
    names, tensors = _tensors(spec, config)
    for key in spec.free_dims:
        if isinstance(config.get(key), int):
            other = _tensors(spec, {**config, key: config[key] + 3})[1]
            if [len(s) for s, _ in other] != [len(s) for s, _ in tensors]:
                raise ExportError(f"changing free dim {key!r} of {config} changes the rank of an input or weight")
            tensors = [(tuple(None if a != b else a for a, b in zip(s, o)), d) for (s, d), (o, _) in
                       zip(tensors, other)]
    try:
        time_ms = None if entry.time_ms is None else float(entry.time_ms)
        literal(config)
    except ValueError:
        raise ExportError(f"config {config!r} is not made of Python literals") from None
    return {"config": dict(config), "source": source, "tunables": dict(entry.tunables), "time_ms": time_ms,
            "init": init_values, "args": list(init), "tensors": tensors, "kernels": {}, "state_names": names}


def _tensors(spec: Spec, config: dict):
    """(state_dict keys, [(shape, dtype name)] for each input then each state tensor) at ``config``, built on the
    meta device where the reference allows it (else on the CPU)."""
    inputs = None
    try:
        inputs = spec.sample_inputs(config, 0, device="meta")
    except Exception as e:  # noqa: BLE001 - get_inputs did something meta tensors cannot: use real ones
        log.debug("get_inputs on meta failed (%s); using the CPU", e)
    if inputs is None:
        try:
            inputs = spec.sample_inputs(config, 0)
        except Exception as e:
            raise ExportError(str(e)) from e
    dtypes = [str(spec._input_dtype(k, t)).removeprefix("torch.") for k, t in enumerate(inputs)]  # DTYPES applied
    model = _model(spec, config)
    state = model.state_dict(keep_vars=True)
    shapes = [(tuple(t.shape), d) for t, d in zip(inputs, dtypes)]
    shapes += [(tuple(t.shape), str(t.dtype).removeprefix("torch.")) for t in state.values()]
    return list(state), shapes


def _model(spec: Spec, config: dict) -> torch.nn.Module:
    init = spec.init_inputs(config)
    try:
        with torch.device("meta"):
            model = spec.module.Model(*init)
    except Exception as e:  # noqa: BLE001 - the constructor needs real tensors
        log.debug("Model(*init) on meta failed (%s); using the CPU", e)
        try:
            model = spec.module.Model(*init)
        except Exception as e2:
            raise ExportError(f"Model(*get_init_inputs({config})) raised {type(e2).__name__}: {e2}") from e2
    if isinstance(spec.dtypes, torch.dtype):
        model = cast_floating(model, spec.dtypes)
    return model


def _n_outputs(spec: Spec, config: dict) -> int:
    """How many tensors the reference returns (run on meta tensors where possible, else on the CPU)."""
    for device in ("meta", "cpu"):
        try:
            with torch.device(device):
                model = spec.make_model(config, device) if device == "cpu" else _model(spec, config)
            inputs = spec.sample_inputs(config, 0, device=device)
            with torch.no_grad():
                out = model(*inputs)
            return 1 if isinstance(out, torch.Tensor) else len(out)
        except Exception as e:  # noqa: BLE001 - try the CPU next
            last = e
    raise ExportError(f"running the reference at {config} raised {type(last).__name__}: {last}")


def _forward_names(spec: Spec, n_inputs: int) -> list[str]:
    params = list(inspect.signature(spec.module.Model.forward).parameters.values())[1:]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < n_inputs:
        raise ExportError(f"Model.forward takes {len(positional)} positional argument(s) but get_inputs() gives "
                          f"{n_inputs}; name every input in forward's signature")
    return [p.name for p in positional[:n_inputs]]


def _arg_names(input_names: list[str], state_names: list[str], op_name: str) -> list[str]:
    """The op's tensor argument names: the forward's input names, then the state keys made identifiers, all
    distinct (and distinct from the op's name)."""
    taken = set(input_names) | {op_name}
    out = list(input_names)
    for key in state_names:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in key)
        base = base if base.isidentifier() and not keyword.iskeyword(base) else f"w_{base}"
        name, n = base, 1
        while name in taken:
            name, n = f"{base}_{n}", n + 1
        taken.add(name)
        out.append(name)
    return out


def _header(name: str, reference: Path, entries: list[ExportEntry], input_names, arg_names, init_params,
            devices) -> str:
    args = ", ".join(arg_names + [p["arg"] for p in init_params if "default" not in p])
    lines = [f"tileagent::{name}: {reference.name} as generated tile-DSL kernels (exported by TileAgent on "
             f"{datetime.date.today().isoformat()}; kernel runtime version {RUNTIME_VERSION}).", "",
             f"Configs covered (kernels run on: {', '.join(devices)}; dims of FREE_DIMS are free):"]
    for e in entries:
        t = "" if e.time_ms is None else f": {e.time_ms:.4g} ms"
        tun = f" (tunables {e.tunables})" if e.tunables else ""
        lines.append(f"  {e.config}{t}{tun}")
    lines += ["", "Any other config, device or dtype runs the embedded PyTorch reference (one RuntimeWarning per "
              "reason, naming the argument that did not match). Gradients are the reference's (its autograd on the "
              "saved inputs); torch.compile traces the op through its fake implementation.",
              "", "Usage:", f"    from {name}_tileagent import Model        # the reference's constructor and "
              f"state_dict", f"    y = Model(...).cuda()({', '.join(input_names)})",
              f"    y = torch.ops.tileagent.{name}({args})   # after importing the module",
              "Needs torch and, to run the kernels, cuda-python (plus the nvidia-cuda-nvrtc and nvidia-cuda-runtime "
              f"wheels unless {name}_tileagent_cubins/<arch>/ holds prebuilt cubins); never tileagent."]
    body = "\n".join(lines).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return f'"""{body}\n"""'


# -- the kernels: recorded at export, described for the runtime ------------------------------------------------------

def record_kernels(spec: Spec, entry: ExportEntry, smaller: bool = True) -> dict:
    """{factory name: {call key: JITKernel}}: every ``@jit`` factory call the entry's ModelNew makes (constructor and
    forward) at its config and (``smaller``) at its free dims' smaller powers of two (``_smaller_sizes``), found by
    dry runs on CPU tensors (``compiler.resources.dry_run(size=False)``: kernels are built, not executed;
    context-local, so a batch may export several entries at once), and for a factory taking the drafter's ON_CUDA,
    the call a GPU makes too (``_as_on_cuda``)."""
    from tileagent.compiler.resources import dry_run
    from tileagent.export_template import exec_source

    tag = f"{zlib.crc32(entry.source.encode()):08x}"
    module = exec_source(entry.source, f"_tileagent_export_{tag}", f"<exported candidate {tag}>")
    for key, value in entry.tunables.items():
        setattr(module, key, value)
    with dry_run(size=False) as run:
        try:
            model, _ = _candidate_model(spec, module, entry.config)
            inputs = spec.shaped_inputs(entry.config)
            with torch.no_grad():
                model(*inputs)
                for config in _smaller_sizes(spec, entry.config) if smaller else ():
                    try:
                        model(*spec.shaped_inputs(config))
                    except Exception as e:  # noqa: BLE001 -- calls of that size then run the reference, warned
                        log.info("export: the candidate for %s failed its dry run at %s (%s: %s); calls of that "
                                 "size will run the PyTorch reference", entry.config, config, type(e).__name__, e)
            for impl, args, kwargs, _ in list(run.factory_calls):
                _as_on_cuda(impl, args, kwargs)
        except ExportError:
            raise
        except Exception as e:
            raise ExportError(f"the candidate for {entry.config} failed in a dry run on the CPU: "
                              f"{type(e).__name__}: {e}") from e
    calls: dict = {}
    for impl, args, kwargs, kernel in run.factory_calls:
        if impl.eager:
            raise ExportError(f"{impl.fn.__name__} is an eager-style @jit kernel (called with tensors); the exported "
                              f"runtime serves factory-style kernels only (a @jit function returning a T.prim_func)")
        calls.setdefault(impl.fn.__name__, {})[call_key(args, kwargs)] = kernel
    return calls


def _smaller_sizes(spec: Spec, config: dict) -> list[dict]:
    """``config`` with one free dim (FREE_DIMS) at a power of two below its value, for each such dim and power: a
    candidate that picks its kernels by the call's sizes (the GEMM template's tile and split of K for a decode
    batch's few rows, a fusion kernel's rows per block) then has them recorded for calls at those sizes too."""
    return [{**config, dim: 1 << b} for dim in spec.free_dims if isinstance(config.get(dim), int)
            for b in range(config[dim].bit_length()) if 1 << b < config[dim]]


def _as_on_cuda(impl, args: tuple, kwargs: dict) -> None:
    """Call factory ``impl`` again as forward calls it on a GPU where it takes the built-in drafter's ``ON_CUDA``
    argument (the device decides how it rounds a division by a scalar): the dry run runs on CPU tensors, and the
    kernel it recorded, ON_CUDA False, is not the one a GPU asks for."""
    from tileagent.drafters.builtin.pointwise_text import ON_CUDA

    bound = inspect.signature(impl.fn).bind(*args, **kwargs)
    if bound.arguments.get(ON_CUDA) is False:
        bound.arguments[ON_CUDA] = True
        impl(*bound.args, **bound.kwargs)


def launched_kernels(spec: Spec, entry: ExportEntry) -> list:
    """The JITKernels entry's ModelNew launches at its config (``record_kernels``), each once."""
    kernels = [k for calls in record_kernels(spec, entry, smaller=False).values() for k in calls.values()]
    return list({id(k): k for k in kernels}.values())


def _expr(e, names: dict):
    """A scalar IR expression as the runtime's nested lists (``export_runtime.eval_expr``)."""
    from tileagent.compiler.ir.expr import BinOp, Call, Cast, Cmp, Const, Select, Unary, Var

    if isinstance(e, bool | int | float):
        return e
    kind = "b" if e.dtype.is_bool else "i" if e.dtype.is_int else "f"
    if isinstance(e, Const):
        return ["const", bool(e.value) if kind == "b" else int(e.value) if kind == "i" else float(e.value)]
    if isinstance(e, Var):
        return ["var", names.get(id(e), e.name), kind]
    if isinstance(e, BinOp):
        return ["bin", e.op, _expr(e.a, names), _expr(e.b, names), kind]
    if isinstance(e, Cmp):
        return ["cmp", e.op, _expr(e.a, names), _expr(e.b, names)]
    if isinstance(e, Unary):
        return ["un", e.op, _expr(e.a, names), kind]
    if isinstance(e, Select):
        return ["sel", _expr(e.cond, names), _expr(e.a, names), _expr(e.b, names), kind]
    if isinstance(e, Call):
        return ["call", e.name, [_expr(a, names) for a in e.args], kind]
    if isinstance(e, Cast):
        return ["cast", _expr(e.value, names), kind]
    raise ExportError(f"a launch or shape expression holds {type(e).__name__} ({e!r}), which the exported runtime "
                      f"cannot evaluate on the host")


def kernel_descriptor(kernel, arches=()) -> dict:
    """What the exported runtime needs to launch ``kernel`` (a JITKernel): its CUDA C++, NVRTC options, parameters
    (dtype, shape expressions of the dynamic dims), outputs, and one launch per ``__global__`` function (symbol,
    argument names and dtypes, grid expressions, block, dynamic shared bytes, alignment per pointer, the TMA
    tensor maps it takes after its arguments, and its thread-block cluster when it has one). ``variants``: for each
    of ``arches`` whose lowering differs from the kernel's own target (shared memory per block decides the pipeline
    stages, features decide instructions), that arch's ``id``, ``source`` and ``launches``; the runtime uses them on a
    device of that arch. A lowering with tensor maps carries a ``fallback``, the same lowered without TMA, for calls
    whose tensors break TMA's rules."""
    from tileagent.compiler import passes
    from tileagent.compiler.ir.stmt import Buffer
    from tileagent.compiler.jit import nvrtc_options
    from tileagent.compiler.target import for_arch

    func = kernel.func
    options = list(nvrtc_options(kernel.pass_configs))
    seen = [p.name for p in func.params] + [v.name for v in func.dynamic_vars]
    if len(set(seen)) != len(seen):
        raise ExportError(f"kernel {func.name}: its parameters and dynamic dims share a name ({seen})")

    def lowering(target, opts, module=None, source=None) -> tuple[dict, dict]:
        if module is None:
            unit = passes.run(func, target, opts, until="codegen_cuda")
            module, source = unit.module, unit.source
        text, launches, names = _lowered(func, module, source)
        out = {"id": _digest(text, options), "source": text, "launches": launches}
        if any(k.tensor_maps for k in module.kernels):
            out["fallback"] = lowering(target.without({"tma"}), opts)[0]  # as the in-process runtime falls back
        return out, names

    own, names = lowering(kernel.target, kernel.options, kernel.module, kernel.get_kernel_source())
    params = []
    for p in func.params:
        if isinstance(p, Buffer):
            params.append({"name": p.name, "kind": "buffer", "dtype": str(p.dtype),
                           "shape": [_expr(d, names) for d in p.shape]})
        else:
            params.append({"name": p.name, "kind": "scalar", "dtype": str(p.dtype)})
    variants = {}
    for arch in arches:
        target = for_arch(arch, "sim")
        if target.arch == kernel.target.arch:
            continue
        other = lowering(target, kernel.options)[0]
        if other != own:
            variants[target.arch] = other
    return {"runtime_version": RUNTIME_VERSION, "name": func.name, **own, "arch": kernel.target.arch,
            "options": options, "params": params, "out_idx": list(kernel.out_idx),
            "dynamic": [v.name for v in func.dynamic_vars], "variants": variants}


def _digest(source: str, options: list[str]) -> str:
    return hashlib.sha256("\0".join([source, *options]).encode()).hexdigest()[:20]


def _lowered(func, module, source: str) -> tuple[str, list[dict], dict]:
    """(source, launches, names of the module's variables) of one lowering of ``func``."""
    from tileagent.compiler.ir.stmt import Buffer
    from tileagent.compiler.targets.cuda import kernel_symbol, required_alignment

    names: dict = {}
    for p in func.params:
        if isinstance(p, Buffer):
            names[id(module.flat_globals[p])] = p.name
    scalars = [p for p in func.params if not isinstance(p, Buffer)] + list(func.dynamic_vars)
    for mine, theirs in zip(scalars, module.scalars):
        names[id(theirs)] = names[id(mine)] = mine.name
    launches = []
    for k in module.kernels:
        align = required_alignment(k)
        launches.append({
            "symbol": kernel_symbol(k),
            "args": [[names[id(p)], "buffer" if isinstance(p, Buffer) else str(p.dtype)] for p in k.params],
            "grid": [_expr(g, names) for g in k.grid], "block": [int(b) for b in k.block],
            "shared_bytes": int(k.shared_bytes),
            "align": {names[id(p)]: int(a) for p, a in align.items() if a > 1}})
        if k.dependent_launch:  # its code waits for the stream's previous kernel: launched ahead of it
            launches[-1]["dependent_launch"] = True
        if tuple(k.cluster) != (1, 1, 1):  # thread-block clusters (compiled in): the runtime checks the grid fits
            launches[-1]["cluster"] = [int(c) for c in k.cluster]
        if k.tensor_maps:  # TMA: encoded at launch from the tensor passed for "param", after the arguments
            launches[-1]["tensor_maps"] = [
                {"param": names[id(tm.buffer)], "dtype": str(tm.buffer.dtype),
                 "dims": [_expr(d, names) for d in tm.dims], "strides": [_expr(x, names) for x in tm.strides],
                 "box": [int(b) for b in tm.box], "swizzle": int(tm.swizzle)} for tm in k.tensor_maps]
    return source, launches, names


def _candidate_model(spec: Spec, module, config: dict):
    init = spec.init_inputs(config)
    model = module.ModelNew(*init)
    ref = spec.make_model(config)
    own = model.state_dict()
    with torch.no_grad():
        for key, value in ref.state_dict().items():
            if key in own and own[key].shape == value.shape:
                own[key].copy_(value.to(own[key].dtype))
    return model.eval(), ref


def ship_built_cubins(built: dict, directory: Path) -> list[Path]:
    """Write the cubin each kernel of ``built`` (descriptor id -> JITKernel) was built with in this process as
    ``directory/<its arch>/<id>.cubin``, for kernels built for a CUDA device (a CPU or emulator build has none): the
    exported runtime then runs, on that arch, the very code the evaluation checked and timed (the PTX target's
    ptxas build where it applied) instead of compiling the CUDA source with NVRTC, whose build of the same kernel
    runs up to about 13% slower or faster on the H200 (BENCHMARKS.md, round 2 session 15). Other arches compile the
    source as before."""
    written = []
    for kid, kernel in built.items():
        if kernel.target.kind != "cuda" or kernel.unit.cubin is None:
            continue
        path = Path(directory) / kernel.target.arch / f"{kid}.cubin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(cubin_file_bytes(kernel.unit.cubin))
        written.append(path)
    return written


def prebuild_cubins(descriptors: list[dict], directory: Path, arches) -> list[Path]:
    """Compile every exported kernel for each arch into ``directory/<arch>/<kernel id>.cubin`` (needs NVRTC, no
    GPU); the exported runtime loads them instead of compiling."""
    from tileagent.compiler.runtime.nvrtc import compile_to_cubin

    written = []
    for d in descriptors:
        for arch in arches:
            own = d.get("variants", {}).get(arch, d)  # the lowering for this arch, and its fallback without TMA
            for low in (own, own["fallback"]) if "fallback" in own else (own,):
                path = Path(directory) / arch / f"{low['id']}.cubin"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(cubin_file_bytes(compile_to_cubin(low["source"], arch, tuple(d["options"]))))
                written.append(path)
    return sorted(set(written))


__all__ = ["ExportEntry", "ExportError", "export_module", "kernel_descriptor", "launched_kernels", "prebuild_cubins",
           "record_kernels", "ship_built_cubins"]
