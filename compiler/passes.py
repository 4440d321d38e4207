"""The pass pipeline: one flat list of named passes per target, and the small pass manager that runs it.

In: a PrimFunc from the frontend, a ``Target`` (``compiler.target``) and ``Options``. Out: a ``Unit``: everything
the passes decided, each field written by one pass and read by later ones (layouts, one ``KernelPlan`` per
T.Kernel with its pipelines and shared-memory plan, the thread IR module, the CUDA source, the cubin).
Guarantees:

- Passes run in the order of ``pipeline(target)``; ``run(..., until=name)`` stops after that pass. A unit and its
  plans are immutable (frozen dataclasses): a pass returns a new unit and never changes what an earlier pass built.
- ``Unit.timings`` holds the seconds each pass took (``JITKernel.pass_timings()``; logged at DEBUG).
- ``Options.debug`` (or ``$TILEAGENT_DEBUG_IR=1``) verifies the IR after every pass (``compiler.verify``); a
  violation is an ``InternalCompilerError`` naming the pass.
- ``$TILEAGENT_PRINT_IR_AFTER=<pass>[,<pass>...]`` (or ``all``) writes the IR after those passes to stderr, as
  ``render(unit, pass)`` shows it (``JITKernel.get_ir(after=...)`` returns the same text).
- Anything but a ``CompileError`` raised inside a pass becomes an ``InternalCompilerError`` naming the pass.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from tileagent.compiler.diagnostics import CompileError, InternalCompilerError, ResourceError, TargetError
from tileagent.compiler.ir.stmt import Kernel, PrimFunc
from tileagent.compiler.target import Target

log = logging.getLogger("tileagent.compiler")

PRINT_IR_AFTER = "TILEAGENT_PRINT_IR_AFTER"
DEBUG_IR = "TILEAGENT_DEBUG_IR"


@dataclass(frozen=True)
class Options:
    """How to compile, besides the target. ``lowering_check``: on the ``cpu`` target, also run the GPU lowering (not
    the code generation) so that layout conflicts (L0xx) and what the CUDA backend cannot lower (E602) are reported
    without a GPU. ``nvrtc_options``: extra NVRTC flags. ``nvrtc_timeout_s``: the most NVRTC may take (E805).
    ``disabled_features``: target features the kernel may not use (pass config ``tl.disable_wgmma`` -> "wgmma");
    ``run`` lowers for the target without them (``effective_target``)."""

    lowering_check: bool = False
    debug: bool = False
    nvrtc_options: tuple = ()
    nvrtc_timeout_s: float = 120.0
    disabled_features: frozenset = frozenset()
    warp_specialize: bool = True


def effective_target(target: Target, options: Options = Options()) -> Target:
    """``target`` without the features ``options`` switch off and those the environment switches off for the process
    (``compiler.target.feature_switches``: ``TILEAGENT_ENABLE_WGMMA=0``). Every pass reads this target."""
    from tileagent.compiler.target import feature_switches

    return target.without(options.disabled_features | feature_switches())


@dataclass(frozen=True)
class KernelPlan:
    """What the passes decided for one T.Kernel. ``body``: the kernel body as the passes rewrote it (software
    pipelines, barriers); ``stages``: staged shared tile -> number of buffers; ``shared``: the ``SharedPlan``
    (offsets, reuse, scratch); ``packed``: 16-bit fragments kept as packed pairs for a gemm; ``hoisted``: pipelined
    gemms whose loop-invariant A operand is loaded into registers once, before the loop."""

    name: str
    kernel: Kernel
    scratch_bytes: int = 0
    body: tuple | None = None
    stages: dict = field(default_factory=dict)
    shared: object = None
    packed: frozenset = frozenset()
    hoisted: frozenset = frozenset()


@dataclass(frozen=True)
class Unit:
    """One compilation: the input and what each pass added."""

    func: PrimFunc
    target: Target
    options: Options = Options()
    layouts: object = None  # LayoutMap (infer_layouts)
    kernels: tuple = ()  # KernelPlan per T.Kernel (plan_scratch onwards)
    module: object = None  # tir.DeviceModule (lower_tile_ops)
    source: str | None = None  # CUDA C++ (codegen_cuda)
    ptx: str | None = None  # PTX (codegen_ptx); "" when compiler.targets.ptx does not cover the module
    cubin: bytes | None = None  # (nvrtc)
    timings: tuple = ()  # (pass name, seconds) in the order run

    def map_kernels(self, fn) -> "Unit":
        """This unit with ``fn(plan)`` in place of every KernelPlan."""
        return replace(self, kernels=tuple(fn(p) for p in self.kernels))


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Unit], Unit]
    doc: str


# ---- the passes -------------------------------------------------------------------------------------------------


def _check(u: Unit) -> Unit:
    from tileagent.compiler.check import check

    check(u.func)
    return u


def _coarsen(u: Unit) -> Unit:
    from tileagent.compiler.lower.coarsen import coarsen_blocks

    return replace(u, func=coarsen_blocks(u.func, u.target))


def _stage_epilogue(u: Unit) -> Unit:
    from tileagent.compiler.lower.stage_epilogue import stage_epilogues

    return replace(u, func=stage_epilogues(u.func, u.target))


def _infer_layouts(u: Unit) -> Unit:
    if u.layouts is not None:  # given by the caller (lower(func, layouts))
        return u
    from tileagent.compiler.desugar import desugar, split_masks
    from tileagent.compiler.layout.infer import infer_layouts

    from tileagent.compiler.instructions.tma import align_tiles

    # sliced fragment-to-fragment copies become the T.Parallel loops they mean; masks are split by tile
    func = split_masks(desugar(u.func))
    layouts = infer_layouts(func, u.target)
    align_tiles(func, layouts, u.target)  # TMA destinations on their swizzle atom (opt-in, sm_90a)
    return replace(u, func=func, layouts=layouts)


def _check_limits(u: Unit) -> Unit:
    from tileagent.compiler.limits import check_limits

    check_limits(u.func, u.layouts, u.target)
    return u


def _plan_scratch(u: Unit) -> Unit:
    from tileagent.compiler.lower import kernel_scratch_bytes

    kernels = [s for s in u.func.body if isinstance(s, Kernel)]
    plans = []
    for n, k in enumerate(kernels):
        name = f"{u.func.name}_kernel" + (f"_{n}" if len(kernels) > 1 else "")
        plans.append(KernelPlan(name, k, kernel_scratch_bytes(k, u.layouts)))
    return replace(u, kernels=tuple(plans))


def _plan_pipelines(u: Unit) -> Unit:
    from tileagent.compiler.instructions.tma import usable
    from tileagent.compiler.lower.pipeline import fit_pipelines

    def one(p: KernelPlan) -> KernelPlan:
        body, stages = fit_pipelines(p.name, p.kernel.body, u.layouts, p.scratch_bytes, u.target.shared_bytes,
                                     one_stage=usable(u.target))
        return replace(p, body=body, stages=stages)

    return u.map_kernels(one)


def _insert_barriers(u: Unit) -> Unit:
    from tileagent.compiler.lower.barriers import insert_barriers

    return u.map_kernels(lambda p: replace(p, body=insert_barriers(p.body, p.kernel.thread_vars, p.kernel)))


def _plan_shared(u: Unit) -> Unit:
    from tileagent.compiler.layout.staging_pad import staging_pads
    from tileagent.compiler.lower.smem import check_fits, plan_shared

    def one(p: KernelPlan) -> KernelPlan:
        plan = plan_shared(p.body, u.layouts.shared, p.scratch_bytes, p.stages)
        check_fits(plan, p.kernel, u.target)
        pads = staging_pads(p.body, u.layouts.fragments, u.layouts.shared)
        if pads:  # adopted where the padded tiles cost no block per SM
            padded = plan_shared(p.body, {**u.layouts.shared, **pads}, p.scratch_bytes, p.stages)
            per_sm = u.target.shared_bytes_per_sm
            if padded.total_bytes <= u.target.shared_bytes and \
                    per_sm // max(padded.total_bytes, 1) >= per_sm // max(plan.total_bytes, 1):
                plan = padded
        return replace(p, shared=plan)

    return u.map_kernels(one)


def _plan_operands(u: Unit) -> Unit:
    from tileagent.compiler.lower.gemm import packable_a_operands
    from tileagent.compiler.lower.pipeline import hoisted_a_operands

    return u.map_kernels(lambda p: replace(p, packed=frozenset(packable_a_operands(p.kernel.body, u.layouts)),
                                           hoisted=hoisted_a_operands(p.body, u.layouts, p.shared.layouts)))


def _lower_tile_ops(u: Unit) -> Unit:
    from tileagent.compiler.lower import forward_shared, lower_module, redundant_barriers
    from tileagent.compiler.lower.shared_vectors import vectorize_shared_runs

    module = vectorize_shared_runs(lower_module(u.func, u.layouts, u.kernels, u.target,
                                                warp_specialize=u.options.warp_specialize))
    if forward_shared.enabled():
        module = forward_shared.forward_shared_reads(module)
    if redundant_barriers.enabled():
        module = redundant_barriers.drop_redundant_barriers(module)
    return replace(u, module=module)


def _codegen_cuda(u: Unit) -> Unit:
    from tileagent.compiler.runtime.hooks import cuda_postproc
    from tileagent.compiler.targets.cuda import generate

    source = generate(u.module, fast_math="--use_fast_math" in u.options.nvrtc_options)
    postproc = cuda_postproc()
    if postproc is not None:  # TileLang's register_cuda_postproc_callback
        source = postproc(source, u.target)
        if not isinstance(source, str):
            raise TargetError(f"the CUDA post-processing callback {getattr(postproc, '__name__', postproc)!r} "
                              f"returned {type(source).__name__}, not the CUDA source (a str)", code="E603")
    return replace(u, source=source)


def _codegen_ptx(u: Unit) -> Unit:
    from tileagent.compiler.runtime import ptxas
    from tileagent.compiler.runtime.hooks import cuda_postproc
    from tileagent.compiler.targets.ptx import PtxUnsupported, generate

    if cuda_postproc() is not None or not ptxas.enabled(u.options.nvrtc_options):
        return replace(u, ptx=None)
    if u.ptx is not None:  # the module cache's
        return u
    try:
        ptx = generate(u.module, u.target.arch, fast_math="--use_fast_math" in u.options.nvrtc_options)
    except PtxUnsupported as e:
        log.debug("%s: compiled by NVRTC; the PTX emitter does not cover %s", u.func.name, e)
        return replace(u, ptx="")
    return replace(u, ptx=ptx)


def _ptxas(u: Unit) -> Unit:
    from tileagent.compiler.runtime import register_target
    from tileagent.compiler.runtime.ptxas import PtxasError

    if not u.ptx:
        return u
    try:
        return replace(u, cubin=register_target.assemble(u.ptx, u.target, u.module.kernels))
    except PtxasError as e:  # the emitter's bug, not the program's: the CUDA C++ still compiles
        log.warning("%s: %s; compiling the CUDA C++ with NVRTC instead", u.func.name, e)
        return replace(u, ptx="")


def _nvrtc(u: Unit) -> Unit:
    from tileagent.compiler.runtime.hooks import cuda_postproc
    from tileagent.compiler.runtime.nvrtc import NvrtcError, cache_path, compile_to_cubin
    from tileagent.compiler.runtime.occupancy_bound import bound_for_occupancy

    if u.cubin is not None:  # ptxas made it
        return u
    postproc = cuda_postproc()

    def build(source: str) -> bytes:
        return compile_to_cubin(source, u.target.arch, u.options.nvrtc_options, timeout_s=u.options.nvrtc_timeout_s)

    try:
        cubin = build(u.source)
    except NvrtcError as e:
        if postproc is None:
            raise
        raise TargetError(f"the CUDA source returned by the post-processing callback "  # the user's edit, not ours
                          f"{getattr(postproc, '__name__', postproc)!r} does not compile: {e}", u.func.span,
                          code="E603", hint="get_kernel_source() shows the source after the callback; the source "
                                            "before it compiles without the callback registered") from None
    if postproc is not None:  # the user's source is compiled as given
        return replace(u, cubin=cubin)
    source, cubin = bound_for_occupancy(u.source, cubin, u.target, u.module.kernels, build, lambda src: cache_path(
        src, u.target.arch, u.options.nvrtc_options).with_suffix(".refused"))
    return replace(u, source=source, cubin=cubin)


# One list per arch; each line one pass and what it does. The kind of target decides how far it runs (``pipeline``).
SM80 = (
    Pass("check", _check, "shapes, scopes, dtypes, indices of the tile IR; coded diagnostics (E1xx-E5xx)"),
    Pass("infer_layouts", _infer_layouts, "fragment and T.Parallel layouts: strict -> common -> free (L0xx); "
                                          "sliced fragment copies become T.Parallel loops first (compiler.desugar)"),
    Pass("check_limits", _check_limits, "register arrays within target.registers_per_thread (E802); unrolled "
                                        "code within limits.MAX_UNROLLED (E804)"),
    Pass("plan_scratch", _plan_scratch, "one KernelPlan per T.Kernel; shared scratch its reductions and conversions "
                                        "need"),
    Pass("plan_pipelines", _plan_pipelines, "T.Pipelined -> software pipelines (cp.async stages), as many stages as "
                                            "fit target.shared_bytes"),
    Pass("insert_barriers", _insert_barriers, "__syncthreads() between shared-memory writers and readers"),
    Pass("plan_shared", _plan_shared, "offsets, reuse and scratch of the shared arena (staging tiles padded "
                                      "against bank conflicts); over target.shared_bytes is E801"),
    Pass("plan_operands", _plan_operands, "16-bit gemm A fragments kept as packed 32-bit pairs; loop-invariant "
                                          "A operands hoisted into registers"),
    Pass("lower_tile_ops", _lower_tile_ops, "tile IR -> thread IR: each tile op, T.Parallel nest and pipeline"),
    Pass("codegen_cuda", _codegen_cuda, "thread IR -> CUDA C++"),
    Pass("codegen_ptx", _codegen_ptx, "thread IR -> PTX, for modules compiler.targets.ptx covers (memory-bound "
                                      "kernels) when a ptxas is here: NVVM skipped"),
    Pass("ptxas", _ptxas, "PTX -> cubin for target.arch (the ptxas program, else nvJitLink), each kernel's "
                         "register target chosen (compiler.runtime.register_target)"),
    Pass("nvrtc", _nvrtc, "CUDA C++ -> cubin for target.arch, under a time limit (E805), for the modules without "
                          "PTX; one more block per SM where registers alone hold it back (runtime.occupancy_bound)"),
)
SM86 = SM89 = SM80
# Hopper passes join here (wgmma, TMA, warp specialization and mbarrier pipelines are lowering decisions inside
# SM80's passes, taken on the target's features): see docs/architecture.md
SM90A = SM80[:1] + (
    Pass("coarsen_blocks", _coarsen, "two 128 x 128 gemm blocks of one warpgroup merged along x into a 128 x 256 "
                                     "block of two (compiler.lower.coarsen)"),
    Pass("stage_epilogue", _stage_epilogue, "a gemm accumulator's copy to global memory after its pipelined loop "
                                            "goes through a swizzled shared tile: 16-byte row stores "
                                            "(compiler.lower.stage_epilogue)"),
) + SM80[1:]

PIPELINES = {"sm_80": SM80, "sm_86": SM86, "sm_89": SM89, "sm_90a": SM90A}
_LAST = {"cuda": "nvrtc", "sim": "lower_tile_ops"}
TILE_PASSES = ("check",)  # what the cpu target runs without the lowering check


def pipeline(target: Target, options: Options = Options()) -> tuple:
    """The passes ``target`` runs: its arch's list, cut after the last one its kind needs (``cuda``: everything;
    ``sim``: up to the thread IR; ``cpu``: the tile-IR checks, or up to the thread IR with ``lowering_check``)."""
    passes = PIPELINES.get(target.arch, SM80)
    if target.kind == "cpu" and not options.lowering_check:
        return tuple(p for p in passes if p.name in TILE_PASSES)
    last = _LAST.get(target.kind, "lower_tile_ops")
    return passes[:[p.name for p in passes].index(last) + 1]


def pass_names(target: Target) -> tuple:
    """Every pass name of ``target``'s arch (also those its kind does not run)."""
    return tuple(p.name for p in PIPELINES.get(target.arch, SM80))


def run(func: PrimFunc, target: Target, options: Options = Options(), *, until: str | None = None,
        start: Unit | None = None, layouts=None) -> Unit:
    """Run ``target``'s pipeline over ``func`` (to the end, or through pass ``until``, which may lie past where its
    kind stops: ``until="codegen_cuda"`` on ``sim``). ``start``: a unit whose fields are already set (a module
    cache hit): the passes that produce what it has are skipped."""
    target = effective_target(target, options)
    passes = PIPELINES.get(target.arch, SM80) if until is not None else pipeline(target, options)
    names = [p.name for p in passes]
    if until is not None:
        if until not in names:
            raise ValueError(f"unknown pass {until!r}; the passes of {target.arch}: {', '.join(names)}")
        passes = passes[:names.index(until) + 1]
    unit = replace(start, target=target) if start is not None else Unit(func, target, options, layouts=layouts)
    if start is not None:
        produced = {"module": "lower_tile_ops", "source": "codegen_cuda", "cubin": "nvrtc"}
        done = [names.index(p) for f, p in produced.items() if getattr(start, f) is not None and p in names]
        passes = passes[max(done) + 1:] if done else passes
    debug = options.debug or os.environ.get(DEBUG_IR) == "1"
    wanted = {w.strip() for w in os.environ.get(PRINT_IR_AFTER, "").split(",") if w.strip()}
    unknown = wanted - set(pass_names(target)) - {"all"}
    if unknown:
        log.warning("%s names no pass of %s: %s (the passes: %s)", PRINT_IR_AFTER, target.arch,
                    ", ".join(sorted(unknown)), ", ".join(pass_names(target)))
    for p in passes:
        t0 = time.perf_counter()
        try:
            unit = p.run(unit)
        except CompileError:
            raise
        except RecursionError:
            raise ResourceError(f"the program nests expressions or statements too deeply for pass {p.name}",
                                func.span, code="E803", hint="split long expressions with intermediate variables")
        except Exception as e:  # noqa: BLE001 -- nothing but CompileError escapes a compile
            raise InternalCompilerError(f"internal error in pass {p.name}: {type(e).__name__}: {e}",
                                        func.span) from e
        seconds = time.perf_counter() - t0
        unit = replace(unit, timings=unit.timings + ((p.name, seconds),))
        log.debug("pass %s: %.2f ms", p.name, 1e3 * seconds)
        if debug:
            from tileagent.compiler.verify import verify_unit

            verify_unit(unit, p.name)
        if p.name in wanted or "all" in wanted:
            sys.stderr.write(f"# ---- IR after {p.name} ({unit.target.name}) ----\n{render(unit, p.name)}\n")
    return unit


def render(unit: Unit, after: str) -> str:
    """The IR as it stands after pass ``after``, as text: the tile IR after ``check``; with the layouts after
    layout inference; each kernel's body (pipelines, barriers) and shared plan through ``plan_operands``; the
    thread IR after ``lower_tile_ops``; CUDA C++ after ``codegen_cuda``; the cubin's size after ``nvrtc``."""
    from tileagent.compiler.ir.printer import print_device_kernel, print_func, stmt_lines

    if after == "check":
        return print_func(unit.func)
    if after in ("infer_layouts", "check_limits"):
        return print_func(unit.func) + "\n# layouts\n" + str(unit.layouts)
    if after == "lower_tile_ops":
        return "\n".join(print_device_kernel(k) for k in unit.module.kernels)
    if after == "codegen_cuda":
        return unit.source
    if after == "codegen_ptx":
        return unit.ptx or "(no PTX: NVRTC compiles the CUDA C++)"
    if after in ("ptxas", "nvrtc"):
        return f"cubin for {unit.target.arch}: {len(unit.cubin)} bytes" if unit.cubin else "(no cubin yet)"
    out = []
    for p in unit.kernels:
        out.append(f"kernel {p.name}: scratch {p.scratch_bytes} B" +
                   (f", stages {', '.join(f'{b.name}: {n}' for b, n in p.stages.items())}" if p.stages else "") +
                   (f", packed {', '.join(b.name for b in p.packed)}" if p.packed else "") +
                   (f", A hoisted for the gemm(s) at line(s) {', '.join(str(g.span.line) for g in p.hoisted)}"
                    if p.hoisted else ""))
        for s in p.body if p.body is not None else p.kernel.body:
            out += stmt_lines(s, 4)
        if p.shared is not None:
            out.append(f"  # shared arena: {p.shared.total_bytes} bytes (target limit {unit.target.shared_bytes})")
            for b, off in sorted(p.shared.offsets.items(), key=lambda kv: kv[1]):
                out.append(f"  #   {b.name}: +{off}, {p.shared.elements[b]} x {b.dtype}" +
                           (f" ({p.stages[b]} stages)" if b in p.stages else ""))
            if p.scratch_bytes:
                out.append(f"  #   scratch: +{p.shared.scratch_offset}")
    return "\n".join(out) + "\n"


__all__ = ["KernelPlan", "Options", "PIPELINES", "Pass", "SM80", "SM90A", "Unit", "pass_names", "pipeline", "render",
           "run"]
