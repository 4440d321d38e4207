"""The sizes the CPU interpreter checks a config at (the evaluator's CPU path).

In: a loaded ``Spec`` and one config (free dims already at their SMALL_CONFIG sizes, ``tileagent.configs``). Out:
``interpreter_config(spec, config, configs) -> (the config to run, a note saying why it differs, or None)``
(``configs``: the list the config is one of). The interpreter needs minutes for a few hundred thousand elements, so a
config whose inputs and model tensors (parameters and buffers: a GEMM's weight) hold more than
``INTERPRETER_INPUT_ELEMENTS``, or whose outputs do, is checked smaller: its free dims halved while the other sizes
(which decide the schedule a GPU runs) stay as stated, else the sizes the reference's SMALL_CONFIG states halved
toward it as far as needed (the first stated first), else SMALL_CONFIG's sizes. Guarantees: sizes are counted on the
meta device (no values drawn, the reference's forward run on meta tensors for its outputs); a config whose inputs
cannot be counted there is kept as stated; outputs that cannot be counted there (a forward that reads values) count
as none; a model that cannot be built there counts as no tensors for the first test and sends a config that is too
large to SMALL_CONFIG's sizes. ``fit_tail`` gives a tail size over the limit with its other free dims halved until
it fits (the tails the evaluator checks: ``evaluator.correctness.check_candidate``).
"""

from __future__ import annotations

INTERPRETER_INPUT_ELEMENTS = 1 << 18
"""On the CPU, a config whose inputs hold more elements than this, or whose outputs do, is checked at smaller sizes
(``RULE``; the interpreter needs minutes for a few hundred thousand elements; see ``interpreter_config``)."""

TAILS_NOT_CHECKED = "tail sizes not checked"
"""How a config's note that some of its tail sizes were too large for the interpreter begins."""


RULE = ("the free dims (FREE_DIMS) halved until the inputs and model tensors fit, and the outputs too, other sizes "
        "as stated; where that is not enough, the sizes SMALL_CONFIG states halved toward it until they fit, the "
        "first it states alone first, then with the next (a config's last dims, its rows and planes, stay as stated "
        "where that fits, unless two configs would then be checked alike); else SMALL_CONFIG's sizes")
"""How a config too large for the interpreter is checked, as the prompt, the feedback, the CLI and the report say it."""


def interpreter_config(spec, config: dict, configs: list | None = None) -> tuple[dict, str | None]:
    """The config the CPU interpreter checks for ``config``, and why it differs: ``config`` itself when its inputs
    and model tensors hold at most ``INTERPRETER_INPUT_ELEMENTS`` elements and so do its outputs (both counted on the
    meta device), when the inputs' size cannot be told without real values, or when the reference states no
    SMALL_CONFIG; else ``config`` with its free dims (FREE_DIMS) halved (down to 1) until both fit, when that is
    enough and the model's parameters and buffers fit too (the other sizes, which decide the schedule a GPU runs, as
    stated: a softmax over a 256000-word vocabulary keeps its rows that wide); else ``config`` with the integer keys
    that SMALL_CONFIG states smaller halved toward SMALL_CONFIG's values until it fits, the first key SMALL_CONFIG
    states alone, then the first two together, and so on (``_leading_first``: played LLM, session 33, a depthwise
    7x7 conv's 56 x 56 planes were checked at 28 x 28 with C halved beside them, and a kernel wrong at 56 x 56
    passed), all of them together where that would check ``config`` as it checks another of ``configs`` (the list
    the config is one of; ``_toward_small_config``); else lowered to SMALL_CONFIG's values (other keys, and keys
    already smaller, kept). Inputs count with the model's parameters and buffers past ``SMALL_TENSOR`` elements: a
    linear layer's 4096 x 16384 weight at 40 tokens was checked as stated and took over 7 minutes. Outputs count on
    their own (the same limit; an elementwise op's output, as large as its input, changes nothing): a weight
    gradient dW = dY^T X of (4096, 4096) kept its 16.8 M outputs at every T the free dim was halved to, 0.6-1 s a
    call and ~300 calls a config (played LLM, session 27: three timeouts, no verdict)."""
    sized = _sized(spec, config)
    if not sized:
        return config, None
    try:
        weights = model_elements(spec, config)
        elements = spec.input_elements(config) + (weights or 0)
        outputs = output_elements(spec, config) or 0
        if elements <= INTERPRETER_INPUT_ELEMENTS and outputs <= INTERPRETER_INPUT_ELEMENTS:
            return config, None
        run, how = _free_dims_halved(spec, config, weights), "the free dims halved, the other sizes as stated"
        if run is None:
            run = _toward_small_config(spec, config, sized, configs)
            how = "the sizes SMALL_CONFIG states halved toward it"
        if run is None:
            run, how = {**config, **sized}, "the reference's SMALL_CONFIG sizes"
    except Exception:  # noqa: BLE001 - get_inputs needs real values: keep the config as stated
        return config, None
    text, stated = ", ".join(f"{k}={v}" for k, v in run.items()), ", ".join(f"{k}={v}" for k, v in config.items())
    if elements > INTERPRETER_INPUT_ELEMENTS:
        outs = f" and its outputs {outputs:,}" if outputs > INTERPRETER_INPUT_ELEMENTS else ""
        held = (f"the inputs and model tensors of {stated} hold {elements:,} elements{outs}, more than the "
                f"interpreter checks in time ({INTERPRETER_INPUT_ELEMENTS:,}{' each' if outs else ''})")
    else:
        held = (f"the outputs of {stated} hold {outputs:,} elements (its inputs and model tensors {elements:,}), "
                f"more than the interpreter checks in time ({INTERPRETER_INPUT_ELEMENTS:,} each)")
    return run, f"checked at {text} on the CPU interpreter ({how}): {held}; a GPU checks the config as stated"


def fits(spec, config: dict, weights: int | None = None) -> bool:
    """Whether the inputs and model tensors of ``config`` (``weights``: the model's, when the caller counted them)
    hold at most ``INTERPRETER_INPUT_ELEMENTS`` elements, and its outputs too (outputs not countable on the meta
    device count as none). Raises where ``get_inputs`` needs real values."""
    weights = model_elements(spec, config) if weights is None else weights
    if weights is None or spec.input_elements(config) + weights > INTERPRETER_INPUT_ELEMENTS:
        return False
    return (output_elements(spec, config) or 0) <= INTERPRETER_INPUT_ELEMENTS


def interpreter_configs(reference, configs: list[dict]) -> list[dict] | None:
    """``interpreter_config`` of each of ``configs`` for the reference at path ``reference``, or None when the
    reference does not load (the evaluation then reports why)."""
    from tileagent.evaluator.spec import load_spec

    try:
        spec = load_spec(reference, check=False)
    except Exception:  # noqa: BLE001 - any failure of the user's reference module
        return None
    return [interpreter_config(spec, c, configs)[0] for c in configs]


def _free_dims_halved(spec, config: dict, weights: int | None) -> dict | None:
    """``config`` with its free dims halved (rounding down, at least 1) until its inputs and the model's ``weights``
    (``model_elements``) fit the interpreter, and its outputs too (``fits``), or None when they never do (outputs
    made of the other dims only: a weight gradient's (N, K)), the config has no free dim, or the
    model's own tensors are too large (a GEMM's weight) or of unknown size."""
    free = [k for k in spec.free_dims if type(config.get(k)) is int]
    if not free or weights is None or weights > INTERPRETER_INPUT_ELEMENTS:
        return None
    run = dict(config)
    while not fits(spec, run, weights):
        if all(run[k] == 1 for k in free):
            return None
        run.update({k: max(1, run[k] // 2) for k in free})
    return run


def _toward_small_config(spec, config: dict, sized: dict, configs: list | None) -> dict | None:
    """``_leading_first``'s run of ``config``, unless another of ``configs`` (stated otherwise) gets the same one:
    then ``_halved_together``'s of every key of ``sized``. So two configs that differ stay apart: played LLM,
    session 22, an ALiBi softmax over S = 1024 and 2048 was checked twice at SMALL_CONFIG's S = 48, where its kernel
    took another schedule than at either size."""
    run = _leading_first(spec, config, sized)
    if run is None:
        return _halved_together(spec, config, sized)
    for other in configs or ():
        if other != config and interpreter_config(spec, other)[0] == run:
            return _halved_together(spec, config, sized)
    return run


def _sized(spec, config: dict) -> dict:
    """The integer keys that SMALL_CONFIG states smaller than ``config``, at SMALL_CONFIG's values, in its order."""
    small = spec.small_config or {}
    return {k: v for k, v in small.items() if type(v) is int and type(config.get(k)) is int and v < config[k]}


def _leading_first(spec, config: dict, sized: dict) -> dict | None:
    """``_halved_together`` over the first key of ``sized`` alone, then the first two, ...: the first run that fits
    while a later key keeps its stated size and none of the halved ones is down to its SMALL_CONFIG value (a batch
    or channel count shrinks before rows and planes, not to nothing); None when there is no such run."""
    keys = list(sized)
    for n in range(1, len(keys)):
        first = {k: sized[k] for k in keys[:n]}
        run = _halved_together(spec, config, first)
        if run is not None and all(run[k] > v for k, v in first.items()):
            return run
    return None


def _halved_together(spec, config: dict, sized: dict) -> dict | None:
    """``config`` with every key of ``sized`` (SMALL_CONFIG's smaller values) halved together, none below its
    SMALL_CONFIG value, until the inputs and the model's tensors fit, and the outputs too (``fits``); None when they
    fit only at SMALL_CONFIG's values (or the model cannot be counted)."""
    run = dict(config)
    while True:
        run = {**run, **{k: max(v, run[k] // 2) for k, v in sized.items()}}
        if run == {**config, **sized}:
            return None
        weights = model_elements(spec, run)
        if weights is None:
            return None
        if fits(spec, run, weights):
            return run


SMALL_TENSOR = 4096
"""Model tensors of at most this many elements (a norm's per-channel weight and bias) are not counted against the
interpreter's limit: they cost it nothing next to the inputs (played LLM session 37: an instance norm whose input
held exactly 2^18 elements was checked at half its batch for its 256 weights)."""


def model_elements(spec, config: dict) -> int | None:
    """The elements of the model's parameters and buffers at ``config`` (built on the meta device) larger than
    ``SMALL_TENSOR``, or None when the constructor needs real values."""
    import torch

    try:
        with torch.device("meta"):
            model = spec.module.Model(*spec.init_inputs(config))
    except Exception:  # noqa: BLE001 - a constructor that needs real values: its size is not known
        return None
    return sum(t.numel() for t in [*model.parameters(), *model.buffers()] if t.numel() > SMALL_TENSOR)


def output_elements(spec, config: dict) -> int | None:
    """The elements of the reference's outputs at ``config``: its forward run on the meta device (no values drawn,
    nothing computed), or None when the model, the inputs or the forward need real values."""
    import torch

    try:
        with torch.device("meta"):
            model = spec.module.Model(*spec.init_inputs(config))
        inputs = spec.sample_inputs(config, 0, "meta")
        with torch.no_grad():
            out = model(*inputs)
    except Exception:  # noqa: BLE001 - a forward that reads values (an index, .item()): its outputs are not counted
        return None
    outs = [out] if isinstance(out, torch.Tensor) else list(out) if isinstance(out, (list, tuple)) else []
    return sum(t.numel() for t in outs if isinstance(t, torch.Tensor))


def over_budget(spec, config: dict) -> str | None:
    """Why the sizes ``config`` (as a check runs it) are too large for the interpreter to check in time: the inputs
    and model tensors, or the outputs, hold more than ``INTERPRETER_INPUT_ELEMENTS`` (a size rule that could not
    shrink them: no SMALL_CONFIG, or SMALL_CONFIG's own sizes); None when both fit or cannot be counted on the meta
    device. A timeout's message says it, so that the feedback blames the sizes and not the kernel's schedule."""
    try:
        inputs = spec.input_elements(config) + (model_elements(spec, config) or 0)
    except Exception:  # noqa: BLE001 - get_inputs needs real values: not counted
        return None
    outputs = output_elements(spec, config) or 0
    parts = [f"its inputs and model tensors hold {inputs:,} elements"] if inputs > INTERPRETER_INPUT_ELEMENTS else []
    if outputs > INTERPRETER_INPUT_ELEMENTS:
        parts.append(f"its outputs hold {outputs:,} elements")
    return f"{' and '.join(parts)}, more than the {INTERPRETER_INPUT_ELEMENTS:,} the interpreter checks in time" \
        if parts else None


def fit_tail(spec, tail: dict, config: dict, limit: int) -> dict | None:
    """``tail`` (a tail of ``config`` along one free dim) with the other free dims halved, the last of FREE_DIMS
    first, until its inputs hold at most ``limit`` elements; None when none fits. A batch tail of attention is then
    checked at a shorter sequence (played LLM session 35: checked at B=1, S=25, the tail B=4 was over the limit and
    skipped, so a kernel reading batch 0's keys for every batch passed)."""
    moved = {k for k in spec.free_dims if tail.get(k) != config.get(k)}
    run = dict(tail)
    for k in reversed(spec.free_dims):
        while k not in moved and type(run.get(k)) is int and run[k] > 1:
            run = {**run, k: run[k] // 2}
            if not too_large(spec, run, limit):
                return run
    return None


def too_large(spec, config: dict, limit: int) -> bool:
    """Whether ``config``'s inputs hold more than ``limit`` elements (counted on the meta device; False when they
    cannot be counted: such a config is checked)."""
    try:
        return spec.input_elements(config) > limit
    except Exception:  # noqa: BLE001 - a get_inputs that reads what it drew: its size is not known, check it
        return False
