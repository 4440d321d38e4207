"""``import tilelang.language as T`` under the compatibility layer: TileAgent's DSL plus TileLang's names for it.

In: attribute lookups ``T.<name>``, inside a prim_func (the frontend resolves them) or in plain Python.
Out: the DSL builtins of ``tileagent.language`` (the same objects). Guarantees: a TileLang name TileAgent does not
support raises ``UnsupportedError`` (E701) saying why and what to write instead; inside a prim_func the frontend
reports it at the line that uses it. ``UNSUPPORTED`` is the table (docs/dsl.md prints it).
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import UnsupportedError
from tileagent.compiler.dtypes import DType
from tileagent.compat.tilelang.datatype import DataType
from tileagent.language import *  # noqa: F401,F403
from tileagent.compiler.language.allreduce import (alloc_reducer, attr, comm_reducer, dp4a, evaluate,
                                                   finalize_reducer, tvm_thread_allreduce)
from tileagent.compiler.warp_shuffle import tvm_warp_shuffle
from tileagent.compiler.language import __all__ as _dsl_names

_HOPPER = ("this part of Hopper/Blackwell warp specialization by hand (expect-tx, raw warpgroup fences and waits, "
           "register reallocation, clusters, tensor memory) is not supported (T.ws, T.alloc_barrier, barrier "
           "arrive/wait and T.tma_copy are, run in program order, and T.wgmma_gemm with T.wait_wgmma); write the "
           "plain T.Pipelined / T.copy / T.gemm form and the compiler schedules it")
_BLACKWELL = ("Blackwell's (sm_100) tensor memory and tcgen05 MMAs do not exist on Hopper (sm_90, the H100/H200) or "
              "earlier GPUs, and TileAgent targets sm_80 to sm_90a: this program is for sm_100 (TileLang's sm_90 "
              "examples of the same kernels, in flash_attention/ and gemm/, run)")
_SIMT = ("warp-level SIMT code (warp/lane indices, these shuffles) is not supported; T.get_thread_binding "
         "per-thread code is, with TVM's T.tvm_warp_shuffle and T.tvm_thread_allreduce, and T.Parallel loops and "
         "tile ops are")
_CP_ASYNC = ("T.async_copy is not supported: write T.ptx_cp_async(dst_ptr, src_ptr, num_elems) per thread (with "
             "T.ptx_commit_group / T.ptx_wait_group or T.cp_async_barrier_noinc), or the load as T.copy inside "
             "T.Pipelined(n, num_stages=2 or more), where TileAgent issues cp.async itself")
_ESCAPE = ("this escape hatch into hand-written CUDA/PTX is not supported (T.import_source with T.call_extern and "
           "T.access_ptr is: it runs on the CUDA target)")

UNSUPPORTED = {
    # warp specialization, Hopper/Blackwell machinery
    **{n: _HOPPER for n in ("mbarrier_expect_tx", "create_list_of_mbarrier", "get_mbarrier",
                            "annotate_producer_reg_dealloc", "annotate_consumer_reg_alloc", "warpgroup_arrive",
                            "warpgroup_commit_batch", "warpgroup_wait",
                            "alloc_descriptor")},
    "async_copy": _CP_ASYNC,
    **{n: _BLACKWELL for n in ("alloc_tmem", "tcgen05_gemm", "tcgen05_gemm_blockscaled", "tcgen05_mma_arrive",
                               "tcgen05_sf_warp_transpose", "tcgen05_cp_warpx4", "mma_gemm_blockscaled")},
    # SIMT-level code
    **{n: _SIMT for n in ("get_warp_idx",
                          "get_lane_idx", "get_warp_group_idx", "get_warp_idx_sync", "get_thread_extent",
                          "shfl_xor", "shfl_down", "shfl_up", "shfl_sync", "sync_warp",
                          "PersistentTileScheduler")},
    # escape hatches
    **{n: _ESCAPE for n in ("call_intrin", "call_pure_extern", "ptx", "ptx_mma",
                            "ptx_ldmatrix", "CUDASourceCodeKernel", "address_of")},
    "Fragment": "user-defined fragment layouts are not supported; layouts are inferred",
    "atomic_addx2": "vector atomics are not supported; use T.atomic_add (tile form vectorizes where it can)",
    "atomic_addx4": "vector atomics are not supported; use T.atomic_add (tile form vectorizes where it can)",
    "allocate": "raw TIR buffers are not supported; use T.alloc_shared / T.alloc_fragment / T.alloc_local",
    "transpose": "T.transpose is not supported; copy through a T.Parallel loop",
    "index_to_coordinates": "T.index_to_coordinates is not supported",
    "annotate_pass_configs": "function-level pass configs are not supported; pass pass_configs= to tilelang.jit",
    "annotate_compile_flags": "compile flags are not supported",
    "annotate_safe_value": "T.annotate_safe_value is not supported (out-of-bounds global reads give 0)",
    "annotate_l2_hit_ratio": "L2 persistence hints are not supported",
    "named_barrier_arrive": "one-sided named-barrier arrives (bar.arrive) are not supported; T.sync_threads(id, "
                            "count) (bar.sync: arrive and wait) is",
}


import builtins as _builtins  # Python's int: TileLang's T.int (int32) shadows it below

# TileLang's C-style dtype names (tilelang/language/dtypes.py); defined here only, so that TileAgent's own modules
# keep Python's int
short, int, uint, long = (DType(n) for n in ("int16", "int32", "uint32", "int64"))  # noqa: A001
# Sub-byte dtypes exist as names (TileLang's helpers compare and key dicts with them: `out_dtype == T.int4`), with
# TVM's bits; a buffer, cast or constant of one is an E302 (dtypes.dtype: store such data packed in int8/uint8)
int4, uint4, int2, uint2, int1, uint1, float4_e2m1fn = (DataType(n) for n in (
    "int4", "uint4", "int2", "uint2", "int1", "uint1", "float4_e2m1fn"))


def disable_warp_group_reg_alloc() -> None:
    """TileLang's ``T.disable_warp_group_reg_alloc()``: keep the compiler from re-balancing registers between warp
    groups (``setmaxnreg``) in warp-specialized kernels. TileAgent never does that, so inside a prim_func the call
    is a statement with no effect, as the hint it is."""
    return None


no_set_max_nreg = disable_warp_group_reg_alloc  # TileLang's other name for it


def set_max_nreg(reg_count, is_inc):
    """TileLang's ``T.set_max_nreg(reg_count, is_inc)``: ``setmaxnreg``, the executing warp group's register budget in
    a kernel specialized by hand (``compiler.language.cp_async.set_max_nreg``)."""
    from tileagent.compiler.language.cp_async import set_max_nreg as _set_max_nreg

    return _set_max_nreg(reg_count, is_inc)


def parallel(start, stop=None, *, annotations=None):
    """TileLang's TIR-level ``for i in T.parallel(n)`` (``parallel(start, stop=None, *, annotations=None)``): a
    parallel loop over ``range(start, stop)``, which TileLang lowers as it does ``T.Parallel``; so it is
    ``T.Parallel(stop)``, and a perfect nest of them is one ``T.Parallel`` over all their extents, as with
    ``T.Parallel``. A start other than 0 is an E301 (``T.Parallel`` loops start at 0)."""
    from tileagent.compiler.diagnostics import DSLTypeError
    from tileagent.compiler.language.loops import Parallel

    if stop is None:
        start, stop = 0, start
    if not (isinstance(start, _builtins.int) and not isinstance(start, _builtins.bool) and start == 0):
        raise DSLTypeError(f"T.parallel({start!r}, {stop!r}): a parallel loop starts at 0 in TileAgent", code="E301",
                           hint="write `for i in T.parallel(stop - start)` and index with `start + i`")
    return Parallel(stop, annotations=annotations)


def shift_left(x, y, span=None):
    """TVM's ``T.shift_left(x, y)``: ``x << y``."""
    return x << y


def shift_right(x, y, span=None):
    """TVM's ``T.shift_right(x, y)``: ``x >> y`` (arithmetic for signed x, as in C)."""
    return x >> y


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    reason = UNSUPPORTED.get(name, _BLACKWELL if name.startswith("tcgen05") else None)
    if reason is None:
        raise AttributeError(f"module 'tilelang.language' has no attribute '{name}'")
    raise UnsupportedError(f"T.{name} is not supported by TileAgent: {reason}", _user_span(),
                           hint="docs/dsl.md has the table of TileLang features TileAgent supports")


def _user_span():
    """The program's line that asked for ``T.<name>`` when plain Python did (a parameter annotation, evaluated where
    its ``def`` runs); None when TileAgent's frontend did (it puts its own span on the error)."""
    import os
    import sys
    from pathlib import Path

    from tileagent.compat.run import _PACKAGE_DIRS
    from tileagent.compiler.diagnostics import Span

    frame = sys._getframe(2)
    name = frame.f_code.co_filename
    if name.startswith("<") or str(Path(name).resolve()).startswith(_PACKAGE_DIRS) or os.sep + "importlib" in name:
        return None
    return Span(name, frame.f_lineno, 0)


__all__ = list(_dsl_names) + ["alloc_reducer", "attr", "comm_reducer", "dp4a", "evaluate", "finalize_reducer",
                              "tvm_thread_allreduce", "tvm_warp_shuffle",
                              "disable_warp_group_reg_alloc", "float4_e2m1fn", "int", "int1", "int2", "int4", "long",
                              "no_set_max_nreg", "parallel", "set_max_nreg", "shift_left", "shift_right", "short",
                              "uint", "uint1", "uint2", "uint4"]
