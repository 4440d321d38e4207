"""Schedule A/B for the fusion drafter on the GPU: one op's first draft under several knob settings, each variant
checked against the reference and timed next to torch.compile in the same process.

Usage (on a CUDA machine): python bench/fusion_knobs.py --ops a,b [--max-configs N] [--trials N]
    [--variant 'NAME=V,NAME=V' ...] [--env 'VAR=V' ...] [--hints ld.cs,ld.ef,...] [--no-tunables]
The variants: the draft as drafted, each other value its TUNABLES list for one knob at a time (unless
--no-tunables), the ``--variant`` settings given, and per ``--hints`` kind the draft whose CUDA source loads (or
stores) 16-byte vectors of the kernel's tensors with that cache hint (``HINTS``, through the runtime's CUDA
post-processing hook): what a code generation change would gain before it is made; per ``--env`` the draft built and
run with that environment variable set (``TILEAGENT_ENABLE_PDL=0``: a compiler feature switched off). Per config:
torch.compile's median time before and after the variants (their spread is the run's drift), then x compile per
variant (> 1: the variant is faster);
WRONG when a variant's outputs differ from the reference. Timing: ``bench/memory_bound.bench`` (L2 flushed, the
stream kept busy so launch overhead is left out).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from unittest import mock
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.fusion_suite import SUITE, as_tuple, set_knobs  # noqa: E402

_PTR = re.compile(r"\b(?:const\s+)?\w+\*\s+__restrict__\s+(\w+)")


_HELPERS = r"""
__device__ __forceinline__ uint4 tl_ld_ef(const uint4* p) {
  uint4 r; unsigned long long pol;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  asm("ld.global.L1::evict_first.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(pol));
  return r;
}
__device__ __forceinline__ uint4 tl_ld_na(const uint4* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
__device__ __forceinline__ uint4 tl_ld_plain(const uint4* p) {
  uint4 r;
  asm("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
"""
HINTS = {"ld.cs": "__ldcs", "ld.ef": "tl_ld_ef", "ld.na": "tl_ld_na", "ld.plain": "tl_ld_plain", "st.cs": None,
         "div.fast": None, "cuda": None}
_DIV = re.compile(r"^(\s*const float \w+ = )([^;/\[\]]+|\w+\[[^;/]*\]) / ([^;/\[\]]+|\w+\[[^;/]*\]);", re.M)


def cache_hints(kind: str):
    """A CUDA post-processing callback: 16-byte vector loads (``ld.*``: through ``HINTS[kind]``) or stores
    (``st.cs``: ``__stcs``) of the kernel's pointer parameters with that cache hint; ``div.fast``: each float32
    division ``a / b`` of a let as ``__fdividef(a, b)`` (2 ulp, torch.compile's Triton division), what dividing
    once per row would gain; ``cuda``: the source unchanged (compiled by NVRTC, not the PTX emitter: the control
    for the others)."""

    def rewrite(source: str, target=None) -> str:
        if kind == "cuda":
            return source
        if kind == "div.fast":
            return _DIV.sub(r"\1__fdividef(\2, \3);", source)
        params = set()
        for sig in re.findall(r"__global__[^{]*\(([^)]*)\)", source):
            params.update(_PTR.findall(sig))
        if not params:
            return source
        names = "|".join(sorted(params))
        if kind == "st.cs":
            return re.sub(rf"\*reinterpret_cast<uint4\*>\(&((?:{names})\[[^;]*?\])\) = ([^;]*);",
                          r"__stcs(reinterpret_cast<uint4*>(&\1), \2);", source)
        source = re.sub(rf"\*reinterpret_cast<const uint4\*>\(&((?:{names})\[[^;]*?\])\)",
                        rf"{HINTS[kind]}(reinterpret_cast<const uint4*>(&\1))", source)
        head = source.index("extern \"C\"") if "extern \"C\"" in source else 0
        return source[:head] + _HELPERS + source[head:]

    return rewrite


def variants_of(source: str, extra: list[str], hints: list[str], envs: list[str] = ()) -> list[tuple]:
    """(label, knob settings, cache hint, environment) for the default, each other TUNABLES value, ``extra``,
    ``hints`` and ``envs``."""
    from tileagent.autotune import tunables_of

    out = [("default", [], "", {})]
    for name, values in (tunables_of(source) or {}).items():
        out += [(f"{name}={v!r}", [f"{name}={v!r}"], "", {}) for v in values[1:]]
    out += [(v, v.split(","), "", {}) for v in extra]
    out += [(e, [], "", dict([e.split("=", 1)])) for e in envs]
    return out + [(h, [], h, {}) for h in hints]



def close(got, want) -> bool:
    for g, w in zip(as_tuple(got), as_tuple(want)):
        if not isinstance(w, torch.Tensor):
            continue
        if g.shape != w.shape:
            return False
        tol = 2e-2 if w.dtype in (torch.float16, torch.bfloat16) else 1e-3
        if not torch.allclose(g.float(), w.float(), atol=tol, rtol=tol, equal_nan=True):
            return False
    return True


def run_op(path: Path, max_configs: int, trials: int, extra: list[str], hints: list[str], tunables: bool,
           tmp: Path, envs: list[str] = ()) -> None:
    from bench.memory_bound import bench, load
    from tileagent.compiler.runtime.hooks import set_cuda_postproc
    from tileagent.drafters.base import DraftTask
    from tileagent.drafters.builtin import BuiltinDrafter
    from tileagent.evaluator.spec import load_spec

    draft = BuiltinDrafter().draft(DraftTask(task_name=path.stem, reference_path=str(path),
                                             reference_source=path.read_text(), configs=[], turn=1))[0]
    spec = load_spec(path)
    variants = variants_of(draft.source if tunables else "", extra, hints, envs)
    modules = {}
    for k, (label, knobs, _, _) in enumerate(variants):
        name = f"{path.stem}_v{k}"
        (tmp / f"{name}.py").write_text(set_knobs(draft.source, knobs)[0])
        modules[label] = load(name, tmp)
    for config in spec.configs[:max_configs]:
        init = spec.init_inputs(config)
        ref = spec.module.Model(*init).cuda().eval()
        inputs = spec.sample_inputs(config, 0, "cuda")
        inputs = [t.to(spec._input_dtype(k, t)) for k, t in enumerate(inputs)]
        cfg = " ".join(f"{k}={v}" for k, v in config.items())
        with torch.no_grad():
            want = ref(*inputs)
            torch._dynamo.reset()
            comp = torch.compile(ref)
            comp(*inputs)
            before = bench(lambda: comp(*inputs), trials)[0]
            cells = []
            for label, _, hinted, env in variants:
                new = modules[label].ModelNew(*init).cuda().eval()
                new.load_state_dict(ref.state_dict(), strict=False)
                set_cuda_postproc(cache_hints(hinted) if hinted else None)
                try:
                    with mock.patch.dict(os.environ, env):
                        ok = close(new(*inputs), want)
                        ms = bench(lambda: new(*inputs), trials)[0]
                except Exception as e:  # noqa: BLE001 - a variant that does not build is reported, not fatal
                    cells.append(f"{label} FAILED {type(e).__name__}: {str(e)[:80]}")
                    continue
                finally:
                    set_cuda_postproc(None)
                cells.append(f"{label} x{before / ms:.3f}{'' if ok else ' WRONG'}")
            after = bench(lambda: comp(*inputs), trials)[0]
        print(f"{path.stem:22s} {cfg:28s} compile {before:.4f}/{after:.4f} ms | " + " | ".join(cells), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", required=True, help="comma-separated op names of bench/suite")
    ap.add_argument("--max-configs", type=int, default=3)
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--variant", action="append", default=[], help="'NAME=V,NAME=V': one more variant (repeatable)")
    ap.add_argument("--env", action="append", default=[], help="'VAR=V': one more variant, built and run with "
                                                                "that environment variable (repeatable)")
    ap.add_argument("--hints", default="", help=f"comma-separated cache-hint variants: {', '.join(HINTS)}")
    ap.add_argument("--tunables", action=argparse.BooleanOptionalAction, default=True,
                    help="the TUNABLES variants (--no-tunables: the default and --variant/--hints only)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for op in args.ops.split(","):
            try:
                run_op(SUITE / f"{op}.py", args.max_configs, args.trials, args.variant,
                       [h for h in args.hints.split(",") if h], args.tunables, Path(tmp), args.env)
            except Exception as e:  # noqa: BLE001 - one op's failure does not stop the sweep
                print(f"{op:22s} FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)


if __name__ == "__main__":
    main()
