"""Prefix scans (``cumsum``, ``cumprod``, ``cummax`` / ``cummin`` values, ``logcumsumexp``) in the fusion lowering: a
kernel of their own per scan.

In: the ATen node of a scan and its lazy source (``values.V``). ``scan_value(builder, node, name, args, kw)`` puts a
``Scan`` among the builder's reductions and returns its result as a ``ScanOut``: a tensor later kernels read like an
input (tile copies), and that the plan writes straight to the model's output when the reference returns it.
``scan_lines`` writes the kernel (``fusion_writer.KernelWriter.write`` calls it): each block walks its rows' column
tiles in order (from the last for a suffix scan: ``x.flip(d).cumsum(d).flip(d)``), scans a tile, combines the carry
of the tiles before and stores it. A sum scans its float32 tile fragment with ``T.cumsum`` (the block's threads split
the tile's rows: chunk scans and shuffled chunk offsets, ``compiler.lower.cumsum``), the tile's last column going to
the carry through a shared (BM,) tile; the other combines scan the tile in shared memory with log2(BR) shifted
combines (Hillis-Steele). ``logcumsumexp`` combines with ``max(a, b) + log(1 + exp(min - max))``.

Guarantees: a float scan along any dim (moved last; the result is moved back for the readers), with the running
value in float32 and one rounding to the output's dtype, as eager CUDA accumulates a 16-bit cumsum; a tile's sums
are rounded a few times at the row's magnitude (chunk offsets; tree order for the other combines), so within a few
float32 ulps of a sequential sum. Integer scans, ``dtype=`` other than a float and the indices of ``cummax`` /
``cummin`` (read by anything) raise ``Unsupported``.
"""

from __future__ import annotations

import torch

from tileagent.drafters.builtin.index import ONE, Lin, Size, Unsupported, prod
from tileagent.drafters.builtin.values import DT, FLOAT, Fn, Global, V, _where, kind_of

OPS = {"cumsum": "sum", "cumprod": "prod", "cummax": "amax", "cummin": "amin", "logcumsumexp": "logaddexp"}
NEG_INF = "-T.infinity(\"float32\")"
# log(exp(a) + exp(b)), exact where both are -inf (the identity) and where one is
LOGADDEXP = (f"T.if_then_else(T.max({{a}}, {{b}}) == {NEG_INF}, {NEG_INF}, T.max({{a}}, {{b}}) + "
             f"T.log(1.0 + T.exp(T.min({{a}}, {{b}}) - T.max({{a}}, {{b}}))))")

class Scan(V):
    """The prefix ``op`` (an ``OPS`` value) of ``src`` along its last dim; ``reverse``: the suffix one (from the
    end)."""

    def __init__(self, src: V, op: str, dtype, node, name: str, reverse: bool = False):
        self.src, self.op, self.dtype, self.node, self.name, self.reverse = src, op, dtype, node, name, reverse
        self.shape = list(src.shape)
        self.ins = [src]
        self.outs: dict = {}  # model output number -> the ScanOut the reference returns (written by the scan kernel)
        self.read = False  # whether a later kernel reads the result (then the kernel also writes its workspace)


class ScanOut(Global):
    """A scan's result as a float32 tensor of forward (the scan kernel's workspace ``name``), read like an input."""

    def __init__(self, scan: Scan, shape=None):
        super().__init__(scan.name, scan.name, list(shape or scan.shape), torch.float32, scan.node)
        self.scan = scan

    def compute(self, cx, idx):
        self.scan.read = True
        return super().compute(cx, idx)


class Indices(V):
    """The indices of a ``cummax`` / ``cummin``, which no kernel writes: reading them raises ``Unsupported``."""

    def __init__(self, shape, node, path):
        self.shape, self.dtype, self.node, self.path = shape, torch.int64, node, path

    def compute(self, cx, idx):
        raise Unsupported(f"the indices of a running maximum or minimum ({_where(self.node, self.path)})")


def scan_value(b, node, name: str, args, kw) -> V:
    """A scan of ``OPS`` (``b``: the ``values.Builder``); for ``cummax`` / ``cummin`` the list (values, indices)."""
    src, dim = args[0], args[1] if len(args) > 1 else kw.get("dim")
    if name in ("cummax", "cummin") and "val" not in kw:
        val = node.meta["val"][0]
        shape = [Size.of(s, b.t.hints) for s in val.shape]
        return [scan_value(b, node, name, args, {**kw, "val": val}), Indices(shape, node, b.t.path)]
    val = kw.get("val", node.meta["val"])
    if kind_of(val.dtype) != FLOAT or kind_of(src.dtype) != FLOAT:
        b.fail(node, f"{name} of integers")
    n = len(src.shape)
    d = dim % n
    order = [k for k in range(n) if k != d] + [d]
    moved = src if d == n - 1 else Fn([src.shape[k] for k in order], src.dtype, lambda cx, idx, s=src, o=order: s.load(
        cx, [idx[o.index(k)] for k in range(n)]), node).with_ins([src])
    flipped = getattr(moved, "flip_of", None)
    reverse = flipped is not None and flipped[1] == {n - 1}  # cumsum(x.flip(-1)) is the suffix scan of x, flipped
    scan = Scan(flipped[0] if reverse else moved, OPS[name], val.dtype, node, f"sc{len(b.reduces)}", reverse)
    b.reduces.append(scan)
    out = ScanOut(scan)
    if reverse:
        out = flip(out, {n - 1}, out.shape, torch.float32, node)
    if d == n - 1:
        return out
    return Fn([Size.of(s, b.t.hints) for s in val.shape], val.dtype, lambda cx, idx, s=out, o=order: s.load(
        cx, [idx[k] for k in o]), node).with_ins([out])


def flip(src: V, dims: set, shape, dtype, node) -> V:
    """``src.flip(dims)``: an index reversal, marked (``flip_of``) so that a scan of it runs from the end and a flip of
    a flip is its source again (``x.flip(1).cumsum(1).flip(1)``: one suffix-scan kernel, its output the model's)."""
    inner = getattr(src, "flip_of", None)
    if inner is not None and inner[1] == dims:
        return inner[0]
    out = Fn(shape, dtype, lambda cx, idx: src.load(cx, [
        Lin.c(src.shape[d] - ONE) - idx[d] if d in dims else idx[d] for d in range(len(idx))]), node).with_ins([src])
    out.flip_of = (src, dims)
    return out


def reshaped(out: ScanOut, shape) -> ScanOut | None:
    """``out`` viewed as ``shape`` (same elements, same order), or None when the element count differs."""
    return ScanOut(out.scan, shape) if prod(shape).v == prod(out.shape).v else None


def scan_lines(w, r: Scan, n: int, out_params: list, pad: int) -> list[str]:
    """The scan kernel's body (``w``: its ``KernelWriter``): per column tile, the source (masked past the row) into
    a fragment and ``T.cumsum`` (a sum) or into shared memory and the shifted combines (the others), the carry, the
    stores of the model's output(s) and of the workspace later kernels read."""
    from tileagent.drafters.builtin.fusion_writer import COMBINE, IDENT, Cx

    k = w.k
    cx = Cx(w, "tile")
    val = cx.convert(r.src, r.src.load(cx, k.domain_index(r.src, [len(r.src.shape) - 1])), FLOAT)
    ident, combine = {**IDENT, "logaddexp": NEG_INF}[r.op], {**COMBINE, "logaddexp": LOGADDEXP}[r.op]
    end = "0" if r.reverse else "BR - 1"  # the tile's column that carries into the next tile
    w.allocs[f"carry{n}"] = "(BM,)"
    w.allocs[f"fo{n}"] = "(BM, BR)"
    q = " " * (pad + 4)
    lines = [" " * pad + f"T.fill(carry{n}, {ident})",
             " " * pad + "for kk in T.serial(NK):  # the row's tiles in order (a suffix scan's from the last), each "
             "adding the carry of those before"]
    lines += [q + s for s in w.loads(cx, 0)]
    if r.op == "sum":  # T.cumsum: the block's threads split the tile's rows (chunk scans, shuffled chunk offsets)
        w.allocs[f"se{n}"] = "(BM,)"
        w.shared.add(f"se{n}")  # the tile's row totals, read by the threads that hold the carry
        lines += w.body(cx, "tile", [f"fo{n}[i, j] = T.if_then_else(rg < NR, {val}, 0.0)"], pad + 4)
        lines += [q + f"T.cumsum(fo{n}, dim=1{', reverse=True' if r.reverse else ''})",
                  q + "for i, j in T.Parallel(BM, BR):",
                  q + f"    if j == {end}:",
                  q + f"        se{n}[i] = fo{n}[i, j]",
                  q + f"    fo{n}[i, j] = fo{n}[i, j] + carry{n}[i]",
                  q + "for i in T.Parallel(BM):",
                  q + f"    carry{n}[i] = carry{n}[i] + se{n}[i]"]
    else:
        for name in (f"sa{n}", f"sb{n}"):  # shared: the shifted reads cross threads
            w.allocs[name] = "(BM, BR)"
            w.shared.add(name)
        lines += w.body(cx, "tile", [f"sa{n}[i, j] = T.if_then_else(rg < NR, {val}, {ident})"], pad + 4)
        shifted = f"T.if_then_else(j >= (1 << s), sa{n}[i, T.max(j - (1 << s), 0)], {ident})" if not r.reverse \
            else f"T.if_then_else(j + (1 << s) < BR, sa{n}[i, T.min(j + (1 << s), BR - 1)], {ident})"
        lines += [q + "for s in T.unroll((BR - 1).bit_length()):  # Hillis-Steele: log2(BR) shifted combines",
                  q + "    for i, j in T.Parallel(BM, BR):",
                  q + f"        sb{n}[i, j] = {combine.format(a=f'sa{n}[i, j]', b=shifted)}",
                  q + f"    T.copy(sb{n}, sa{n})",
                  q + "for i, j in T.Parallel(BM, BR):",
                  q + f"    fo{n}[i, j] = {combine.format(a=f'sa{n}[i, j]', b=f'carry{n}[i]')}",
                  q + "for i in T.Parallel(BM):",
                  q + f"    carry{n}[i] = {combine.format(a=f'carry{n}[i]', b=f'sa{n}[i, {end}]')}"]
    targets = [(f"o{m}", DT[r.dtype], m) for m in sorted(r.outs)]
    if r.read or not r.outs:
        targets.append((r.name, "float32", None))
    for name, dtype, m in targets:
        out_params.append((name, f"{name}: T.Tensor(({k.X.t}, {k.R.t}), \"{dtype}\")", m))
        if dtype == "float32":
            lines.append(q + f"T.copy(fo{n}, {name}[bm * BM, kk * BR])")
        else:
            w.allocs[f"fc{n}"] = "(BM, BR)"
            w.alloc_dtype[f"fc{n}"] = dtype
            lines += [q + "for i, j in T.Parallel(BM, BR):", q + f"    fc{n}[i, j] = T.cast(fo{n}[i, j], \"{dtype}\")",
                      q + f"T.copy(fc{n}, {name}[bm * BM, kk * BR])"]
    if r.reverse:  # the tiles from the last: every column origin of the loop's body
        lines = lines[:2] + [line.replace("kk * BR", "(NK - 1 - kk) * BR") for line in lines[2:]]
    return lines


__all__ = ["Scan", "ScanOut", "reshaped", "scan_lines", "scan_value"]
