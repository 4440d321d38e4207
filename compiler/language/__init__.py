"""The tile DSL surface, TileLang-compatible: ``import tileagent.language as T``.

Builtins are thin: each validates its arguments and returns one IR node or spec. ``T.prim_func`` hands the
decorated function to ``compiler.frontend``, which parses its source and calls these builtins.
"""

from tileagent.compiler.dtypes import DType
from tileagent.compiler.frontend import prim_func
from tileagent.compiler.frontend_eager import const, empty
from tileagent.compiler.frontend_macro import macro
from tileagent.compiler.language.extras import (Cast, FragmentBuffer, Layout, LocalBuffer, Ref, SharedBuffer,
                                                alloc_buffer, alloc_global, clamp, device_assert, dtype,
                                                get_block_binding,
                                                get_block_bindings, get_thread_binding, get_thread_bindings,
                                                sync_grid, thread_binding, vectorized)
from tileagent.compiler.language.annotations import (annotate_layout, make_full_bank_swizzled_layout,
                                           make_half_bank_swizzled_layout, make_quarter_bank_swizzled_layout,
                                           make_swizzled_layout, print, use_swizzle)
from tileagent.compiler.language.cp_async import (cp_async_barrier_noinc, fence_proxy_async, ptx_commit_group,
                                                  ptx_cp_async, ptx_wait_group)
from tileagent.compiler.language.extern import access_ptr, call_extern, import_source
from tileagent.compiler.language.kernel import (ClusterKernel, Kernel, alloc_fragment, alloc_local, alloc_shared,
                                                alloc_var)
from tileagent.compiler.language.loops import Parallel, Persistent, Pipelined, Serial, serial, unroll
from tileagent.compiler.language.math import (abs, cast, ceil, ceildiv, erf, exp, exp2, floor, floordiv, floormod,
                                    if_then_else, infinity, log, log2, max, max_value, min, min_value, pow,
                                    reinterpret, rsqrt, sigmoid, sin, cos, sqrt, tanh, atan2, fmod)
from tileagent.compiler.language.tileops import (GemmWarpPolicy, atomic_add, atomic_max, atomic_min, c2d_im2col, clear,
                                                 copy, fill, gemm, im2col, reduce, reduce_abssum, reduce_absmax,
                                                 reduce_max, reduce_min, reduce_prod, reduce_sum)
from tileagent.compiler.language.random import rng_init, rng_rand, rng_rand_float
from tileagent.compiler.language.pointers import make_tensor, ptr
from tileagent.compiler.language.sparse import gemm_sp
from tileagent.compiler.language.sync import sync_threads
from tileagent.compiler.language.views import reshape, view
from tileagent.compiler.language.types import DTYPES, Buffer, Tensor, dynamic, symbolic
from tileagent.compiler.language.warp_specialize import (WarpSpecialize, alloc_barrier, barrier_arrive, barrier_wait,
                                                         mbarrier_arrive, mbarrier_wait_parity, tma_copy, ws)
from tileagent.compiler.tileops import BUILTINS as _TILE_OP_BUILTINS

globals().update(DTYPES)  # T.float16, T.float32, T.float, T.bfloat16, T.int32, ...
globals().update(_TILE_OP_BUILTINS)  # builtins a tile-op module defines itself (compiler.tileops), e.g. T.cumsum
Select = if_then_else

__all__ = [n for n in dir() if not n.startswith("_")]
