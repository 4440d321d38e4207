"""``tilelang.transform``: ``PassConfigKey`` (every TileLang key accepted) and ``simplify_prim_func``."""

from tileagent.compiler.jit import PassConfigKey
from tileagent.compiler.ir.stmt import PrimFunc


def simplify_prim_func(func: PrimFunc) -> PrimFunc:
    """Returns ``func``: TileAgent simplifies while it lowers."""
    return func


__all__ = ["PassConfigKey", "simplify_prim_func"]
