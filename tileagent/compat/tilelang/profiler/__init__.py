"""``tilelang.profiler``: ``Profiler`` (what ``kernel.get_profiler()`` returns) and ``do_bench(fn)``.

Both are the compiler's (``tileagent.compiler.profiler``): timing shared with the evaluator (L2 flush before each
trial, CUDA events, median by default), TileLang's signatures and defaults.
"""

from tileagent.compiler.profiler import Profiler, TensorSupplyType, do_bench

__all__ = ["Profiler", "TensorSupplyType", "do_bench"]
