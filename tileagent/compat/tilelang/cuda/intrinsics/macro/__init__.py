"""``tilelang.cuda.intrinsics.macro``: of TileLang's macro generators, ``mma_macro_generator`` (mma.sync); the
wgmma, tcgen05, sm70/sm75/sm120 and mma.sp generators are an E701 at their import."""
