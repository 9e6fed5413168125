"""The error of Winograd F(2x2,3x3), F(3x3,3x3) and F(4x4,3x3) on the 3x3 stride-1 suite layers, against a
float64 direct convolution, for a choice of F(4x4,3x3)'s interpolation points and for each precision
a kernel could run its element-wise GEMMs in (issue: Winograd on tensor cores and F(4x4,3x3)). A
numerical study of the algorithm, run on the CPU in PyTorch: the transforms and the element-wise
GEMMs in float32, as a kernel would compute them (the summation order of a kernel's GEMMs differs;
the transforms' rounding, which dominates, is the same).

Precisions (--precisions): fp32 keeps every stage in float32. tf32, fp16 and bf16 model a
tensor-core kernel: the inputs are tensors of that precision (float32 for tf32), the transformed
operands U = G g G^T and V = B^T d B are rounded to the MMA's operand format once (TF32 to nearest,
ties away, as cvt.rna does), products are summed in float32, the output transform runs in float32
and the output is rounded to the tensor's dtype. The `direct` column is the direct convolution at
the same precision, computed the same way (operands rounded, float32 sums, output rounded): the
error cuDNN's convolutions show in benchmarks/results at each precision, which the issue's error bar
is a multiple of.

Split operands (columns `f2x2-split-v`, `f2x2-split-uv`, `f2x2-split-v8`, `f2x2-split-v8-fixed`, reduced precisions only): a
kernel can carry an operand as two values of the MMA format, hi = round(x) and lo = round(x - hi), at
one more MMA per product. split-v: U x (V_hi + V_lo), two MMAs per product; split-uv: U_hi x V_hi +
U_hi x V_lo + U_lo x V_hi, three. split-v8: U x V_hi in the MMA format plus U x V_lo with both operands
in float8 e4m3 (Hopper's float8 MMAs run at twice the float16 rate), each scaled by a power of two
that a kernel could apply per accumulator row and column: V_lo's per (point, tile, chunk of 32
channels), U's per (point, filter). split-v8-fixed: the same products, V_lo in float8 e5m2 under one
fixed scale for every call (2^12) and U in e4m3 per (point, filter): no reduction over a chunk's
channels and one float8 accumulator per point, unscaled once. Per 2x2 output tile and (filter, channel) pair F(2x2,3x3) then
takes 32 or 48 MMA products, or 16 plus 16 float8 ones (24 at the float16 rate), against a direct
convolution's 36 (16 single-pass).

Both low parts in float8 (columns `f2x2-split-uv8`, `f3x3-split-uv8`, `f4x4-mixed-split-uv8`):
U_hi x V_hi in the MMA format plus V_lo x U and U_lo x V with all four float8 operands in e4m3
(saturating), summed in one float32 accumulator. V is scaled by a power of two per (point, tile)
over all channels (a column scale of each point's GEMM), U per (point, filter) (a row scale), each
putting the group's largest magnitude at 2^13; the low parts take the same scale times 2^5 and the
float8 copies of the full values times 2^-5, so every product carries the same scale, undone once
after the reduction (UV8_TOP, UV8_SHIFT). Per output and (filter, channel) pair: n^2 / m^2 products
plus twice as many float8 ones, 2 n^2 / m^2 at the float16 rate (F(4x4): 4.5, F(3x3): 5.6, F(2x2): 8).

Both operands in int8 limbs (columns `f2x2-split-s8x2`, `f3x3-split-s8x2-ll`, `f4x4-mixed-split-s8x2`,
`f4x4-mixed-split-s8x2-ll`): U and V as 16-bit fixed point, q = 256 hi + lo with both limbs int8, under a
float32 scale per group that puts its largest magnitude at 32639 (V's groups (point, tile) over all
channels, U's (point, filter)); V_hi U_hi in one int32 accumulator and V_hi U_lo + V_lo U_hi in a
second, exact, combined in float32 and unscaled once (`-ll`: V_lo U_lo in a third). Three (four)
int8 products at twice the float16 rate on two bytes a value. A fixed point's resolution is set by
its group's largest value, so its error depends on how the inputs spread: `--inputs heavy` (normal
values times log-normal scales per channel and per value) measures every column on such inputs.

Wider operands for 16-bit tensors (columns `f2x2-tf32-operands`, `f3x3-tf32-operands`,
`f4x4-mixed-tf32-operands`, fp16 and bf16 only): F(2x2,3x3) (F(3x3), F(4x4)) with U and V rounded
to TF32 (11 significant bits), one product per point product -- what the TF32 tiles compute for
bfloat16 tensors, and what a kernel computes at the 16-bit MMA rate when it carries those values as
float16 under power-of-two scales per tile and per filter (float16 holds a TF32 value exactly within
its exponent range), as the staged-V tiles do. A bfloat16 input has 8 significant bits, so V's
four-term sums fit in 11 bits but for their rounding; a float16 input has 11, and they do not.

Nested F(2,3) (column `f2x1`): the one-dimensional transform along the rows only, a direct sum over
the filter's three rows: V = d B and U = g G^T per input and filter row, V's entries sums of two
inputs (four in F(2x2)), 24 products per 2x2 output tile and (filter, channel) pair.

The transform matrices are built from the points by the Toom-Cook construction (A^T and G from the
points, B^T solved from the identity y = A^T [(G g) * (B^T d)] in float64), so any point set can be
compared; each set is checked against a float64 direct convolution first.

    python benchmarks/winograd_error.py --batch 1 --out-dir benchmarks/results --tag winograd-error-cpu
    python benchmarks/winograd_error.py --batch 1 --precisions fp16,bf16 --inputs heavy \
        --out-dir benchmarks/results --tag winograd-error-cpu-heavy
"""
import argparse
import json
import math
import os
import platform
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suites  # noqa: E402

# F(m x m, 3 x 3): m, and the finite interpolation points (infinity is the last point of every set).
VARIANTS = {
    "f2x2": (2, [0.0, 1.0, -1.0]),
    "f4x4": (4, [0.0, 1.0, -1.0, 2.0, -2.0]),
    "f4x4-half": (4, [0.0, 1.0, -1.0, 0.5, -0.5]),
    "f4x4-mixed": (4, [0.0, 1.0, -1.0, 0.5, -2.0]),
    "f3x3": (3, [0.0, 1.0, -1.0, 2.0]),
}


def transforms(m, points, r=3):
    """A^T (m x n), G (n x r), B^T (n x n) of F(m, r) for the finite `points` (n - 1 of them) and
    infinity, in float64."""
    n = m + r - 1
    assert len(points) == n - 1
    p = torch.tensor(points, dtype=torch.float64)
    at = torch.zeros(m, n, dtype=torch.float64)
    for j in range(m):
        at[j, : n - 1] = p**j
    at[m - 1, n - 1] = 1.0
    g = torch.zeros(n, r, dtype=torch.float64)
    for i in range(n - 1):
        f = math.prod(points[i] - points[l] for l in range(n - 1) if l != i)
        g[i] = p[i] ** torch.arange(r, dtype=torch.float64) / f
    g[n - 1, r - 1] = 1.0
    # B^T from the identity sum_i A^T[j][i] G[i][k] B^T[i][t] = [t == j + k] for every j, k, t.
    rows, rhs = [], []
    for j in range(m):
        for k in range(r):
            for t in range(n):
                row = torch.zeros(n, n, dtype=torch.float64)
                row[:, t] = at[j] * g[:, k]
                rows.append(row.flatten())
                rhs.append(1.0 if t == j + k else 0.0)
    sol = torch.linalg.lstsq(torch.stack(rows), torch.tensor(rhs, dtype=torch.float64).unsqueeze(1)).solution
    bt = sol.reshape(n, n)
    return at, g, bt


PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
TENSOR_DTYPE = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def round_operand(t, precision):
    """A float32 tensor rounded to the MMA operand format of `precision`, back in float32."""
    if precision == "fp32":
        return t
    if precision == "tf32":  # 10 explicit mantissa bits, round to nearest, ties away from zero
        bits = t.float().contiguous().view(torch.int32)
        return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)
    return t.to(TENSOR_DTYPE[precision]).float()


def direct_conv(x, w, padding, precision):
    """The direct convolution at `precision`: operands rounded, float32 sums, the output rounded."""
    y = F.conv2d(round_operand(x.float(), precision), round_operand(w.float(), precision), padding=padding)
    return y.to(TENSOR_DTYPE[precision])


# Operand splits of the element-wise stage (see the module docstring): column -> (variant, split): the
# split operands, v8 for V's low part in float8 e4m3, uv8 for both operands' low parts in float8.
SPLITS = {"f2x2-split-v": ("f2x2", "v"), "f2x2-split-uv": ("f2x2", "uv"), "f2x2-split-v8": ("f2x2", "v8"),
          "f2x2-split-v8-fixed": ("f2x2", "v8f"), "f2x2-split-uv8": ("f2x2", "uv8"),
          "f3x3-split-uv8": ("f3x3", "uv8"), "f4x4-mixed-split-uv8": ("f4x4-mixed", "uv8"),
          "f2x2-split-s8x2": ("f2x2", "s8x2"), "f3x3-split-s8x2-ll": ("f3x3", "s8x2-ll"),
          "f4x4-mixed-split-s8x2": ("f4x4-mixed", "s8x2"), "f4x4-mixed-split-s8x2-ll": ("f4x4-mixed", "s8x2-ll")}
# 16-bit tensors whose U and V are rounded to TF32 (the float16 carriers): column -> variant.
TF32_OPERANDS = {"f2x2-tf32-operands": "f2x2", "f3x3-tf32-operands": "f3x3",
                 "f4x4-mixed-tf32-operands": "f4x4-mixed"}

E4M3_MAX = 448.0  # the largest finite float8 e4m3 (fn) value


def round_e4m3(t, group_dims):
    """t rounded to float8 e4m3 (back in float32) under a power-of-two scale per group -- the entries
    that share the indices of every dimension but `group_dims` -- the largest that keeps the group's
    largest magnitude within E4M3_MAX."""
    amax = t.abs().amax(dim=group_dims, keepdim=True).double()
    # A float32 power of two (a kernel multiplies by it): groups too small for it underflow.
    exponent = torch.floor(torch.log2(E4M3_MAX / amax.clamp_min(1e-300))).clamp(max=126.0)
    scale = torch.where(amax > 0, torch.exp2(exponent), 1.0)
    return ((t.double() * scale).to(torch.float8_e4m3fn).double() / scale).float()


E5M2_MAX = 57344.0  # the largest finite float8 e5m2 value
# V's low part in float8 e5m2 under one scale for every call (split "v8f"): it needs no reduction
# over a chunk's channels and no per-chunk rescaling of the float8 accumulator. V's rounding error is
# at most 2^-8 |V| (bfloat16) or 2^-11 |V| (float16); under 2^12 e5m2's normal range holds it for
# |V| from about 2^-18 to 2^12 (bfloat16), beyond which the correction underflows (small V) or
# saturates (large V) and the error tends to the single-pass one's.
V_LO_FIXED_SCALE = 2.0 ** 12


def round_e5m2_fixed(t, scale=V_LO_FIXED_SCALE):
    """t rounded to float8 e5m2 (back in float32) under the fixed power-of-two `scale`, saturating at
    the largest finite value as cvt.rn.satfinite does."""
    scaled = (t.double() * scale).clamp(-E5M2_MAX, E5M2_MAX)
    return (scaled.to(torch.float8_e5m2).double() / scale).float()


def e4m3_chunks(v, chunk=32):
    """V (N, C, th, tw, n, n) rounded to e4m3 with a scale per (tile, point, chunk of `chunk` channels)."""
    N, C = v.shape[:2]
    cp = -(-C // chunk) * chunk
    vp = F.pad(v, (0, 0, 0, 0, 0, 0, 0, 0, 0, cp - C)).reshape(N, cp // chunk, chunk, *v.shape[2:])
    return round_e4m3(vp, (2,)).reshape(N, cp, *v.shape[2:])[:, :C]


# Split "uv8" (module docstring): the high parts under a power-of-two scale that puts each
# group's largest magnitude at 2^UV8_TOP, the float8 operands under the same scale times 2^UV8_SHIFT
# (low parts) or 2^-UV8_SHIFT (full values), so that all three products carry one scale and share
# one float32 accumulator.
UV8_TOP, UV8_SHIFT = 13, 5


def uv8_parts(t, group_dims, precision):
    """t's high part in `precision`'s MMA format, its low part and t itself in e4m3 (saturating),
    each under the scales above and returned unscaled (powers of two: the products' rounding is
    that of the scaled ones)."""
    t = t.double()
    amax = t.abs().amax(dim=group_dims, keepdim=True).clamp_min(1e-300)
    scale = torch.exp2(UV8_TOP - torch.ceil(torch.log2(amax)))
    e4m3 = lambda a: a.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).double()
    hi = round_operand((t * scale).float(), precision).double()
    lo8 = e4m3((t * scale - hi) * 2.0 ** UV8_SHIFT) / 2.0 ** UV8_SHIFT
    full8 = e4m3(t * scale / 2.0 ** UV8_SHIFT) * 2.0 ** UV8_SHIFT
    return (hi / scale).float(), (lo8 / scale).float(), (full8 / scale).float()


# Split "s8x2" (module docstring): U and V as 16-bit fixed point, q = 256 hi + lo with hi and lo int8,
# under a float32 scale per group that puts its largest magnitude at S8X2_Q_MAX, the largest q whose
# hi = floor((q + 128) / 256) still fits int8.
S8X2_Q_MAX = 32639


def s8x2_parts(t, group_dims):
    """t's two int8 limbs (hi, lo; float64 holding integers) and the float32 scale per group (t's
    largest magnitude over `group_dims` at S8X2_Q_MAX), t * scale ~= 256 hi + lo."""
    amax = t.abs().amax(dim=group_dims, keepdim=True).float()
    scale = torch.where(amax > 0, S8X2_Q_MAX / amax.clamp_min(1e-30), 1.0)
    q = torch.round(t.float() * scale).clamp(-32768, S8X2_Q_MAX).double()  # cvt.rni.s32.f32
    hi = torch.floor((q + 128) / 256)
    return hi, q - 256 * hi, scale


def s8x2_products(v, u, lay_v, lay_u, lolo):
    """The element-wise stage on int8 limbs: V_hi U_hi in one int32 accumulator, V_hi U_lo + V_lo U_hi
    in another (and V_lo U_lo in a third when `lolo`), exact (float64 holds the integer sums), each
    converted to float32 and combined by powers of two, then unscaled by V's scale per (point, tile)
    and U's per (point, filter) in float32."""
    vh, vl, sv = s8x2_parts(v, (1,))
    uh, ul, su = s8x2_parts(u, (1,))
    hh = torch.bmm(lay_v(vh), lay_u(uh))
    cross = torch.bmm(lay_v(vh), lay_u(ul)) + torch.bmm(lay_v(vl), lay_u(uh))
    assert hh.abs().max() < 2**31 and cross.abs().max() < 2**31  # int32 accumulators
    acc = hh.float() * 65536.0 + cross.float() * 256.0
    if lolo:
        acc = acc + torch.bmm(lay_v(vl), lay_u(ul)).float()
    inv_v = 1.0 / lay_v(sv)  # (points, tiles, 1)
    inv_u = 1.0 / lay_u(su)  # (points, 1, filters)
    return acc * inv_v * inv_u


def winograd_conv(x, w, padding, m, at, g, bt, dtype, operands="fp32", split=""):
    """Stride-1 3x3 convolution by F(m x m, 3 x 3) with every stage in `dtype`; U and V rounded to
    the operand format of `operands` (see round_operand) before the element-wise GEMMs, each of the
    operands named in `split` ("v", "uv") carried as a rounded high and low part ("v8": V's low part
    against U both in float8 e4m3; "uv8": U_hi V_hi plus V's low part against U and U's low part
    against V, those four in float8 e4m3; "s8x2" / "s8x2-ll": U and V in two int8 limbs each,
    s8x2_products)."""
    n = m + 2
    at, g, bt = at.to(dtype), g.to(dtype), bt.to(dtype)
    x, w = x.to(dtype), w.to(dtype)
    N, _, H, W = x.shape
    K = w.shape[0]
    Ho, Wo = H + 2 * padding - 2, W + 2 * padding - 2
    th, tw = -(-Ho // m), -(-Wo // m)
    # Pad so that every tile's n x n input patch exists (partial tiles read zeros).
    xp = F.pad(x, (padding, tw * m + 2 - W - padding, padding, th * m + 2 - H - padding))
    d = xp.unfold(2, n, m).unfold(3, n, m)  # N, C, th, tw, n, n
    v = torch.einsum("ia,ncxyab,jb->ncxyij", bt, d, bt)  # B^T d B
    u = torch.einsum("ia,kcab,jb->kcij", g, w, g)  # G g G^T
    # The element-wise stage: n * n GEMMs over the channels.
    def lay_v(t):
        return t.permute(4, 5, 0, 2, 3, 1).reshape(n * n, N * th * tw, t.shape[1])

    def lay_u(t):
        return t.permute(2, 3, 1, 0).reshape(n * n, t.shape[1], K)

    if split.startswith("s8x2"):  # U and V in int8 limbs, exact integer sums (s8x2_products)
        mm = s8x2_products(v, u, lay_v, lay_u, lolo=split == "s8x2-ll")
        return output_transform(mm.reshape(n, n, N, th, tw, K), at, m, Ho, Wo)
    v_hi, u_hi = round_operand(v, operands), round_operand(u, operands)
    v_hi_side = v_hi  # what U's low part multiplies
    if split == "v8":  # V's low part and U in float8 e4m3, scaled (module docstring)
        v_lo, u_lo_side = e4m3_chunks(v - v_hi), round_e4m3(u, (1,))
    elif split == "v8f":  # V's low part in e5m2 under one fixed scale, U in e4m3 per (point, filter)
        v_lo, u_lo_side = round_e5m2_fixed(v - v_hi), round_e4m3(u, (1,))
    elif split == "uv8":  # each low part against the other operand in e4m3, one accumulator (uv8_parts)
        v_hi, v_lo, v_hi_side = uv8_parts(v, (1,), operands)  # scales per (image, tile, point)
        u_hi, u_lo, u_lo_side = uv8_parts(u, (1,), operands)  # per (filter, point)
    else:
        v_lo = round_operand(v - v_hi, operands) if "v" in split else torch.zeros_like(v)
        u_lo = round_operand(u - u_hi, operands) if "u" in split else torch.zeros_like(u)
        u_lo_side = u_hi
    # The MMAs of a split operand's parts summed in float32; U_lo x V_lo is never formed.
    mm = torch.bmm(lay_v(v_hi), lay_u(u_hi))
    if "v" in split:
        mm = mm + torch.bmm(lay_v(v_lo), lay_u(u_lo_side))
    if "u" in split:
        mm = mm + torch.bmm(lay_v(v_hi_side), lay_u(u_lo))
    return output_transform(mm.reshape(n, n, N, th, tw, K), at, m, Ho, Wo)


def output_transform(mm, at, m, Ho, Wo):
    """A^T M A of the element-wise products M (n, n, N, tile rows, tile columns, K), cropped to Ho x Wo."""
    _, _, N, th, tw, K = mm.shape
    y = torch.einsum("ia,abnxyk,jb->nkxiyj", at, mm, at).reshape(N, K, th * m, tw * m)
    return y[:, :, :Ho, :Wo]


def nested_rows_conv(x, w, padding, at, g, bt, dtype, operands="fp32"):
    """Stride-1 3x3 convolution by F(2,3) along the rows nested in a direct sum over the filter's
    rows, every stage in `dtype`; U = g G^T and V = d B rounded as in winograd_conv."""
    at, g, bt = at.to(dtype), g.to(dtype), bt.to(dtype)
    x, w = x.to(dtype), w.to(dtype)
    N, C, H, W = x.shape
    K = w.shape[0]
    Ho, Wo = H + 2 * padding - 2, W + 2 * padding - 2
    tw = -(-Wo // 2)
    xp = F.pad(x, (padding, tw * 2 + 2 - W - padding, padding, padding))
    v = round_operand(torch.einsum("ia,nchta->nchti", bt, xp.unfold(3, 4, 2)), operands)  # d B per row
    u = round_operand(torch.einsum("ia,kcra->kcri", g, w), operands)  # g G^T per filter row
    m = torch.einsum("kcri,ncytir->nkyti", u, v.unfold(2, 3, 1))  # sum over channels and filter rows
    y = torch.einsum("ji,nkyti->nkytj", at, m).reshape(N, K, Ho, tw * 2)
    return y[..., :Wo]


def heavy_tailed(batch, channels, hw):
    """Standard normal values times log-normal scales (sigma 1) per channel and per value: channels
    of different magnitudes and outliers within each, as activations have."""
    return (torch.randn(batch, channels, hw, hw) * torch.exp(torch.randn(1, channels, 1, 1))
            * torch.exp(torch.randn(batch, channels, hw, hw)))


# The inputs' distributions (--inputs) and how the result files name them; the weights are
# randn / sqrt(C * 9) in both.
INPUTS = {"randn": lambda batch, channels, hw: torch.randn(batch, channels, hw, hw), "heavy": heavy_tailed}
INPUT_NOTES = {"randn": "inputs randn",
               "heavy": "inputs randn times log-normal scales (sigma 1) per channel and per value"}


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", default=None)
    ap.add_argument("--tag", default="winograd-error-cpu")
    ap.add_argument("--precisions", default=",".join(PRECISIONS), help="comma list of " + ", ".join(PRECISIONS))
    ap.add_argument("--inputs", choices=sorted(INPUTS), default="randn", help="the inputs' distribution (INPUTS)")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    mats = {name: transforms(m, pts) for name, (m, pts) in VARIANTS.items()}
    # Each point set is exact in float64 first.
    x = torch.randn(2, 5, 11, 9, dtype=torch.float64)
    w = torch.randn(7, 5, 3, 3, dtype=torch.float64)
    ref = F.conv2d(x, w, padding=1)
    for name, (m, _) in VARIANTS.items():
        err = rel_err(winograd_conv(x, w, 1, m, *mats[name], torch.float64), ref)
        assert err < 1e-12, f"{name}: float64 error {err:.1e}"
    f2 = mats["f2x2"]
    assert rel_err(nested_rows_conv(x, w, 1, *f2, torch.float64), ref) < 1e-12
    precisions = [p for p in args.precisions.split(",") if p]
    for p in precisions:
        if p not in PRECISIONS:
            ap.error(f"--precisions: unknown precision {p!r} (choose from {', '.join(PRECISIONS)})")
    rows = []
    layers = [layer for layer in suites.RESNET + suites.YOLO
              if layer.R == 3 and layer.kw == 3 and layer.stride == 1 and layer.dilation == 1 and layer.groups == 1]
    split_cols = list(SPLITS) if any(p != "fp32" for p in precisions) else []
    wide_cols = list(TF32_OPERANDS) if any(p in ("fp16", "bf16") for p in precisions) else []
    cols = ["direct", *VARIANTS, "f2x1", *split_cols, *wide_cols]
    for precision in precisions:
        dtype = TENSOR_DTYPE[precision]
        for layer in layers:
            # Inputs are tensors of the precision's dtype; the reference is their float64 convolution.
            x = INPUTS[args.inputs](args.batch, layer.C, layer.HW).to(dtype).double()
            w = (torch.randn(layer.K, layer.C, 3, 3) / math.sqrt(layer.C * 9)).to(dtype).double()
            pad = layer.pads[0]
            ref = F.conv2d(x, w, padding=pad)
            row = {"layer": layer.name, "precision": precision, "N": args.batch, "C": layer.C, "K": layer.K,
                   "HW": layer.HW, "direct": rel_err(direct_conv(x, w, pad, precision), ref)}
            for name, (m, _) in VARIANTS.items():
                y = winograd_conv(x, w, pad, m, *mats[name], torch.float32, operands=precision)
                row[name] = rel_err(y.to(dtype), ref)
            row["f2x1"] = rel_err(nested_rows_conv(x, w, pad, *f2, torch.float32, operands=precision).to(dtype), ref)
            if precision != "fp32":
                for name, (variant, split) in SPLITS.items():
                    m = VARIANTS[variant][0]
                    y = winograd_conv(x, w, pad, m, *mats[variant], torch.float32, operands=precision, split=split)
                    row[name] = rel_err(y.to(dtype), ref)
            if precision in ("fp16", "bf16"):  # 16-bit tensors, U and V at TF32's precision
                for name, variant in TF32_OPERANDS.items():
                    m = VARIANTS[variant][0]
                    y = winograd_conv(x, w, pad, m, *mats[variant], torch.float32, operands="tf32")
                    row[name] = rel_err(y.to(dtype), ref)
            rows.append(row)
            print(" ".join(f"{k}={v:.2e}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    geomean = {}
    for precision in precisions:
        sel = [r for r in rows if r["precision"] == precision]
        geomean[precision] = {k: math.exp(sum(math.log(r[k]) for r in sel) / len(sel)) for k in cols if k in sel[0]}
        print("geomean", precision, " ".join(f"{k}={v:.2e}" for k, v in geomean[precision].items()))
    if args.out_dir:
        meta = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "seed": args.seed,
                "inputs": args.inputs,
                "variants": {k: {"m": m, "points": pts + ["inf"]} for k, (m, pts) in VARIANTS.items()},
                "note": "transforms and element-wise GEMMs in float32 on the CPU against a float64 direct "
                        "convolution of the same inputs; tf32/fp16/bf16 round U and V to the MMA operand format "
                        "and the output to the tensor dtype; direct = the direct convolution at that precision; "
                        f"{INPUT_NOTES[args.inputs]}, weights randn / sqrt(C * 9); "
                        "f2x2-split-v / -uv carry V (and U) as a "
                        "rounded high and low part, two (three) MMA products per point product; f2x2-split-v8 "
                        "adds U x V_lo in float8 e4m3 (power-of-two scales per point and tile and 32 channels, "
                        "per point and filter); f2x2-split-v8-fixed: V_lo in float8 e5m2 under the fixed scale 2^12, "
                        "saturating, U in e4m3 per point and filter; *-split-uv8: U_hi V_hi plus V_lo U and U_lo V, "
                        "the four float8 operands in e4m3, one accumulator: V scaled per point and tile over all "
                        "channels, U per point and filter (largest at 2^13), low parts at that scale times 2^5, "
                        "float8 full values times 2^-5; *-split-s8x2: U and V as 16-bit fixed point in two int8 "
                        "limbs (V scaled per point and tile over all channels, U per point and filter, the largest "
                        "at 32639), V_hi U_hi plus V_hi U_lo + V_lo U_hi in exact integer sums (-ll: plus V_lo "
                        "U_lo); *-tf32-operands: fp16/bf16 tensors with U and V "
                        "rounded to TF32; f2x1: F(2,3) along rows nested in a direct "
                        "sum over filter rows"}
        path = os.path.join(args.out_dir, args.tag)
        with open(path + ".json", "w") as f:
            json.dump({"meta": meta, "rows": rows, "geomean": geomean}, f, indent=1)
        with open(path + ".md", "w") as f:
            f.write(f"# Winograd error against float64 (3x3 stride-1 suite layers, CPU, batch {args.batch}, "
                    f"{INPUT_NOTES[args.inputs]})\n\n")
            f.write("Relative error ||y - y64|| / ||y64||, and in brackets its ratio to `direct`, the direct "
                    "convolution at the same precision (cuDNN's error at that precision). fp32: every stage in "
                    "float32; tf32 / fp16 / bf16: U and V rounded to the MMA operand format, float32 sums and "
                    "transforms, the output rounded to the dtype. Points: " + "; ".join(
                        f"`{k}` F({m}x{m},3x3) at {', '.join(str(p) for p in pts)}, inf"
                        for k, (m, pts) in VARIANTS.items()) + ". `f2x1`: F(2,3) along the rows nested in a "
                    "direct sum over the filter's rows (24 products per 2x2 tile against the direct "
                    "convolution's 36). `f2x2-split-v` / `f2x2-split-uv` (reduced precisions): F(2x2,3x3) with V "
                    "(and U) carried as a rounded high and low part, two (three) MMA products per point product; "
                    "`f2x2-split-v8`: V's low part against U in float8 e4m3 under power-of-two scales (16 "
                    "products plus 16 at twice the rate); `f2x2-split-v8-fixed`: the same products with V's low "
                    "part in float8 e5m2 under one fixed scale, 2^12, and U in e4m3 per (point, filter); "
                    "`*-split-uv8`: U_hi x V_hi plus V's low part against U and U's low part against V, the four "
                    "float8 operands in e4m3, in one accumulator under power-of-two scales (V's per point and tile "
                    "over all channels, U's per point and filter, the float8 ones tied to them by 2^5 and 2^-5): "
                    "per output n^2/m^2 products plus twice as many at twice the rate; `*-split-s8x2`: U and V as "
                    "16-bit fixed point in two int8 limbs under a scale per group (V's per point and tile over all "
                    "channels, U's per point and filter), V_hi x U_hi and V_hi x U_lo + V_lo x U_hi in exact integer "
                    "sums, three int8 products (`-ll`: plus V_lo x U_lo, four); "
                    "`*-tf32-operands` (fp16 / bf16 tensors): U and V at TF32's precision, one product per "
                    "point product (float16 words under power-of-two scales carry them exactly).\n")
            for precision in precisions:
                pcols = [c for c in cols[1:] if c in geomean[precision]]
                f.write(f"\n## {precision}\n\n")
                f.write("| layer | C | K | HxW | direct | " + " | ".join(pcols) + " |\n|" + "---|" * (5 + len(pcols))
                        + "\n")
                for r in (r for r in rows if r["precision"] == precision):
                    f.write(f"| {r['layer']} | {r['C']} | {r['K']} | {r['HW']} | {r['direct']:.2e} | " + " | ".join(
                        f"{r[c]:.2e} ({r[c] / r['direct']:.1f}x)" for c in pcols) + " |\n")
                gm = geomean[precision]
                f.write(f"| geomean | | | | {gm['direct']:.2e} | " + " | ".join(
                    f"{gm[c]:.2e} ({gm[c] / gm['direct']:.1f}x)" for c in pcols) + " |\n")
        print("wrote", path + ".json/.md")


if __name__ == "__main__":
    main()
