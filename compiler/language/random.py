"""Random numbers inside a kernel: TileLang's ``T.rng_init``, ``T.rng_rand`` and ``T.rng_rand_float`` (curand's
Philox4x32-10 device generator, one state per thread).

In: the calls as TileLang writes them (``tilelang/cuda/language/random.py``). Out: an ``RngInit`` statement;
``Call("rng_rand", (), uint32)`` and ``Call("rng_rand_float", (), float32)`` values, each evaluation drawing the
running thread's next number.
Guarantees: the numbers are curand's for the same seed, subsequence and offset on every target
(``compiler.random_philox`` computes them on the CPU; the CUDA code is our own Philox device function, the same
algorithm: ``compiler.targets.cuda_random``). Each thread has one generator, set by the last ``T.rng_init`` it ran;
a draw moves it one number on. The order of draws is what makes the numbers, so (checked by ``check_random``):
a kernel that draws must call ``T.rng_init`` (E301 at the first draw otherwise); a draw inside ``T.Parallel`` is
allowed only in a kernel of one thread, whose iterations run in order on it (TileLang's ``rand_uint`` example), since
which thread runs which iteration is the layout's choice there (E509); one statement draws at most once (E301:
C++ leaves the order of two draws in one expression open). ``T.rng_init`` inside ``T.Parallel``: E502. Not
supported (E701): the MRG32k3a and XORWOW generators, ``dist="normal"``, 64-bit floats, ``T.rng_init`` without a
subsequence (TileLang's default is the thread's global index; pass it).
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import DSLTypeError, ScopeError, UnsupportedError
from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import Call, Expr, as_expr, is_number, make_cast

from tileagent.compiler.random_philox import CALLS

PHILOX = "curandStatePhilox4_32_10_t"


def _operand(value, what: str):
    if not (isinstance(value, Expr) or is_number(value)) or isinstance(value, (bool, float)):
        raise DSLTypeError(f"T.rng_init: the {what} must be an integer value, got {value!r}", code="E309")
    return make_cast(as_expr(value, DType("int64")), DType("int64"))


def rng_init(seed, seq=None, off=0, generator=PHILOX):
    """``T.rng_init(seed, seq, off)``: curand_init(seed, subsequence=seq, offset=off) of this thread's generator."""
    from tileagent.compiler.ir.stmt import RngInit

    if generator != PHILOX:
        raise UnsupportedError(f"T.rng_init(generator={generator!r}): only curand's Philox4x32-10 generator is "
                               f"supported", hint=f"drop generator= (TileLang's default, {PHILOX})")
    if seq is None:
        raise UnsupportedError("T.rng_init(seed) without a subsequence is not supported",
                               hint="pass it: T.rng_init(seed, tx + bx * threads, 0) is TileLang's default")
    return RngInit(_operand(seed, "seed"), _operand(seq, "subsequence"), _operand(off, "offset"))


def rng_rand():
    """``T.rng_rand()``: this thread's next 32-bit random number (uint32)."""
    return Call("rng_rand", (), DType("uint32"))


def rng_rand_float(bit=32, dist="uniform"):
    """``T.rng_rand_float(bit=32, dist="uniform")``: curand_uniform's float32 in (0, 1] from the next number."""
    if bit != 32 or dist != "uniform":
        raise UnsupportedError(f"T.rng_rand_float(bit={bit!r}, dist={dist!r}): only 32-bit uniform floats are "
                               f"supported", hint="scale T.rng_rand_float() yourself (Box-Muller for normals)")
    return Call("rng_rand_float", (), DType("float32"))


def draws(e) -> int:
    """How many random numbers evaluating ``e`` draws."""
    if isinstance(e, Call) and e.name in CALLS:
        return 1
    if isinstance(e, Expr):
        return sum(draws(getattr(e, n)) for n in getattr(e, "__slots__", ()))
    if isinstance(e, (tuple, list)):
        return sum(draws(x) for x in e)
    return 0


def check_random(kernel) -> None:
    """The rules of the module docstring for one T.Kernel (E301, E502, E509 at the statement)."""
    from tileagent.compiler.ir.stmt import Parallel, RngInit
    from tileagent.compiler.ir.visit import stmt_exprs, walk

    inits = [s for s in walk(kernel.body) if isinstance(s, RngInit)]
    for par in (s for s in walk(kernel.body) if isinstance(s, Parallel)):
        for s in walk(par.body):
            if isinstance(s, RngInit):
                raise ScopeError("T.rng_init inside T.Parallel", s.span, code="E502",
                                 hint="initialize the generator once per thread, before the loop")
            if kernel.num_threads > 1 and draws(tuple(stmt_exprs(s))):
                raise ScopeError(f"T.rng_rand inside T.Parallel in a kernel of {kernel.num_threads} threads: which "
                                 f"thread draws which number is the layout's choice", s.span, code="E509",
                                 hint="draw in per-thread code (T.get_thread_binding, a T.serial loop per thread), "
                                      "or run the T.Parallel loop in a kernel of threads=1")
    for s in walk(kernel.body):
        n = draws(tuple(stmt_exprs(s)))
        if n and not inits:
            raise DSLTypeError("T.rng_rand without T.rng_init in this kernel", s.span, code="E301",
                               hint="call T.rng_init(seed, subsequence, offset) first")
        if n > 1:
            raise DSLTypeError(f"one statement draws {n} random numbers: their order is not defined", s.span,
                               code="E301", hint="draw each into its own variable first: r = T.rng_rand()")
