"""evaluator.spec: KernelBench files load unchanged, the extensions work, and every bad file gets an exact message."""

import textwrap

import pytest
import torch

from tileagent.evaluator.errors import SpecError
from tileagent.evaluator.spec import (
    ALL_DISTRIBUTIONS,
    HIDDEN,
    PUBLIC_DISTRIBUTIONS,
    Tolerance,
    load_spec,
    public_distribution_text,
)
from tests.conftest import REPO

GOOD = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(4, 8)]

def get_init_inputs():
    return []
"""


def write(tmp_path, text: str, name: str = "ref.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def message(tmp_path, text: str) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    return info.value.message


# -- exact messages for bad files --------------------------------------------------------------------------------------


def test_syntax_error_gives_file_line_and_reason(tmp_path):
    assert message(tmp_path, "import torch\n\nx = (1,\n") == "ref.py:3: syntax error: '(' was never closed"


def test_missing_model_class(tmp_path):
    assert message(tmp_path, GOOD.replace("class Model(", "class Other(")) == (
        "ref.py defines no class Model (KernelBench format: class Model(nn.Module) whose forward is the reference)")


def test_model_that_is_not_a_module(tmp_path):
    text = GOOD.replace("class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)",
                        "Model = 3")
    assert message(tmp_path, text) == "ref.py: Model is a int (3), not a torch.nn.Module subclass"


def test_missing_get_inputs(tmp_path):
    assert message(tmp_path, GOOD.replace("def get_inputs", "def make_inputs")) == (
        "ref.py defines no function get_inputs() (KernelBench format: it returns the list of input tensors)")


def test_missing_get_init_inputs(tmp_path):
    assert message(tmp_path, GOOD.replace("def get_init_inputs", "def init_inputs")) == (
        "ref.py defines no function get_init_inputs() (KernelBench format: it returns Model's constructor arguments, "
        "[] for none)")


def test_get_inputs_returning_a_non_tensor_names_its_position_and_type(tmp_path):
    text = GOOD.replace("return [torch.randn(4, 8)]", "return [torch.randn(4, 8), 3]")
    assert message(tmp_path, text) == ("get_inputs() returned a non-tensor at position 1: int (3); every input must "
                                       "be a torch.Tensor (put constants in get_init_inputs())")


def test_get_inputs_returning_a_tensor_instead_of_a_list(tmp_path):
    text = GOOD.replace("return [torch.randn(4, 8)]", "return torch.randn(4, 8)")
    assert message(tmp_path, text) == "get_inputs() returned a Tensor, not a list of tensors"


def test_reference_raising_gives_the_exception(tmp_path):
    text = GOOD.replace("return torch.relu(x)", "raise RuntimeError('boom')")
    assert message(tmp_path, text) == "Model.forward raised RuntimeError: boom at ref.py:7"  # names the line


def test_reference_raising_on_a_config_names_the_config(tmp_path):
    text = GOOD.replace("return torch.relu(x)", "raise ValueError('bad size')").replace(
        "def get_inputs():\n    return [torch.randn(4, 8)]", "def get_inputs(M):\n    return [torch.randn(M, 8)]")
    assert message(tmp_path, text + "\nCONFIGS = [{'M': 3}]\n") == \
        "Model.forward raised ValueError: bad size (config {'M': 3}) at ref.py:7"


def test_non_deterministic_reference(tmp_path):
    text = GOOD.replace("return torch.relu(x)", "return x + torch.rand_like(x)")
    assert message(tmp_path, text).startswith(
        "Model.forward is non-deterministic: two runs on the same inputs differ (output 0, max abs diff ")
    assert message(tmp_path, text).endswith("; a reference must be deterministic")


def test_non_deterministic_reference_with_outputs_too_large_to_keep(tmp_path, monkeypatch):
    """Outputs past KEPT_OUTPUT_BYTES are compared by fingerprint: the second run gets their memory."""
    from tileagent.evaluator import spec

    monkeypatch.setattr(spec, "KEPT_OUTPUT_BYTES", 16)
    assert "output 0, max abs diff not known: the first run's outputs were not kept" in \
        message(tmp_path, GOOD.replace("return torch.relu(x)", "return x + torch.rand_like(x)"))
    load_spec(write(tmp_path, GOOD))  # a deterministic one passes


def test_output_of_the_wrong_type(tmp_path):
    text = GOOD.replace("return torch.relu(x)", "return 'relu'")
    assert message(tmp_path, text) == ("Model.forward returned a str ('relu'); the output must be a tensor or a tuple "
                                       "of tensors")


def test_tuple_output_with_a_non_tensor(tmp_path):
    text = GOOD.replace("return torch.relu(x)", "return torch.relu(x), 2.0")
    assert message(tmp_path, text) == ("Model.forward returned a tuple whose item 1 is a float (2.0); the output must "
                                       "be a tensor or a tuple of tensors")


def test_import_raising(tmp_path):
    assert message(tmp_path, "raise ImportError('no such thing')\n") == (
        "ref.py: importing it raised ImportError: no such thing")


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="cannot read it"):
        load_spec(tmp_path / "nope.py")


def test_get_inputs_raising(tmp_path):
    text = GOOD.replace("return [torch.randn(4, 8)]", "raise KeyError('M')")
    assert message(tmp_path, text) == "get_inputs() raised KeyError: 'M' at ref.py:10"


def test_model_constructor_raising(tmp_path):
    text = GOOD.replace("class Model(nn.Module):", "class Model(nn.Module):\n    def __init__(self, n):\n"
                        "        super().__init__()\n")
    assert message(tmp_path, text) == ("Model(*get_init_inputs()) raised TypeError: Model.__init__() missing 1 "
                                       "required positional argument: 'n'")


@pytest.mark.parametrize("extra, expected", [
    ("CONFIGS = []", "CONFIGS must be a non-empty list of dicts, got list"),
    ("CONFIGS = [{'M': 1}, (2,)]", "CONFIGS must be a non-empty list of dicts with str keys; item 1 is tuple"),
    ("CONFIGS = [{'M': 1}]\ndef get_configs():\n    return []",
     "ref.py defines both CONFIGS and get_configs(); keep one"),
    ("def get_configs():\n    raise OSError('x')", "get_configs() raised OSError: x at ref.py:16"),
    ("CONFIGS = [{'M': 1}]\nFREE_DIMS = ['N']", "FREE_DIMS names 'N', but config {'M': 1} has no integer 'N'"),
    ("DTYPES = 'float12'", ("DTYPES: unknown dtype 'float12'; use one of bf16, bfloat16, double, float, float16, "
                            "float32, float64, fp16, fp32, fp64, half")),
    ("TOLERANCES = {'float16': (1e-2,)}", ("TOLERANCES['float16'] must be (atol, rtol) or (atol, rtol, rel_l2) of "
                                           "numbers >= 0, got (0.01,)")),
    ("DISTRIBUTIONS = ['normal', 'cauchy']", ("DISTRIBUTIONS: unknown distribution 'cauchy'; known: normal, uniform, "
                                              "normal_x3, normal_x0.01, negative (or a dict name -> fn(shape, "
                                              "generator))")),
    ("EXTRA_DISTRIBUTIONS = ['x4']", "EXTRA_DISTRIBUTIONS must be a dict name -> fn(shape, generator) -> float32 "
                                     "tensor"),
    ("EXTRA_DISTRIBUTIONS = {'normal_x3': lambda s, g: None}", "EXTRA_DISTRIBUTIONS: 'normal_x3' is a "
                                                                "distribution's name already"),
    ("SPECIAL_VALUES = {1: []}", "SPECIAL_VALUES must be a dict {input position: [numbers]}, e.g. {1: [float('inf'), "
                                 "float('-inf')]}, got {1: []}"),
    ("SPECIAL_VALUES = {'x': [1.0]}", "SPECIAL_VALUES must be a dict {input position: [numbers]}, e.g. {1: "
                                      "[float('inf'), float('-inf')]}, got {'x': [1.0]}"),
    ("SPECIAL_VALUES = {4: [float('inf')]}", "SPECIAL_VALUES names input position 4, but get_inputs returns 1 "
                                             "input(s)"),
])
def test_bad_extension(tmp_path, extra, expected):
    assert message(tmp_path, GOOD + "\n" + extra + "\n") == expected


def test_a_file_that_is_not_utf8_is_named_with_the_offending_byte(tmp_path):
    path = tmp_path / "ref.py"
    path.write_bytes(GOOD.encode() + b"# caf\xe9\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.message == f"ref.py: not UTF-8 text (byte 0xe9 at offset {len(GOOD) + 5}); save it as UTF-8"


def test_sys_exit_at_import_is_the_files_error(tmp_path):
    assert message(tmp_path, "import sys\nsys.exit(0)\n" + GOOD) == (
        "ref.py: importing it called sys.exit(0); a module must not exit")


@pytest.mark.parametrize("extra, expected", [
    ("CONFIGS = [{'M': 1024, 'N': 4096}]", "ref.py: CONFIGS[0] {'M': 1024, 'N': 4096}: key 'M' is not a parameter of "
     "get_inputs() or get_init_inputs() (they take: no keys); the config would run without it"),
    ("def get_configs():\n    return [{'n': 2}]", "ref.py: get_configs()[0] {'n': 2}: key 'n' is not a parameter "
     "of get_inputs() or get_init_inputs() (they take: no keys); the config would run without it"),
    ("SMALL_CONFIG = {'M': 8}", "ref.py: SMALL_CONFIG {'M': 8}: key 'M' is not a parameter of get_inputs() or "
     "get_init_inputs() (they take: no keys); the config would run without it"),
])
def test_a_config_key_that_reaches_no_function_is_an_error(tmp_path, extra, expected):
    assert message(tmp_path, GOOD + "\n" + extra + "\n") == expected


def test_config_keys_reach_get_inputs_or_get_init_inputs_or_kwargs(tmp_path):
    takes = GOOD.replace("def get_inputs():", "def get_inputs(M, N=8):").replace(
        "def get_init_inputs():", "def get_init_inputs(scale=1.0):")
    assert message(tmp_path, takes + "\nCONFIGS = [{'M': 4, 'N': 8, 'K': 2}]\n").endswith(
        "key 'K' is not a parameter of get_inputs() or get_init_inputs() (they take: M, N, scale); the config would "
        "run without it")
    assert load_spec(write(tmp_path, takes + "\nCONFIGS = [{'M': 4, 'N': 8, 'scale': 2.0}]\n")).configs[0]["M"] == 4
    spread = GOOD.replace("def get_inputs():", "def get_inputs(**cfg):")
    assert load_spec(write(tmp_path, spread + "\nCONFIGS = [{'anything': 1}]\n")).configs == [{"anything": 1}]


# -- what a good file gives ---------------------------------------------------------------------------------------------


def test_plain_kernelbench_file_has_one_empty_config(tmp_path):
    spec = load_spec(write(tmp_path, GOOD))
    assert spec.configs == [{}] and not spec.has_grid and spec.free_dims == ()
    assert spec.distributions == tuple(ALL_DISTRIBUTIONS)


def test_extra_distributions_are_checked_besides_every_default_one(tmp_path):
    """Played LLM session 39: GPT-OSS's SwiGLU clamps at |x| = 7, which the default draws reach with few values; a
    reference adds the range it needs, and the hidden distributions stay."""
    spec = load_spec(write(tmp_path, GOOD + "\nEXTRA_DISTRIBUTIONS = {'x8': lambda s, g: torch.randn(s, generator=g) "
                                            "* 8}\n"))
    assert spec.distributions == (*ALL_DISTRIBUTIONS, "x8")
    x = spec.make_inputs({}, 0, "x8")[0]
    assert 6.0 < x.float().std().item() < 10.0


GRID = """
import torch
import torch.nn as nn

CONFIGS = [{"M": 6, "N": 16}, {"M": 4, "N": 32}]
FREE_DIMS = ["M"]
TOLERANCES = {"float16": (2e-2, 3e-2)}

def BYTES(cfg):
    return cfg["M"] * cfg["N"] * 4

def FLOPS(M, N):
    return M * N

class Model(nn.Module):
    def __init__(self, N):
        super().__init__()
        self.w = nn.Parameter(torch.ones(N))
        self.b = nn.Parameter(torch.randn(N))

    def forward(self, x, idx):
        return x * self.w + self.b, idx + 1

def get_inputs(M, N, **unused):
    return [torch.randn(M, N, dtype=torch.float16), torch.randint(3, 9, (M,))]

def get_init_inputs(N):
    return [N]
"""


def test_config_grid_builds_inputs_and_models_per_config(tmp_path):
    spec = load_spec(write(tmp_path, GRID))
    assert spec.configs == [{"M": 6, "N": 16}, {"M": 4, "N": 32}]
    x, idx = spec.make_inputs({"M": 4, "N": 32}, seed=1, distribution="uniform")
    assert x.shape == (4, 32) and x.dtype == torch.float16 and x.abs().max() <= 1
    assert idx.dtype == torch.int64 and 3 <= int(idx.min()) and int(idx.max()) < 9  # integers keep dtype and range
    model = spec.make_model({"M": 4, "N": 32})
    assert model.w.shape == (32,) and model.redrawn == ["w"]  # the constant weight is re-drawn, b is not
    assert not torch.equal(model.w, torch.ones(32))


def test_inputs_are_a_function_of_config_seed_and_distribution(tmp_path):
    spec = load_spec(write(tmp_path, GRID))
    cfg = spec.configs[0]
    a = spec.make_inputs(cfg, 0, "normal")[0]
    assert torch.equal(a, spec.make_inputs(cfg, 0, "normal")[0])
    assert not torch.equal(a, spec.make_inputs(cfg, 1, "normal")[0])
    assert not torch.equal(a, spec.make_inputs(cfg, 0, "normal_x3")[0])
    assert (spec.make_inputs(cfg, 0, "negative")[0] <= 0).all()


@pytest.mark.parametrize("name", sorted(ALL_DISTRIBUTIONS))
def test_every_distribution_draws_finite_values_of_the_shape(tmp_path, name):
    spec = load_spec(write(tmp_path, GRID))
    x = spec.make_inputs({"M": 6, "N": 16}, 0, name)[0]
    assert x.shape == (6, 16) and torch.isfinite(x).all()


def test_tails_tolerances_and_roofline(tmp_path):
    spec = load_spec(write(tmp_path, GRID))
    assert spec.tail_configs({"M": 2, "N": 32}) == [{"M": 1, "N": 32}, {"M": 5, "N": 32}]
    assert spec.tail_configs({"M": 1, "N": 16}) == [{"M": 4, "N": 16}]
    # no tail above the reference's largest M (6): its own model may not accept more
    assert spec.tail_configs({"M": 6, "N": 16}) == [{"M": 5, "N": 16}, {"M": 3, "N": 16}]
    assert spec.tolerance(torch.float16) == Tolerance(2e-2, 3e-2, 3e-2)
    assert spec.tolerance(torch.float32) == Tolerance(1e-4, 1e-4, 1e-4)
    assert spec.tolerance(torch.int64) == Tolerance(0.0, 0.0, 0.0)
    roof = spec.roofline({"M": 4, "N": 32})
    assert (roof.bytes, roof.flops, roof.derived) == (512.0, 128.0, False)


def test_roofline_bytes_default_to_inputs_plus_outputs(tmp_path):
    spec = load_spec(write(tmp_path, GOOD))
    roof = spec.roofline({})
    assert (roof.bytes, roof.flops, roof.derived) == (4 * 8 * 4 * 2.0, None, True)


def test_dtypes_cast_inputs_and_weights(tmp_path):
    text = GRID.replace('TOLERANCES = {"float16": (2e-2, 3e-2)}', 'DTYPES = "bfloat16"')
    spec = load_spec(write(tmp_path, text))
    x, idx = spec.make_inputs(spec.configs[0], 0, "normal")
    assert x.dtype == torch.bfloat16 and idx.dtype == torch.int64
    assert spec.make_model(spec.configs[0]).w.dtype == torch.bfloat16


def test_per_input_dtypes_fixed_inputs_and_custom_distributions(tmp_path):
    text = GOOD.replace("return [torch.randn(4, 8)]", "return [torch.randn(4, 8), torch.rand(4) + 1]").replace(
        "def forward(self, x):\n        return torch.relu(x)", "def forward(self, x, s):\n        return x * s[:, None]")
    text += ("\nDTYPES = [None, 'float64']\nFIXED_INPUTS = [1]\n"
             "DISTRIBUTIONS = {'ones': lambda shape, g: torch.ones(shape)}\n")
    spec = load_spec(write(tmp_path, text))
    assert spec.distributions == ("ones",)
    x, s = spec.make_inputs({}, 0, "ones")
    assert torch.equal(x, torch.ones(4, 8)) and s.dtype == torch.float64 and (s >= 1).all()


def test_keep_params_turns_redrawing_off(tmp_path):
    spec = load_spec(write(tmp_path, GRID + "\nKEEP_PARAMS = True\n"))
    assert spec.make_model(spec.configs[0]).redrawn == []


def test_hidden_distributions_stay_out_of_drafter_text():
    text = public_distribution_text()
    assert set(PUBLIC_DISTRIBUTIONS) <= set(ALL_DISTRIBUTIONS) and HIDDEN == set(ALL_DISTRIBUTIONS) - set(
        PUBLIC_DISTRIBUTIONS)
    assert len(HIDDEN) >= 2
    doc = (REPO / "docs" / "evaluator.md").read_text()
    for name in HIDDEN:
        assert name not in text and f"`{name}`" not in doc and f"'{name}'" not in doc
        assert ALL_DISTRIBUTIONS[name][1] not in doc


def test_reference_files_of_the_test_corpora_load():
    for path in sorted((REPO / "tests" / "redteam").glob("ref_*.py")):
        assert load_spec(path).configs


MERGE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    \"\"\"Two partial softmax results merged by their log-sum-exps; a +inf lse marks an empty part (weight 0), and
    where both parts are empty the first is kept.\"\"\"
    def forward(self, a, lse_a, b, lse_b):
        la = torch.where(lse_a == float("inf"), float("-inf"), lse_a)
        lb = torch.where(lse_b == float("inf"), float("-inf"), lse_b)
        m = torch.maximum(la, lb)
        m = torch.where(m == float("-inf"), 0.0, m)
        pa, pb = torch.exp(la - m), torch.exp(lb - m)
        wa = torch.where(pa + pb > 0, pa / (pa + pb), 1.0)
        return wa[:, None] * a + (1 - wa)[:, None] * b

SPECIAL_VALUES = {1: [float("inf"), float("-inf")], 3: [float("inf"), float("-inf")]}

def get_inputs():
    return [torch.randn(64, 8), torch.randn(64), torch.randn(64, 8), torch.randn(64)]

def get_init_inputs():
    return []
"""


def naive_merge(a, lse_a, b, lse_b):
    """The merge without the reference's rules for infinite lse (played LLM session 44's probe: NaN there)."""
    m = torch.maximum(lse_a, lse_b)
    pa, pb = torch.exp(lse_a - m), torch.exp(lse_b - m)
    return (pa[:, None] * a + pb[:, None] * b) / (pa + pb)[:, None]


def test_special_values_are_planted_in_one_more_public_distribution(tmp_path):
    """Played LLM session 44: a merge of attention states without its +inf / both -inf rules passed every check, as
    no distribution draws an infinity. SPECIAL_VALUES plants them in 'special_values', and the naive merge fails
    there while the reference's own arithmetic passes."""
    from tileagent.evaluator.correctness import _ConfigCheck
    from tileagent.evaluator.spec import SPECIAL

    spec = load_spec(write(tmp_path, MERGE))
    assert spec.distributions == (*ALL_DISTRIBUTIONS, SPECIAL) and SPECIAL not in HIDDEN
    inputs = spec.make_inputs({}, 3, SPECIAL)
    for k in (1, 3):
        assert 4 <= int(torch.isposinf(inputs[k]).sum()) <= 16 and 4 <= int(torch.isneginf(inputs[k]).sum()) <= 16
    assert torch.isfinite(inputs[0]).all() and torch.isfinite(inputs[2]).all()
    assert all(torch.equal(x, y) for x, y in zip(inputs, spec.make_inputs({}, 3, SPECIAL)))  # seeded
    assert all(torch.isfinite(x).all() for x in spec.make_inputs({}, 3, "normal"))
    check = _ConfigCheck(spec, None, "cpu", 0)
    where = {"config": {}, "seed": 3, "distribution": SPECIAL, "hidden": False}
    ref = spec.run_reference(spec.make_model({}), [t.clone() for t in inputs], {})
    failure = check.compare((naive_merge(*inputs),), ref, where, 1)
    assert failure is not None and "expected" in failure.message and "got nan" in failure.message
    assert check.compare((spec.module.Model()(*inputs),), ref, where, 1) is None
    normal = spec.make_inputs({}, 3, "normal")
    assert check.compare((naive_merge(*normal),), spec.run_reference(spec.make_model({}), normal, {}), where, 1) is None


def test_special_values_of_an_integer_input_must_be_integers(tmp_path):
    ids = GOOD.replace("return [torch.randn(4, 8)]", "return [torch.randn(4, 8), torch.randint(0, 9, (4,))]").replace(
        "def forward(self, x):", "def forward(self, x, ids):")
    assert message(tmp_path, ids + "\nSPECIAL_VALUES = {1: [0.5]}\n") == (
        "SPECIAL_VALUES[1] holds (0.5,), but input 1 is int64: integer inputs take integer values only")
    spec = load_spec(write(tmp_path, ids + "\nSPECIAL_VALUES = {1: [-1]}\n"))
    ids_planted = spec.make_inputs({}, 0, "special_values")[1]
    assert ids_planted.dtype == torch.int64 and set(ids_planted.tolist()) <= set(range(9)) | {-1}


def test_inf_or_nan_planted_by_get_inputs_is_named_as_unchecked(tmp_path):
    """Played LLM 47: an author planted special values in get_inputs and took them for checked; the checks draw
    floating inputs afresh. The probe warns, naming the input and both ways to have them checked."""
    from tileagent.evaluator.probe import probe_reference

    planted = GOOD.replace("return [torch.randn(4, 8)]", "x = torch.randn(4, 8)\n    x[0, 0] = float('inf')\n"
                           "    return [x]")
    warning = ("get_inputs() puts inf or NaN into input 0, but the checks draw input 0 afresh from the input "
               "distributions: list such values in SPECIAL_VALUES = {0: [...]} to have them checked, or name 0 in "
               "FIXED_INPUTS to keep get_inputs' values")
    assert probe_reference(write(tmp_path, planted)).warnings == [warning]
    assert probe_reference(write(tmp_path, GOOD, "good.py")).warnings == []
    for kept in ("FIXED_INPUTS = [0]", "SPECIAL_VALUES = {0: [float('inf')]}"):
        assert load_spec(write(tmp_path, planted + kept + "\n", "kept.py")).unchecked_values({}) == []
