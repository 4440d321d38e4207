"""Reference specs: load a KernelBench-format file, validate it, and build seeded inputs for any config.

In: a Python file with ``class Model(nn.Module)``, ``get_inputs()`` and ``get_init_inputs()`` (KernelBench, unchanged),
plus optional extensions (docs/evaluator.md is the reference):

- ``CONFIGS`` (list of dicts) or ``get_configs()``: a config grid; ``get_inputs(**cfg)`` / ``get_init_inputs(**cfg)``
  then take the config (only the keys a function names are passed, unless it has ``**kwargs``).
- ``SMALL_CONFIG``: a config for the quick sanity run at load time (default: the first config).
- ``FREE_DIMS``: config keys whose sizes may vary; tail sizes (v - 1, v + 3 or below the largest v) are tested as well.
- ``DTYPES``: one dtype name for every floating input and the models' floating weights, or one per input position
  (a list with ``None`` to keep, or a dict {position: dtype}).
- ``TOLERANCES``: {dtype name: (atol, rtol) or (atol, rtol, rel_l2)} overriding the defaults.
- ``DISTRIBUTIONS``: the input distributions to use (names, or a dict name -> fn(shape, generator) -> float32 tensor);
  ``EXTRA_DISTRIBUTIONS``: a dict name -> fn(shape, generator) of distributions checked besides those (the range
  where the op does something particular: a clamp's limit, a threshold);
  ``FIXED_INPUTS``: positions whose values come from ``get_inputs`` itself (run under the seeded RNG);
  ``SPECIAL_VALUES``: {input position: [values]} planted at about a quarter of those inputs' elements in one more
  distribution, ``special_values`` (an infinity, a -1 padding index: values the op defines but no draw produces).
- ``KEEP_PARAMS``: True keeps constant-valued parameters (by default they are re-drawn, see ``make_model``).
- ``BYTES`` / ``FLOPS``: numbers, or functions of the config (``f(**cfg)``, or ``f(cfg)`` for one parameter named
  cfg or config), for the roofline; bytes default to the sizes of inputs and outputs.

Out: ``Spec``. Guarantees: every problem with the file raises ``SpecError`` with an exact message (not UTF-8, syntax
error with its line, ``sys.exit`` at import, missing class or function, a config key (CONFIGS, get_configs(),
SMALL_CONFIG) that neither get_inputs nor get_init_inputs takes, non-tensor inputs by position, the reference raising, non-deterministic or of
the wrong output type); inputs are a pure function of (config, seed, distribution); hidden distributions are in
``ALL_DISTRIBUTIONS`` but never in ``PUBLIC_DISTRIBUTIONS`` or ``public_distribution_text()``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import random
import sys
import traceback
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from tileagent.evaluator.errors import SpecError

# -- input distributions ---------------------------------------------------------------------------------------------
# Each draws a float32 CPU tensor of ``shape`` from ``g``; inputs are then cast to their dtype.


def _row_scales(shape, g):
    x = torch.randn(shape, generator=g)
    if len(shape) == 0:
        return x
    return x * 10.0 ** torch.empty(*shape[:-1], 1).uniform_(-3.0, 2.0, generator=g)


def _positions(n: int, k: int, g) -> torch.Tensor:
    """``k`` distinct positions of ``n`` in random order; above 2^24 elements about ``k`` (drawn with replacement,
    repeats dropped): a permutation of all ``n`` was 16 GiB of int64 at 2^31 elements (played LLM session 37, a
    16384 x 128256 input)."""
    if n <= 1 << 24:
        return torch.randperm(n, generator=g)[:k]
    where = torch.unique(torch.randint(0, n, (k,), generator=g, device=g.device))
    return where[torch.randperm(where.numel(), generator=g, device=g.device)]


def _outliers(shape, g):
    x = torch.randn(shape, generator=g)
    flat = x.view(-1)
    k = max(1, flat.numel() // 100)
    where = _positions(flat.numel(), k, g)
    k = where.numel()
    sign = torch.randint(0, 2, (k,), generator=g) * 2.0 - 1.0
    flat[where] = sign * torch.empty(k).uniform_(100.0, 200.0, generator=g)
    return x


def _ties(shape, g):
    x = (torch.randint(-16, 16, shape, generator=g).float() + 0.5) / 4.0
    flat = x.view(-1)
    which = torch.randint(0, 10, (flat.numel(),), generator=g, dtype=torch.uint8)  # 1 byte an element, not 4
    flat[which == 0] = 0.0
    flat[which == 1] = -0.0
    return x


def _extremes(shape, g, dtype=torch.float32):
    x = torch.randn(shape, generator=g)
    flat = x.view(-1)
    k = max(1, flat.numel() // 100)
    where = _positions(flat.numel(), 2 * k, g)
    sign = torch.randint(0, 2, (where.numel(),), generator=g) * 2.0 - 1.0
    info = torch.finfo(dtype if dtype.is_floating_point else torch.float32)
    # large values, but small enough that a sum of squares over a row of the reference stays finite in fp32
    big = min(float(info.max) / 4, 1e15)
    flat[where[:k]] = sign[:k] * torch.empty(k).uniform_(0.5 * big, big, generator=g)
    flat[where[k:]] = sign[k:] * float(info.tiny)
    return x


PUBLIC_DISTRIBUTIONS: dict[str, tuple[Callable, str]] = {
    "normal": (lambda s, g: torch.randn(s, generator=g), "standard normal N(0, 1)"),
    "uniform": (lambda s, g: torch.empty(s).uniform_(-1.0, 1.0, generator=g), "uniform on (-1, 1)"),
    "normal_x3": (lambda s, g: torch.randn(s, generator=g) * 3.0, "N(0, 1) times 3"),
    "normal_x0.01": (lambda s, g: torch.randn(s, generator=g) * 0.01, "N(0, 1) times 0.01"),
    "negative": (lambda s, g: -torch.randn(s, generator=g).abs(), "negative only: -|N(0, 1)|"),
}
_HIDDEN_DISTRIBUTIONS: dict[str, tuple[Callable, str]] = {
    "row_scales": (_row_scales, "each row (last dim) scaled by 10^U(-3, 2)"),
    "outliers": (_outliers, "N(0, 1) with 1% of the elements replaced by +-U(100, 200)"),
    "offset": (lambda s, g: torch.randn(s, generator=g) + 64.0, "N(0, 1) + 64"),
    "offset_x1000": (lambda s, g: torch.randn(s, generator=g) + 1000.0, "N(0, 1) + 1000 (a large mean: one-pass "
                     "variances and unshifted sums lose it)"),
    "ties": (_ties, "exact halves of a quantization grid ((k + 0.5) / 4, ties for rounding ops), with +0 and -0"),
    "extremes": (_extremes, "N(0, 1) with 1% of the elements at the dtype's extremes (near its max, and tiny)"),
}
ALL_DISTRIBUTIONS: dict[str, tuple[Callable, str]] = {**PUBLIC_DISTRIBUTIONS, **_HIDDEN_DISTRIBUTIONS}
HIDDEN = frozenset(_HIDDEN_DISTRIBUTIONS)
SPECIAL = "special_values"  # N(0, 1) draws with the reference's SPECIAL_VALUES planted (a public distribution)
SPECIAL_SHARE = 0.25  # of the elements of each input SPECIAL_VALUES names


def public_distribution_text() -> str:
    """The input distributions a drafter may be told about, one per line (hidden ones are never included)."""
    return "\n".join([*(f"- {name}: {doc}" for name, (_, doc) in PUBLIC_DISTRIBUTIONS.items()),
                      f"- {SPECIAL} (where the reference sets SPECIAL_VALUES): N(0, 1) with about a quarter of the "
                      f"elements of the inputs it names set to its values (an infinite lse, a -1 padding index): the "
                      f"kernel must treat them as the reference does"])


# -- dtypes and tolerances -------------------------------------------------------------------------------------------

_DTYPE_NAMES = {"float32": torch.float32, "float": torch.float32, "fp32": torch.float32, "float16": torch.float16,
                "half": torch.float16, "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
                "float64": torch.float64, "double": torch.float64, "fp64": torch.float64}


KEPT_OUTPUT_BYTES = 1 << 30
"""The sanity run keeps the first run's outputs up to this size for its determinism check; larger ones by their
fingerprint (``held_outputs``), so that the second run has their memory (played LLM session 37: a 3.9 GiB logits
gradient held beside its reference's 39 GiB of float32 temporaries ran an H100 out of memory)."""


@dataclass(frozen=True)
class Tolerance:
    """|out - ref| <= atol + rtol * |ref| elementwise, and ||out - ref||_2 <= rel_l2 * ||ref||_2 over each output."""

    atol: float
    rtol: float
    rel_l2: float


DEFAULT_TOLERANCES = {torch.float32: Tolerance(1e-4, 1e-4, 1e-4), torch.float16: Tolerance(1e-2, 1e-2, 1e-2),
                      torch.bfloat16: Tolerance(1e-2, 1e-2, 1e-2), torch.float64: Tolerance(1e-7, 1e-7, 1e-7)}
EXACT = Tolerance(0.0, 0.0, 0.0)  # integer and bool outputs
VECTOR_WIDTH = 8  # tails cover every residue modulo this (8 fp16 or 4 fp32 elements make a 128-bit access)


def parse_dtype(value, where: str) -> torch.dtype:
    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, str) and value.removeprefix("torch.") in _DTYPE_NAMES:
        return _DTYPE_NAMES[value.removeprefix("torch.")]
    raise SpecError(f"{where}: unknown dtype {value!r}; use one of {', '.join(sorted(_DTYPE_NAMES))}")


@dataclass(frozen=True)
class Roofline:
    """What one call must move and compute; ``derived`` when bytes come from input and output sizes."""

    bytes: float
    flops: float | None
    derived: bool


@dataclass
class ReferenceInfo:
    """What the sanity run learned about one config: the outputs' shapes and dtypes, and the inputs' bytes."""

    shapes: list[tuple[int, ...]]
    dtypes: list[torch.dtype]
    input_bytes: int
    output_bytes: int


def _describe(value) -> str:
    return f"{type(value).__name__} ({value!r})" if isinstance(value, (int, float, bool, str)) else type(value).__name__


def _config_suffix(config: dict) -> str:
    return f" (config {config})" if config else ""


def reference_line(error: BaseException, path) -> int | None:
    """The innermost line of the reference file ``path`` in ``error``'s traceback (or its causes'), if any."""
    target = os.path.abspath(str(path))
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        lines = [f.lineno for f in traceback.extract_tb(error.__traceback__) if os.path.abspath(f.filename) == target]
        if lines:
            return lines[-1]
        error = error.__cause__ or error.__context__
    return None


def _at(error: BaseException, path) -> str:
    line = reference_line(error, path)
    return f" at {Path(path).name}:{line}" if line else ""


# -- who runs: the evaluation worker tells its parent when the reference's own code runs --------------------------

_watch: dict = {"callback": None, "depth": 0}


@contextlib.contextmanager
def watch_reference(callback: Callable[[dict | None], None]):
    """While the block runs, ``callback(info)`` hears when this process starts running a reference's own code
    (``info``: {"reference": path, "what": ..., "config": ...}) and ``callback(None)`` when it stops (outermost
    ``running_reference`` blocks only). The evaluation worker forwards these to its parent, so that a reference that
    kills or hangs the worker is reported as the reference's fault, not the candidate's."""
    old = _watch["callback"]
    _watch["callback"] = callback
    try:
        yield
    finally:
        _watch["callback"] = old


@contextlib.contextmanager
def running_reference(path, what: str, config: dict | None = None):
    """Mark the block as running the reference's code (``what``: e.g. "Model.forward"), for ``watch_reference``.
    ``sys.exit`` called by the reference becomes a SpecError naming its file and line; other exceptions pass
    unchanged (callers turn them into their SpecErrors)."""
    callback, outer = _watch["callback"], _watch["depth"] == 0
    _watch["depth"] += 1
    if callback is not None and outer:
        callback({"reference": str(path), "what": what, "config": config})
    try:
        yield
    except SystemExit as e:
        raise SpecError(f"the reference {Path(path).name} called sys.exit({e.code!r}) in {what}"
                        f"{_config_suffix(config or {})}{_at(e, path)}; a reference must not exit",
                        reference=str(path), line=reference_line(e, path)) from None
    finally:
        _watch["depth"] -= 1
        if callback is not None and outer:
            callback(None)


def call_with_config(fn: Callable, config: dict):
    """``fn(**config)`` restricted to the keys ``fn`` names (all of them when it takes ``**kwargs``)."""
    if not config:
        return fn()
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return fn(**config)
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return fn(**config)
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return fn(**{k: v for k, v in config.items() if k in names})


def normalize_outputs(out, who: str) -> tuple[torch.Tensor, ...] | str:
    """``out`` as a tuple of tensors, or the reason it is not one (for the caller's error message)."""
    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, (tuple, list)) and out:
        for k, item in enumerate(out):
            if not isinstance(item, torch.Tensor):
                return f"{who} returned a {type(out).__name__} whose item {k} is a {_describe(item)}"
        return tuple(out)
    return f"{who} returned a {_describe(out)}"


@dataclass
class Spec:
    """A loaded reference. Build with ``load_spec``; every method raises SpecError for faults of the file."""

    path: Path
    module: object
    configs: list[dict]
    has_grid: bool
    free_dims: tuple[str, ...] = ()
    distributions: tuple[str, ...] = tuple(ALL_DISTRIBUTIONS)
    custom_distributions: dict = field(default_factory=dict)
    fixed_inputs: frozenset = frozenset()
    special_values: dict = field(default_factory=dict)
    dtypes: object = None
    tolerances: dict = field(default_factory=dict)
    keep_params: bool = False
    small_config: dict | None = None
    _validated: dict = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.path.name

    # -- building ----------------------------------------------------------------------------------------------------

    def _raised(self, what: str, error: Exception, config: dict | None) -> SpecError:
        """SpecError for the reference's ``what`` raising ``error``, naming the reference's file:line."""
        return SpecError(f"{what} raised {type(error).__name__}: {error}{_config_suffix(config or {})}"
                         f"{_at(error, self.path)}", reference=str(self.path), line=reference_line(error, self.path))

    def running(self, what: str, config: dict | None = None):
        """``running_reference`` for this spec's file."""
        return running_reference(self.path, what, config)

    def init_inputs(self, config: dict) -> list:
        try:
            with self.running("get_init_inputs()", config):
                init = call_with_config(self.module.get_init_inputs, config)
        except SpecError:
            raise
        except Exception as e:
            raise self._raised("get_init_inputs()", e, config) from e
        if not isinstance(init, (list, tuple)):
            raise SpecError(f"get_init_inputs() returned a {_describe(init)}, not a list of constructor arguments")
        return list(init)

    def make_model(self, config: dict, device="cpu", seed: int = 0) -> nn.Module:
        """Model(*get_init_inputs(config)) built under ``torch.manual_seed(seed)`` (global RNG state restored), on
        ``device`` in DTYPES' dtype if it is one name, in eval mode. Constant-valued floating parameters with more
        than one element (a norm's weight of ones, a zero bias) are re-drawn around their value, so a kernel that
        ignores them cannot pass; ``KEEP_PARAMS = True`` turns that off. ``model.redrawn`` lists their names."""
        init = self.init_inputs(config)
        with torch.random.fork_rng(devices=[]), self.running("Model(*get_init_inputs())", config):
            torch.manual_seed(seed)
            try:
                model = self.module.Model(*init)
            except Exception as e:
                raise self._raised("Model(*get_init_inputs())", e, config) from e
            redrawn = [] if self.keep_params else _redraw_constant_params(model)
            model = model.to(device)
            if isinstance(self.dtypes, torch.dtype):
                model = cast_floating(model, self.dtypes)
        model.redrawn = redrawn
        return model.eval()

    def input_elements(self, config: dict) -> int:
        """The elements of ``get_inputs(config)``, counted on the meta device (no values drawn)."""
        return sum(t.numel() for t in self.sample_inputs(config, 0, "meta"))

    def sample_inputs(self, config: dict, seed: int, device="cpu") -> list[torch.Tensor]:
        """``get_inputs(config)`` under a seeded RNG, with ``device`` as torch's default device (large inputs are
        drawn where they are used), checked to be a list of tensors."""
        with torch.random.fork_rng(devices=[]), torch.device(device), self.running("get_inputs()", config):
            torch.manual_seed(_mix(seed, config, "get_inputs"))
            try:
                inputs = call_with_config(self.module.get_inputs, config)
            except Exception as e:
                raise self._raised("get_inputs()", e, config) from e
        if isinstance(inputs, torch.Tensor) or not isinstance(inputs, (list, tuple)):
            raise SpecError(f"get_inputs() returned a {_describe(inputs)}, not a list of tensors")
        for k, t in enumerate(inputs):
            if not isinstance(t, torch.Tensor):
                raise SpecError(f"get_inputs() returned a non-tensor at position {k}: {_describe(t)}; every input "
                                f"must be a torch.Tensor (put constants in get_init_inputs())")
        return list(inputs)

    def drawn(self, config: dict) -> bool:
        """Whether an input distribution draws any of ``config``'s inputs (a floating one not in FIXED_INPUTS);
        without one every distribution gives the same inputs. True when get_inputs cannot run on the meta device."""
        try:
            inputs = self.sample_inputs(config, 0, "meta")
        except Exception:  # noqa: BLE001 - a get_inputs that needs values: assume it is drawn
            return True
        return any(t.is_floating_point() and k not in self.fixed_inputs for k, t in enumerate(inputs))

    def unchecked_values(self, config: dict) -> list[str]:
        """A warning for each floating input that ``get_inputs(config)`` fills with inf or NaN which no check will
        see: the checks draw it afresh unless FIXED_INPUTS names it, and plant only SPECIAL_VALUES' values (played
        LLM 47: an author planted values in get_inputs and took them for checked)."""
        return [f"get_inputs() puts inf or NaN into input {k}, but the checks draw input {k} afresh from the input "
                f"distributions: list such values in SPECIAL_VALUES = {{{k}: [...]}} to have them checked, or name "
                f"{k} in FIXED_INPUTS to keep get_inputs' values" for k, t in enumerate(self.sample_inputs(config, 0))
                if t.is_floating_point() and k not in self.fixed_inputs and k not in self.special_values and
                not bool(torch.isfinite(t).all())]

    def shaped_inputs(self, config: dict, device="cpu") -> list[torch.Tensor]:
        """``get_inputs(config)``'s tensors (seed 0) with DTYPES applied, their values as get_inputs draws them: for
        code that needs the inputs' shapes and dtypes, not a check's values (the export's dry run; ``device="meta"``
        allocates nothing). Half the random draws of ``make_inputs``."""
        return [t.to(self._input_dtype(k, t)).contiguous() for k, t in enumerate(self.sample_inputs(config, 0, device))]

    def make_inputs(self, config: dict, seed: int, distribution: str = "normal", device="cpu") -> list[torch.Tensor]:
        """Inputs for one check: ``get_inputs(config)``'s shapes and dtypes (DTYPES applied), floating values drawn
        on ``device`` from ``distribution`` with a generator seeded by (config, seed, distribution, position) (the
        same seed gives other values on another device type). Integer, bool and
        FIXED_INPUTS positions keep get_inputs' values (seeded), so their dtype and range are the spec's."""
        draw = self._distribution(distribution)
        device = torch.device(device)
        out = []
        for k, t in enumerate(self.sample_inputs(config, seed, device)):
            dtype = self._input_dtype(k, t)
            if t.is_floating_point() and k not in self.fixed_inputs:
                g = torch.Generator(device=device).manual_seed(_mix(seed, config, f"{distribution}/{k}"))
                with torch.device(device), self.running(f"the input distribution {distribution!r}", config):
                    values = draw(tuple(t.shape), g, dtype) if draw is _extremes else draw(tuple(t.shape), g)
                    t = values.to(dtype)
            elif t.dtype != dtype:
                t = t.to(dtype)
            out.append(t.to(device).contiguous())
        return self.planted(out, seed, config) if distribution == SPECIAL else out

    def planted(self, inputs: list[torch.Tensor], seed: int, config: dict) -> list[torch.Tensor]:
        """``inputs`` with SPECIAL_VALUES planted: at each position it names, each element independently with
        probability SPECIAL_SHARE takes one of its values (uniformly), drawn by a generator seeded like the draws."""
        for k, values in self.special_values.items():
            if k >= len(inputs):
                raise SpecError(f"SPECIAL_VALUES names input position {k}, but get_inputs returns {len(inputs)} "
                                f"input(s)")
            t = inputs[k]
            if not t.is_floating_point() and not all(float(v).is_integer() for v in values):
                raise SpecError(f"SPECIAL_VALUES[{k}] holds {values!r}, but input {k} is {str(t.dtype)[6:]}: "
                                f"integer inputs take integer values only")
            g = torch.Generator(device=t.device).manual_seed(_mix(seed, config, f"{SPECIAL}/planted/{k}"))
            hit = torch.rand(t.shape, generator=g, device=t.device) < SPECIAL_SHARE
            pick = torch.randint(len(values), t.shape, generator=g, device=t.device)
            table = torch.tensor(values, dtype=torch.float64 if t.is_floating_point() else torch.int64)
            inputs[k] = torch.where(hit, table.to(t.device)[pick].to(t.dtype), t).contiguous()
        return inputs

    def _distribution(self, name: str) -> Callable:
        if name in self.custom_distributions:
            return self.custom_distributions[name]
        if name == SPECIAL and self.special_values:
            return PUBLIC_DISTRIBUTIONS["normal"][0]
        if name not in ALL_DISTRIBUTIONS:
            raise SpecError(f"unknown input distribution {name!r}; known: {', '.join(self.distributions)}")
        return ALL_DISTRIBUTIONS[name][0]

    def _input_dtype(self, k: int, t: torch.Tensor) -> torch.dtype:
        if isinstance(self.dtypes, torch.dtype):
            return self.dtypes if t.is_floating_point() else t.dtype
        if isinstance(self.dtypes, dict):
            return self.dtypes.get(k) or t.dtype
        return t.dtype

    def tolerance(self, dtype: torch.dtype) -> Tolerance:
        if dtype in self.tolerances:
            return self.tolerances[dtype]
        if not dtype.is_floating_point:
            return EXACT
        return DEFAULT_TOLERANCES.get(dtype, DEFAULT_TOLERANCES[torch.float32])

    def tail_configs(self, config: dict, seed: int | None = None) -> list[dict]:
        """For each free dim of ``config`` with value v: the config with v - 1 (when >= 1) and with v + 3, or v - 3
        where v + 3 would pass the largest v of the reference's configs (a reference need not accept more: GPT-2's
        positions table stops at S = 1024, and a CUDA device-side assert in its embedding kills the worker); with a
        ``seed`` (the evaluation's), also sizes drawn from it that cover every residue 1..VECTOR_WIDTH-1 modulo
        ``VECTOR_WIDTH`` below v (random per evaluation, so no fixed set of sizes can be special-cased)."""
        tails = []
        for key in self.free_dims:
            v = config[key]
            top = max((c[key] for c in self.configs if isinstance(c.get(key), int)), default=v)
            sizes = [v - 1, v + 3 if v + 3 <= top else v - 3]
            if seed is not None:
                rng = random.Random(_mix(seed, config, f"tails/{key}"))
                blocks = max(0, v // VECTOR_WIDTH - 1)
                for r in range(1, VECTOR_WIDTH):
                    sizes.append(VECTOR_WIDTH * rng.randint(max(0, blocks - 2), blocks) + r)
            for w in sizes:
                if w >= 1 and w != v and {**config, key: w} not in tails:
                    tails.append({**config, key: w})
        return tails

    # -- the reference -----------------------------------------------------------------------------------------------

    def run_reference(self, model: nn.Module, inputs: list, config: dict | None = None) -> tuple[torch.Tensor, ...]:
        """The reference's outputs (no grad) as a tuple of tensors."""
        with torch.no_grad(), self.running("Model.forward", config):
            try:
                out = model(*inputs)
            except Exception as e:
                raise self._raised("Model.forward", e, config) from e
        outputs = normalize_outputs(out, "Model.forward")
        if isinstance(outputs, str):
            raise SpecError(f"{outputs}; the output must be a tensor or a tuple of tensors")
        return outputs

    def validate(self, config: dict, device="cpu", model: nn.Module | None = None) -> ReferenceInfo:
        """Sanity-run the reference on ``config`` (cached): inputs are tensors, the forward runs, returns tensors, and
        gives identical outputs twice on the same inputs. ``model``: the config's Model when the caller built it."""
        key = (repr(sorted(config.items())), str(device))
        if key in self._validated:
            return self._validated[key]
        inputs = self.make_inputs(config, 0, self.distributions[0], device)
        if self.special_values:  # a position or value SPECIAL_VALUES cannot plant: an error at load, not mid-check
            self.planted(list(inputs), 0, config)
        model = self.make_model(config, device) if model is None else model
        from tileagent.evaluator.held_outputs import fingerprint

        first = self.run_reference(model, [t.clone() for t in inputs], config)
        info = ReferenceInfo([tuple(t.shape) for t in first], [t.dtype for t in first],
                             sum(t.numel() * t.element_size() for t in inputs),
                             sum(t.numel() * t.element_size() for t in first))
        if info.output_bytes > KEPT_OUTPUT_BYTES:  # not held while the second run needs the memory
            first = [fingerprint(t) for t in first]
        second = self.run_reference(model, [t.clone() for t in inputs], config)
        for k, (a, b) in enumerate(zip(first, second)):
            kept = isinstance(a, torch.Tensor)
            if (tuple(b.shape), b.dtype) != (info.shapes[k], info.dtypes[k]) or \
                    not (identical(a, b) if kept else fingerprint(b) == a):
                diff = (a.double() - b.double()).abs().max().item() if kept and a.shape == b.shape else (
                    "not known: the first run's outputs were not kept" if not kept else "shapes differ")
                raise SpecError(f"Model.forward is non-deterministic: two runs on the same inputs differ (output {k}, "
                                f"max abs diff {diff}){_config_suffix(config)}; a reference must be deterministic")
        self._validated[key] = info
        return info

    def roofline(self, config: dict, device="cpu") -> Roofline:
        """Bytes moved and FLOPs of one call: BYTES/FLOPS of the spec, else bytes of inputs plus outputs."""
        nbytes = metadata(self.module, "BYTES", config)
        flops = metadata(self.module, "FLOPS", config)
        if nbytes is None:
            info = self.validate(config, device)
            return Roofline(float(info.input_bytes + info.output_bytes), flops, True)
        return Roofline(nbytes, flops, False)


def metadata(module, name: str, config: dict) -> float | None:
    """The spec module's ``BYTES`` or ``FLOPS`` (``name``) for ``config``: a number, or a function of the config
    (``f(cfg)`` for one parameter named cfg or config, else ``call_with_config``); None when ``module`` (which may be
    None) gives none."""
    value = getattr(module, name, None) if module is not None else None
    if value is None:
        return None
    if callable(value):
        params = list(inspect.signature(value).parameters)
        with running_reference(getattr(module, "__file__", None) or "the reference", name, config):
            value = value(config) if params in (["cfg"], ["config"]) else call_with_config(value, config)
    return None if value is None else float(value)


def identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and values, NaN equal to NaN."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):
        return True
    if a.is_floating_point():
        return torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
    return False


def _mix(seed: int, config: dict, what: str) -> int:
    return zlib.crc32(repr((seed, sorted(config.items()), what)).encode())


def _redraw_constant_params(model: nn.Module) -> list[str]:
    redrawn = []
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.is_floating_point() and p.numel() > 1 and bool((p == p.reshape(-1)[0]).all()):
                v = float(p.reshape(-1)[0])
                p.copy_(v + 0.5 * max(abs(v), 1.0) * torch.randn(p.shape, generator=g))
                redrawn.append(name)
    return redrawn


def cast_floating(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """``model`` with its floating parameters and buffers cast to ``dtype`` in place (their ``.data`` replaced)."""
    for t in list(model.parameters()) + list(model.buffers()):
        if t.is_floating_point():
            t.data = t.data.to(dtype)
    return model


# -- loading ---------------------------------------------------------------------------------------------------------


def import_file(path: Path, prefix: str, error: Callable[[str], Exception]):
    """Compile and import ``path`` as a fresh module (not left in sys.modules); a file that is not UTF-8, syntax
    errors, import-time exceptions and ``sys.exit`` at import become ``error(message)``."""
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as e:
        raise error(f"{path}: cannot read it ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise error(f"{path.name}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); save it as "
                    f"UTF-8") from None
    try:
        compile(source, str(path), "exec")
    except SyntaxError as e:
        raise error(f"{path.name}:{e.lineno}: syntax error: {e.msg}") from None
    try:
        return exec_fresh_module(path, prefix)
    except SystemExit as e:
        raise error(f"{path.name}: importing it called sys.exit({e.code!r}); a module must not exit") from None
    except Exception as e:
        raise error(f"{path.name}: importing it raised {type(e).__name__}: {e}") from e


def exec_fresh_module(path: Path, prefix: str):
    """Run ``path`` as a new module named after ``prefix`` and the file, listed in sys.modules only while it runs
    (dataclasses and inspect look modules up while they import); its exceptions propagate."""
    name = f"{prefix}{zlib.crc32(str(path.resolve()).encode()):08x}_{path.stem}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def load_spec(path, check: bool = True) -> Spec:
    """Load and validate the reference at ``path``.

    With ``check``, the reference is also run on SMALL_CONFIG (or the first config) on the CPU: inputs are tensors,
    the forward runs twice with identical results and returns a tensor or a tuple of tensors.

    Raises:
        SpecError: the first problem found, with an exact message.
    """
    path = Path(path)
    with running_reference(path, "importing it"):
        module = import_file(path, "_tileagent_spec_", SpecError)
    name = path.name
    model = getattr(module, "Model", None)
    if model is None:
        raise SpecError(f"{name} defines no class Model (KernelBench format: class Model(nn.Module) whose forward is "
                        f"the reference)")
    if not (isinstance(model, type) and issubclass(model, nn.Module)):
        raise SpecError(f"{name}: Model is a {_describe(model)}, not a torch.nn.Module subclass")
    if not callable(getattr(module, "get_inputs", None)):
        raise SpecError(f"{name} defines no function get_inputs() (KernelBench format: it returns the list of input "
                        f"tensors)")
    if not callable(getattr(module, "get_init_inputs", None)):
        raise SpecError(f"{name} defines no function get_init_inputs() (KernelBench format: it returns Model's "
                        f"constructor arguments, [] for none)")
    configs, has_grid = _configs(module, name)
    spec = Spec(path=path, module=module, configs=configs, has_grid=has_grid, **_extensions(module, name, configs))
    accepts = accepted_config_keys(module)
    for k, cfg in enumerate(configs if has_grid else []):
        check_config_keys(cfg, accepts, f"{name}: {'CONFIGS' if hasattr(module, 'CONFIGS') else 'get_configs()'}"
                                        f"[{k}] {cfg}")
    if spec.small_config is not None:
        check_config_keys(spec.small_config, accepts, f"{name}: SMALL_CONFIG {spec.small_config}")
    if check:
        spec.validate(spec.small_config or configs[0])
    return spec


def accepted_config_keys(module) -> frozenset[str] | None:
    """The config keys that reach the reference: the parameters ``get_inputs`` and ``get_init_inputs`` name
    (``call_with_config`` passes no others); None when one of them takes ``**kwargs`` (every key reaches it)."""
    names: set[str] = set()
    for fn in (module.get_inputs, module.get_init_inputs):
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            return None
        if any(p.kind is p.VAR_KEYWORD for p in params):
            return None
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return frozenset(names)


def check_config_keys(config: dict, accepts: frozenset[str] | None, where: str) -> None:
    """Raise SpecError when ``config`` has a key outside ``accepts`` (``accepted_config_keys``): such a key would be
    dropped silently, and the config run at other sizes than its label says."""
    if accepts is None:
        return
    unknown = [k for k in config if k not in accepts]
    if unknown:
        takes = ", ".join(sorted(accepts)) or "no keys"
        raise SpecError(f"{where}: key {unknown[0]!r} is not a parameter of get_inputs() or get_init_inputs() "
                        f"(they take: {takes}); the config would run without it")


def _configs(module, name: str) -> tuple[list[dict], bool]:
    grid, fn = getattr(module, "CONFIGS", None), getattr(module, "get_configs", None)
    if grid is not None and fn is not None:
        raise SpecError(f"{name} defines both CONFIGS and get_configs(); keep one")
    if fn is not None:
        try:
            with running_reference(getattr(module, "__file__", None) or name, "get_configs()"):
                grid = fn()
        except SpecError:
            raise
        except Exception as e:
            path = getattr(module, "__file__", None) or name
            raise SpecError(f"get_configs() raised {type(e).__name__}: {e}{_at(e, path)}", reference=str(path),
                            line=reference_line(e, path)) from e
    if grid is None:
        return [{}], False
    where = "get_configs()" if fn is not None else "CONFIGS"
    if not isinstance(grid, (list, tuple)) or not grid:
        raise SpecError(f"{where} must be a non-empty list of dicts, got {_describe(grid)}")
    for k, cfg in enumerate(grid):
        if not isinstance(cfg, dict) or not all(isinstance(key, str) for key in cfg):
            raise SpecError(f"{where} must be a non-empty list of dicts with str keys; item {k} is {_describe(cfg)}")
    return [dict(c) for c in grid], True


def _extensions(module, name: str, configs: list[dict]) -> dict:
    out = {}
    free = tuple(getattr(module, "FREE_DIMS", ()) or ())
    for key in free:
        bad = [c for c in configs if not isinstance(c.get(key), int) or isinstance(c.get(key), bool)]
        if bad:
            raise SpecError(f"FREE_DIMS names {key!r}, but config {bad[0]} has no integer {key!r}")
    out["free_dims"] = free
    dists = getattr(module, "DISTRIBUTIONS", None)
    if dists is not None:
        custom = dict(dists) if isinstance(dists, dict) else {}
        names = list(dists)
        unknown = [d for d in names if d not in ALL_DISTRIBUTIONS and not callable(custom.get(d))]
        if unknown or not names:
            raise SpecError(f"DISTRIBUTIONS: unknown distribution {unknown[0] if unknown else None!r}; known: "
                            f"{', '.join(PUBLIC_DISTRIBUTIONS)} (or a dict name -> fn(shape, generator))")
        out["distributions"], out["custom_distributions"] = tuple(names), {k: v for k, v in custom.items()
                                                                          if callable(v)}
    extra = getattr(module, "EXTRA_DISTRIBUTIONS", None)
    if extra is not None:  # played LLM session 39: a clamp at |x| = 7 met by few values of the default draws
        known = out.get("distributions", tuple(ALL_DISTRIBUTIONS))
        if not isinstance(extra, dict) or not extra or not all(callable(f) for f in extra.values()):
            raise SpecError("EXTRA_DISTRIBUTIONS must be a dict name -> fn(shape, generator) -> float32 tensor")
        if clash := [n for n in extra if n in known or n in ALL_DISTRIBUTIONS]:
            raise SpecError(f"EXTRA_DISTRIBUTIONS: {clash[0]!r} is a distribution's name already")
        out["distributions"] = (*known, *extra)
        out["custom_distributions"] = {**out.get("custom_distributions", {}), **extra}
    out["fixed_inputs"] = frozenset(getattr(module, "FIXED_INPUTS", ()) or ())
    special = getattr(module, "SPECIAL_VALUES", None)
    if special is not None:  # played LLM session 44: a merge of attention states' +inf lse, drawn by no distribution
        if not isinstance(special, dict) or not special or not all(
                isinstance(k, int) and k >= 0 and isinstance(v, (list, tuple)) and v and
                all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v) for k, v in special.items()):
            raise SpecError(f"SPECIAL_VALUES must be a dict {{input position: [numbers]}}, e.g. {{1: [float('inf'), "
                            f"float('-inf')]}}, got {special!r}")
        out["special_values"] = {k: tuple(v) for k, v in special.items()}
        out["distributions"] = (*out.get("distributions", tuple(ALL_DISTRIBUTIONS)), SPECIAL)
    dtypes = getattr(module, "DTYPES", None)
    if isinstance(dtypes, (str, torch.dtype)):
        out["dtypes"] = parse_dtype(dtypes, "DTYPES")
    elif isinstance(dtypes, (list, tuple)):
        out["dtypes"] = {k: parse_dtype(d, f"DTYPES[{k}]") for k, d in enumerate(dtypes) if d is not None}
    elif isinstance(dtypes, dict):
        out["dtypes"] = {int(k): parse_dtype(d, f"DTYPES[{k}]") for k, d in dtypes.items() if d is not None}
    elif dtypes is not None:
        raise SpecError(f"DTYPES must be a dtype name, a list or a dict of them, got {_describe(dtypes)}")
    out["tolerances"] = _tolerances(getattr(module, "TOLERANCES", None) or {})
    out["keep_params"] = bool(getattr(module, "KEEP_PARAMS", False))
    small = getattr(module, "SMALL_CONFIG", None)
    if small is not None and not isinstance(small, dict):
        raise SpecError(f"SMALL_CONFIG must be a dict, got {_describe(small)}")
    out["small_config"] = small
    return out


def _tolerances(table) -> dict:
    if not isinstance(table, dict):
        raise SpecError(f"TOLERANCES must be a dict {{dtype name: (atol, rtol)}}, got {_describe(table)}")
    out = {}
    for key, value in table.items():
        dtype = parse_dtype(key, "TOLERANCES")
        if isinstance(value, dict):
            value = (value.get("atol"), value.get("rtol"), value.get("rel_l2"))
        value = tuple(value) if isinstance(value, (list, tuple)) else ()
        if len(value) == 2:
            default = DEFAULT_TOLERANCES.get(dtype, DEFAULT_TOLERANCES[torch.float32])
            value = (*value, max(value[1], default.rel_l2))
        if len(value) != 3 or not all(isinstance(v, (int, float)) and v >= 0 for v in value):
            raise SpecError(f"TOLERANCES[{key!r}] must be (atol, rtol) or (atol, rtol, rel_l2) of numbers >= 0, got "
                            f"{table[key]!r}")
        out[dtype] = Tolerance(*(float(v) for v in value))
    return out


__all__ = ["ALL_DISTRIBUTIONS", "DEFAULT_TOLERANCES", "HIDDEN", "PUBLIC_DISTRIBUTIONS", "ReferenceInfo", "Roofline",
           "SPECIAL", "Spec", "Tolerance", "accepted_config_keys", "call_with_config", "cast_floating",
           "check_config_keys", "identical", "import_file", "load_spec", "metadata", "normalize_outputs",
           "public_distribution_text"]
