"""``tilelang.engine`` under the compatibility layer: only ``tilelang.engine.callback`` (the CUDA post-processing
callback). TileLang's lowering engine itself (``lower``, ``register_*`` passes...) is not provided: an E701 at the
import of any other ``tilelang.engine`` module."""
