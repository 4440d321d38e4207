"""Records of the evaluator: requests and results, as pydantic models (JSON on disk and over the worker pipe).

In: built by ``evaluator.correctness``, ``evaluator.timing`` and ``evaluator.worker``. Out: ``.model_dump_json()``.
Guarantees: every field is documented; a result always says which status it ended in and, when not "ok", the first
failure in the form the agent loop feeds back.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Status = Literal["ok", "spec_error", "compile_error", "mismatch", "guard_violation", "candidate_error", "timeout",
                 "crash", "internal_error"]
"""candidate_error: the candidate failed otherwise (its module does not import, no ModelNew, its forward raised)."""


class EvalRequest(BaseModel):
    """What to evaluate."""

    kernel_path: str = Field(description="the candidate module (defines class ModelNew)")
    reference_path: str = Field(description="the reference module (KernelBench format, optional config grid)")
    configs: list[dict] | None = Field(None, description="configs to run (default: the spec's grid)")
    overrides: dict = Field(default_factory=dict, description="keys set in every config (a list value: one config "
                            "per value), e.g. {'M': 1000} from `tileagent eval --config M=1000`; duplicates dropped")
    device: str = Field("auto", description="'cuda', 'cuda:N', 'cpu' or 'auto' (cuda when available)")
    seeds: int = Field(5, description="random seeds per config and input distribution")
    distributions: list[str] | None = Field(None, description="input distributions to check (default: all of the "
                                            "spec's, hidden ones included); fewer make a quick check")
    timing: bool = Field(True, description="time candidate and baselines (CUDA only)")
    timing_trials: int | None = Field(None, description="timed trials per function (default evaluator.timing.TRIALS); "
                                      "fewer make a quick screening (the autotuner's)")
    plan_configs: list[dict] | None = Field(None, description="configs whose kernels are compiled for the GPU and "
                                            "sized (resources, occupancy, waves) after the checks pass, shapes only, "
                                            "nothing runs (compiler.resources.dry_run): on the CPU the configs as "
                                            "the GPU runs them (free dims not shrunk); default: the checked configs")
    keep_going: bool = Field(False, description="check every config even after one fails: a failing config gets a "
                             "ConfigResult with correct=False and the failure's message in its notes; the status and "
                             "failure are the first failing config's")
    compile_timeout_s: float = Field(120.0, description="limit for loading the reference and the candidate; also "
                                     "added to the first config's check (its kernels build) and to each timing")
    run_timeout_s: float = Field(120.0, description="limit for checking one config, and (plus compile_timeout_s, "
                                 "for torch.compile) for timing it")
    full_size_s: float = Field(90.0, description="on the CPU, the time the configs checked at smaller sizes may take "
                               "to run once at larger ones after the checks pass (evaluator.full_size); 0: not run")


RUN_TIMEOUT_S = 300.0
"""The limit for checking one config that ``tileagent generate`` (``LoopOptions``) and ``tileagent eval`` give by
default (``EvalRequest``'s own default stays lower, for the API's quick checks). One value for both: played LLM,
session 27, eval's former 120 s timed out on a kernel that generate had passed in 294 s."""


class Timing(BaseModel):
    """One timed function: medians over trials, L2 flushed before each trial."""

    median_ms: float
    iqr_ms: float = Field(description="interquartile range of the trials")
    trials: int
    outliers: int = Field(0, description="trials beyond 1.5 IQR of the quartiles")


class ConfigResult(BaseModel):
    """The outcome for one config of the grid."""

    config: dict
    evaluated_at: dict | None = Field(None, description="the config checked, where it differs from ``config`` (on "
                                      "the CPU, a config too large for the interpreter is checked at SMALL_CONFIG's "
                                      "sizes)")
    correct: bool
    checks: int = Field(0, description="candidate runs compared with the reference")
    max_abs_err: float | None = Field(None, description="the worst max abs error over the checks of the published "
                                      "input distributions")
    rel_l2: float | None = Field(None, description="||out - ref|| / ||ref|| over all checks, worst case")
    candidate: Timing | None = None
    eager: Timing | None = None
    compiled: Timing | None = Field(None, description="torch.compile of the reference")
    speedup_eager: float | None = None
    speedup_compiled: float | None = None
    roofline_pct: float | None = Field(None, description="% of the bound (measured copy bandwidth or matmul rate)")
    bound: Literal["memory", "compute"] | None = None
    seed: int | None = Field(None, description="the evaluation's base seed, drawn from the OS (inputs, tail sizes and "
                             "timed trials derive from it); check_candidate(..., seed=...) replays it")
    notes: list[str] = Field(default_factory=list, description="flags such as degenerate references")
    seconds: dict[str, float] = Field(default_factory=dict, description="wall seconds the worker spent on this "
                                      "config: 'check' (every seed, distribution and tail size) and, when timed, "
                                      "'timing' (the candidate and the baselines, torch.compile's compile included "
                                      "the first time)")


class EvalResult(BaseModel):
    """The outcome of one request."""

    status: Status
    message: str = ""
    failure: dict | None = Field(None, description="the first failure (EvalError.to_dict()), fed back to drafters")
    configs: list[ConfigResult] = Field(default_factory=list)
    device: str = ""
    timing_available: bool = False
    plans: list[dict] = Field(default_factory=list, description="per plan config: {'config', 'launches': "
                              "[compiler.resources.KernelResources.to_dict()], 'bytes': the inputs' and ModelNew's "
                              "tensors' bytes} or {'config', 'unavailable': why}")
