"""``tilelang.layout``: ``make_swizzled_layout`` and the bank-width variants, for ``T.annotate_layout``.

``Layout``/``Fragment`` (user-written index maps) are not supported: constructing one raises E701.
"""

from tileagent.compiler.diagnostics import UnsupportedError
from tileagent.compiler.language.annotations import (make_full_bank_swizzled_layout, make_half_bank_swizzled_layout,
                                                     make_quarter_bank_swizzled_layout, make_swizzled_layout)


class _Unsupported:
    def __init__(self, *args, **kwargs):
        raise UnsupportedError(f"tilelang.layout.{type(self).__name__} (a user-defined layout) is not supported by "
                               f"TileAgent: layouts are inferred; T.annotate_layout takes make_swizzled_layout(buf)",
                               hint="docs/dsl.md lists what TileAgent supports of TileLang's API")


class Layout(_Unsupported):
    pass


class Fragment(_Unsupported):
    pass


__all__ = ["Fragment", "Layout", "make_full_bank_swizzled_layout", "make_half_bank_swizzled_layout",
           "make_quarter_bank_swizzled_layout", "make_swizzled_layout"]
