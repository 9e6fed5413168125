"""What a fused half-precision F(2x2,3x3) kernel (and a staged F(4x4,3x3) one) could reach on the 3x3
stride-1 suite layers against the issue's forward bar (1.2x cuDNN at the same precision and layout), counted from measured rates:
- the wgmma rates and the shared-memory data path of `benchmarks/results/wgmma-rate-<gpu>.json`
  (benchmarks/micro/wgmma_rate.cu): MMAs whose operands both come from shared memory run at 0.66 of
  the peak at N = 32 and 0.99 from N = 64, and they and the threads' shared-memory and L1 accesses
  (shared loads and stores, global loads that hit in L1) share one data path of about 126 bytes per
  clock and SM; bulk copies into shared memory do not take from it, but bring at most about 42
  bytes per clock and SM from L2 when every SM copies (L2's share: an SM takes in 63-77 from
  multicast copies, the `intake` table of `benchmarks/results/staged-v-bound-<gpu>.md`);
- the device-to-device copy rate (4.3 TB/s, the device notes) for the input and output;
- cuDNN's times and ours in `benchmarks/results/resnet-yolo-<gpu>.json` (N = 32, channels_last).
Counts, not a kernel: each design's time is bounded below by the largest of its MMA time, its bytes
through the data path, its L2 intake, its input transform's instructions, its input and output
through memory, and (R-layers) today's host path.

The last table counts the bfloat16 forward+backward on the Y-layers: the best forward and grad_input
(C and K swapped) designs plus a fused grad_weight (WEIGHT_GRAD_DESIGNS, weight_grad_bounds), against
cuDNN's forward+backward; the other layers of the bar's geomean enter as measured today.

A fused F(2x2) block keeps its points' accumulators in registers for the whole channel loop:
points x tiles x filters float32 values, at most 32768 per SM (64 registers a thread at 512
threads). That fixes the per-point MMA tile, and the tile fixes the rate and the bytes:
- `n32`: all 16 points, 64 filters (A, U) x 32 tiles (B, V), both from shared memory (`tf32-wgmma`
  today, below 256 channels).
- `n64`: 8 points at a block (the two halves on the two blocks of a cluster, as `tf32-wgmma-cluster`
  today from 256 channels; or two passes over the channels, point rows 0-1 then 2-3), each reading
  three of a patch's four rows, 64 filters x 64 tiles.
- `rs`: V in registers as A (64 tiles x 32 filters, 4 points per warpgroup, U as B from shared
  memory); V never touches shared memory, but each warpgroup loads the 8 patch values its point
  column needs, so every patch value is loaded twice.
- `staged`: V transformed once by a kernel of its own and written to memory (as
  `tf32-wgmma-cluster-vbulk` today), then the `n64` GEMM with the output transform, U and V by bulk
  copies shared by clusters of 2 x 2 blocks: no patch loads or V stores on the data path, but V
  through memory twice and through L2 into every block. Its "issue" column is the transform
  kernel's time (its instructions or its memory traffic), which the GEMM's bound adds to.
- `staged-f4x4`: the staged design for F(4x4,3x3) (6x6 patches, 36 points per 4x4 outputs): 12
  points a block, 64 filters x 64 tiles (96 accumulators a thread), the 36 points on a cluster of
  3 blocks. A direct multiply-add then takes 4x fewer MMA multiply-adds (2.25x for F(2x2)), so at
  the same bytes per MMA a block brings 1.78x fewer bytes into the SM per direct multiply-add; V is
  2.25x the input (F(2x2): 4x). F(4x4)'s error on TF32-precise operands (carriers) is about 1.6x
  cuDNN's in bfloat16 (the committed `winograd:f4x4` bf16 rows), within the bar; 7-14x in float16.
Products (the designs' suffixes):
- `tf32`: one TF32 product per point product -- the bfloat16 calls' tiles today; these designs
  check the count against their measured times (float16 calls run 3xBF16 `mma.sync` tiles, not
  counted).
- `carrier`: one product at the 16-bit rate with U and V at TF32's precision, carried as float16
  under power-of-two scales per tile and per filter (as the staged-V tiles do today); the tiles'
  scales need the input's largest value per pixel first, a pass over the input (`prepass`). Within
  2x of cuDNN's error for bfloat16 tensors, not for float16 ones (winograd-error-cpu.md,
  `f2x2-tf32-operands`).
- `split`: U x V_hi in bfloat16 plus U x V_lo in float8 (24 products at the 16-bit rate), within 2x
  of cuDNN's error for both (`f2x2-split-v8-fixed`).
- `split-uv8`: U_hi x V_hi at the 16-bit rate plus V_lo x U and U_lo x V in float8 e4m3, one
  accumulator under tied power-of-two scales (`*-split-uv8`: F(4x4) at the mixed points 1.05-1.06x
  cuDNN's error in float16, 1.08-1.15x in bfloat16); U and V are three planes each (the 16-bit high
  part, an e4m3 copy, the e4m3 low part: 4 bytes a value), and V's scales need the input's largest
  value per pixel first, as the carriers' do (`prepass`).
- `s8x2`, `s8x2-ll`: U and V as 16-bit fixed point in two int8 limbs (q = 256 hi + lo), V under a
  scale per (point, tile) over all channels, U per (point, filter): V_hi U_hi in one int32
  accumulator, V_hi U_lo + V_lo U_hi in a second, V_lo U_lo in a third (`-ll`); three (four) int8
  MMAs on two planes of one byte, 2 bytes a value as the carriers'. Within bfloat16's error bar;
  float16's on the study's Gaussian inputs only (`*-split-s8x2*` in winograd-error-cpu.md: F(2x2)
  with three products 1.0-1.1x cuDNN's error, F(4x4) at the mixed points with four 1.1-1.7x), not
  on heavy-tailed ones (winograd-error-cpu-heavy.md: up to 2.5x and 4.7x), so the float16 table
  counts them outside it. The int8 rate is taken as the measured e4m3 rate (S8_RATE_KIND; the two
  are equal on Hopper's data sheet). A scale needs its group's largest value over all channels
  before any of it is quantized: counted as a transform kernel in two passes (the input read
  twice, as the carriers' `prepass`; the transform's instructions twice, plus about 6 a value to
  scale, convert and split into limbs). The extra accumulators take registers from the points: 4
  points a block (F(2x2) with two accumulators, a cluster of 4 blocks a tile; F(4x4) with three, a
  cluster of 9).

Bytes through the data path per block and chunk of 16 channels: the MMAs' shared-memory operand
reads, V's stores (not `rs`) and the patch loads (bfloat16 input); per block, the epilogue's staging
and stores (`epilogue_bytes`). U arrives by bulk copies, multicast to the two blocks of a cluster:
with the input rows a block reads per chunk, it bounds the time by the L2 intake (`intake`). Each
precision's table is counted again without multicast (every block takes in all of its operands):
the bound for kernels whose copies are unicast, as today's walking clusters' are (docs/winograd.md,
"Bytes into the SMs per unit of convolution work", "The SMs' intake of bulk copies, measured").

    python benchmarks/winograd_half_bound.py --gpu h200 --out benchmarks/results/winograd-half-bound-h200
"""
import argparse
import json
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
DATA_PATH_BYTES_PER_CLOCK = 126.0  # wgmma_rate.cu "contention": MMA operands and other accesses together
BULK_BYTES_PER_CLOCK = 42.0  # wgmma_rate.cu "contention", bulk copies from L2 alone
U_MULTICAST = 2  # blocks of a cluster sharing each U copy
V_MULTICAST = 2  # staged: blocks of a cluster sharing each V copy (clusters of 2 x 2, as -uvmulticast)
CLOCK_GHZ = 1.75  # the SM clock under sustained tensor-core load (wgmma_rate's rows: 1.63-1.80)
COPY_TBS = 4.3  # device-to-device copy, bytes read and written (the device notes, H200)
# Today's host path of a bfloat16 channels_last call on the R-layers (docs/winograd.md, "Where the
# half-precision time goes"): a floor for any kernel behind the same dispatch.
HOST_US = {"R2": 22.7, "R6": 18.4, "R9": 27.3, "R12": 27.9}
CHUNK = 16  # channels per chunk
IN_BYTES = 2  # bfloat16 / float16 input
LAYERS = ("Y2", "Y4", "Y8", "Y12", "Y18", "R2", "R6", "R9", "R12")

# name: (layout of the MMAs, points a pass, tiles, filters, products, thread instructions per
#        transformed input value, output tile m of F(m x m, 3 x 3))
# The instructions of the `n64`, `rs` and `staged` designs are SASS (benchmarks/micro/
# transform_count.cu, whose kernels do one chunk of each kind of transform: `ss8` split 7.8 and
# single 5.4, `rs` split 9.3 and single 6.8 a value). The `n32` designs' and today's are counted by
# hand from the same sequence: a 16-byte load per patch pixel and 8 channels, a widening per value,
# 2 adds per value, then the products' conversion and stores; F(4x4)'s by hand too (6-point rows and
# columns: about 5 multiply-adds a value where F(2x2) takes 2 adds), where its transform kernel is
# bound by its memory traffic anyway.
DESIGNS = {
    "n32-tf32": ("ss", 16, 32, 64, "tf32", 4.5, 2),
    "n64-tf32": ("ss", 8, 64, 64, "tf32", 5.0, 2),
    "n32-carrier": ("ss", 16, 32, 64, "carrier", 5.0, 2),
    "n64-carrier": ("ss", 8, 64, 64, "carrier", 5.4, 2),
    "rs-carrier": ("rs", 16, 64, 32, "carrier", 6.8, 2),
    "staged-carrier": ("staged", 8, 64, 64, "carrier", 5.4, 2),
    "staged-f4x4-carrier": ("staged", 12, 64, 64, "carrier", 7.5, 4),
    # By hand: the carrier's 7.5 plus the low part's residual, two scalings and two e4m3 conversions.
    "staged-f4x4-split-uv8": ("staged", 12, 64, 64, "split-uv8", 11.5, 4),
    "n32-split": ("ss", 16, 32, 64, "split", 7.3, 2),
    "n64-split": ("ss", 8, 64, 64, "split", 7.8, 2),
    "rs-split": ("rs", 16, 64, 32, "split", 9.3, 2),
    "staged-split": ("staged", 8, 64, 64, "split", 7.8, 2),
    # By hand: the carriers' transform twice (the maxima's pass, then the limbs'), plus 6 a value.
    "staged-s8x2": ("staged", 4, 64, 64, "s8x2", 16.8, 2),
    "staged-f4x4-s8x2-ll": ("staged", 4, 64, 64, "s8x2-ll", 21.0, 4),
}
# The products: their MMAs ([(wgmma kind, operand bytes a value)]: the bytes each MMA reads), the
# operands' bytes a value in memory (the planes the MMAs read, which int8 limbs' MMAs read more than
# once), and the precisions whose error bar they keep (winograd-error-cpu.md).
PRODUCTS = {
    "tf32": ([("tf32", 4)], 4, ("bf16",)),
    "carrier": ([("bf16", 2)], 2, ("bf16",)),
    "split": ([("bf16", 2), ("e4m3", 1)], 3, ("bf16", "fp16")),
    "split-uv8": ([("bf16", 2), ("e4m3", 1), ("e4m3", 1)], 4, ("bf16", "fp16")),
    # Float16's bar only on Gaussian inputs: a fixed point's resolution is set by its group's
    # largest value, and heavy-tailed inputs put the error past it (winograd-error-cpu-heavy.md).
    "s8x2": ([("s8", 1)] * 3, 2, ("bf16",)),
    "s8x2-ll": ([("s8", 1)] * 4, 2, ("bf16",)),
}
# The measured rate that stands for int8 MMAs' (wgmma_rate.cu times no int8 kind).
S8_RATE_KIND = "e4m3"
# The products whose scales need a pass over the input first.
PREPASS_PRODUCTS = ("carrier", "split-uv8", "s8x2", "s8x2-ll")


def rate_tflops(rates, kind, n):
    if kind.startswith("s8-"):
        kind = S8_RATE_KIND + kind[2:]
    rows = [r for r in rates["rows"] if r["kind"] == kind and r["n"] == n]  # kind: e.g. "bf16-ss"
    return max(rows, key=lambda r: r["warpgroups"])["tflops"]


def chunk_bytes(layout, points, tiles, filters, read_bytes, operand_bytes):
    """Bytes through the shared-memory data path per block and chunk (module docstring): the MMAs'
    reads at `read_bytes` a value, V's stores at `operand_bytes`."""
    u = points * filters * CHUNK * read_bytes
    if layout == "staged":
        return u + points * tiles * CHUNK * read_bytes  # the MMAs' reads; U and V come by bulk copies
    if layout == "rs":
        return u + tiles * 32 * CHUNK * IN_BYTES  # U read by the MMAs; 2 x 16 patch values
    v = points * tiles * CHUNK * read_bytes
    patch = tiles * (16 if points == 16 else 12) * CHUNK * IN_BYTES
    return (u + v) + v * operand_bytes / read_bytes + patch  # MMA reads of U and V, V's stores, the patch loads


def intake_bytes(layout, points, tiles, filters, operand_bytes, multicast=True):
    """Bytes from L2 per block and chunk: its share of U (multicast) and its input rows (tiles in
    rows of 32, two input rows a tile row, plus the rows its patches add: 2 for 16 points, 1 for 8);
    staged: its shares of U's and V's chunks. Without `multicast` each block takes in its whole U and
    V chunks: the bound for unicast copies (multicast delivers every byte to each block of the
    cluster)."""
    u_share, v_share = (U_MULTICAST, V_MULTICAST) if multicast else (1, 1)
    if layout == "staged":
        return points * CHUNK * operand_bytes * (filters / u_share + tiles / v_share)
    tile_rows = max(1, tiles // 32)
    rows = 2 * tile_rows + (2 if points == 16 else 1)
    return points * filters * CHUNK * operand_bytes / u_share + rows * (2 * 32 + 2) * CHUNK * IN_BYTES


def epilogue_bytes(points, tiles, filters, m=2):
    """Bytes through the data path per block after its channel loop: a warpgroup holding a column of
    points applies A^T down it in registers, and the block stages the rest through shared memory
    (written and read, float32): 8 values per (tile, filter) for 16 points; 4 for 8 points, plus the
    2 its cluster partner needs (written remotely, read there); then the outputs (16-bit). F(4x4),
    and blocks of fewer than 8 points: each of its points staged once (written, locally or in the
    block that transforms that pair, and read), and its share of the pairs' m^2 outputs (its points
    over the tile's, a third for F(4x4)'s 12 of 36)."""
    pairs = tiles * filters
    if m == 4 or points < 8:
        return pairs * (2 * points * 4 + m * m * IN_BYTES * points / (m + 2) ** 2)
    if points == 16:
        return pairs * (2 * 8 * 4 + 4 * IN_BYTES)
    return pairs * (2 * 4 * 4 + 2 * 2 * 4 + 2 * IN_BYTES)


# grad_weight, fused: dU[p] = sum over tiles of dM[p]^T V[p], both operands transformed by the block's
# threads (dM = A dY A^T from 4 grad_output values, V from 16 input values) and stored to shared
# memory for the MMAs, float16 carriers (bfloat16 tensors): name: (points a block, channels a
# block (the MMAs' N; 64 filters as M), V instructions a value (transform_count.cu's `ss8 single`),
# dM instructions a value (by hand: 4 loads and widenings, 12 adds, scale and conversion, 16 values)).
WEIGHT_GRAD_DESIGNS = {"w32-carrier": (16, 32, 5.4, 3.0), "w64-carrier": (8, 64, 5.4, 3.0)}


def weight_grad_bounds(C, K, H, W, rates, sms):
    """grad_weight's bound (µs) for each WEIGHT_GRAD_DESIGNS entry: a pass over each operand for its
    scales, then the larger of the MMAs, the data path (MMA reads, both operands' stores, the raw
    loads), L2 (each block's input rows and grad_output rows) and the transforms' instructions; then,
    where the tiles are split across blocks to fill the GPU, the partial sums through memory."""
    tiles = 32 * math.ceil(H / 2) * math.ceil(W / 2)
    macs = tiles * 16.0 * C * K
    x_bytes, dy_bytes = 32 * C * H * W * IN_BYTES, 32 * K * H * W * IN_BYTES
    out = {}
    for name, (points, n, per_v, per_dm) in WEIGHT_GRAD_DESIGNS.items():
        chunks = macs / (points * 64 * n * CHUNK)  # chunks of 16 tiles
        mma_us = 2.0 * macs / (rate_tflops(rates, "bf16-ss", n) * 1e12) * 1e6
        operands = points * (64 + n) * CHUNK * 2
        raw = CHUNK * n * (16 if points == 16 else 12) * IN_BYTES + CHUNK * 64 * 4 * IN_BYTES
        path_us = chunks * (2 * operands + raw) / (DATA_PATH_BYTES_PER_CLOCK * CLOCK_GHZ * 1e9 * sms) * 1e6
        rows_in = 4 * (2 * CHUNK + 2) * n * IN_BYTES + 2 * 2 * CHUNK * 64 * IN_BYTES
        intake_us = chunks * rows_in / (BULK_BYTES_PER_CLOCK * CLOCK_GHZ * 1e9 * sms) * 1e6
        issue_us = chunks * points * CHUNK * (n * per_v + 64 * per_dm) / (32 * 4 * CLOCK_GHZ * 1e9 * sms) * 1e6
        prepass_us = (x_bytes + dy_bytes) / (COPY_TBS * 1e12) * 1e6
        blocks = math.ceil(K / 64) * math.ceil(C / n) * (16 // points)
        splits = max(1, math.ceil(sms / blocks))
        finish_us = (splits * 16 * K * C * 4 * 2 / (COPY_TBS * 1e12) * 1e6) if splits > 1 else 0.0
        out[name] = {"mma_us": mma_us, "data_path_us": path_us, "intake_us": intake_us, "issue_us": issue_us,
                     "prepass_us": prepass_us, "splits": splits, "finish_us": finish_us,
                     "bound_us": prepass_us + max(mma_us, path_us, intake_us, issue_us) + finish_us}
    return out


def fwdbwd_table(rates, suite, sms, out, lines):
    """bfloat16 forward+backward on the Y-layers (the R-layers' calls are host-bound, and a fused
    pass's host floor was measured for the forward only): the best carrier or split design of the
    forward and of grad_input (C and K swapped), plus the best grad_weight design, against cuDNN's
    forward+backward in the same process."""
    fwd = {r["layer"]: r for r in suite["rows"] if r["N"] == 32 and r["mode"] == "fwd" and r["precision"] == "bf16"
           and r["layout"] == "nhwc" and r["algorithm"] == "winograd" and r["R"] == 3 and r["stride"] == 1}
    fb = {r["layer"]: r for r in suite["rows"] if r["N"] == 32 and r["mode"] == "fwdbwd" and r["precision"] == "bf16"
          and r["layout"] == "nhwc" and r["algorithm"] == "winograd" and r["R"] == 3 and r["stride"] == 1}
    within = [d for d, spec in DESIGNS.items() if "bf16" in PRODUCTS[spec[4]][2] and spec[4] != "tf32"]
    rows = []
    for layer in [l for l in LAYERS if l.startswith("Y")]:
        m = fwd[layer]
        C, K, H, W = m["C"], m["K"], m["H"], m["W"]
        f = pass_bounds(C, K, H, W, rates, sms, 0.0)
        g = pass_bounds(K, C, H, W, rates, sms, 0.0)
        w = weight_grad_bounds(C, K, H, W, rates, sms)
        bf, bg, bw = (min(within, key=lambda d: f[d]["bound_us"]), min(within, key=lambda d: g[d]["bound_us"]),
                      min(w, key=lambda d: w[d]["bound_us"]))
        total = f[bf]["bound_us"] + g[bg]["bound_us"] + w[bw]["bound_us"]
        rows.append({"layer": layer, "cudnn_us": fb[layer]["cudnn_ms"] * 1e3, "ours_us": fb[layer]["ms"] * 1e3,
                     "forward": (bf, f[bf]["bound_us"]), "grad_input": (bg, g[bg]["bound_us"]),
                     "grad_weight": (bw, w[bw]["bound_us"]), "weight_grad_designs": w, "bound_us": total,
                     "ratio_bound": fb[layer]["cudnn_ms"] * 1e3 / total})
    geo = geomean([r["ratio_bound"] for r in rows])
    others = [r for l, r in fb.items() if l not in {x["layer"] for x in rows}]
    geo_bar = geomean([r["ratio_bound"] for r in rows] + [r["ratio"] for r in others])
    out["fwdbwd_bf16"] = {"rows": rows, "geomean_ratio_bound_y_layers": geo,
                          "geomean_with_other_layers_as_measured": geo_bar,
                          "other_layers": {r["layer"]: r["ratio"] for r in others}}
    lines += ["## bf16 forward+backward (Y-layers)\n",
              "Bound µs of each pass's best design within the error bar (forward and grad_input: the carrier and "
              "split designs above, grad_input with C and K swapped; grad_weight: `w32-carrier` or `w64-carrier`, "
              "the script's WEIGHT_GRAD_DESIGNS), against cuDNN's forward+backward (trainable weights) in the same "
              "process.\n",
              "| layer | cuDNN µs | ours µs | forward | grad_input | grad_weight | bound µs (x cuDNN) |",
              "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['layer']} | {r['cudnn_us']:.0f} | {r['ours_us']:.0f} | {r['forward'][1]:.0f} `{r['forward'][0]}` | "
                     f"{r['grad_input'][1]:.0f} `{r['grad_input'][0]}` | {r['grad_weight'][1]:.0f} "
                     f"`{r['grad_weight'][0]}` | {r['bound_us']:.0f} ({r['ratio_bound']:.2f}x) |")
    lines.append(f"| geomean | | | | | | **{geo:.2f}x** |")
    lines.append("")
    lines.append(f"With the other layers of the bar's geomean ({', '.join(f'{k} {v:.2f}x' for k, v in out['fwdbwd_bf16']['other_layers'].items())}) "
                 f"as measured today: **{geo_bar:.2f}x** (the bar: 1.0x).")
    lines.append("")


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--out", default=None, help="path without extension: writes .json and .md")
    args = ap.parse_args(argv)
    results = os.path.join(HERE, "results")
    rates = json.load(open(os.path.join(results, f"wgmma-rate-{args.gpu}.json")))
    suite = json.load(open(os.path.join(results, f"resnet-yolo-{args.gpu}.json")))
    sms = rates["sms"]
    out = {"gpu": rates["gpu"], "data_path_bytes_per_clock": DATA_PATH_BYTES_PER_CLOCK, "clock_ghz": CLOCK_GHZ,
           "copy_tbs": COPY_TBS, "host_us": HOST_US, "precisions": {}}
    lines = [f"# A half-precision F(2x2,3x3) or F(4x4,3x3): counted bounds against the bars ({rates['gpu']}, "
             f"channels_last, N = 32)\n",
             "Source: `benchmarks/winograd_half_bound.py` (counts from measured rates; its docstring defines the "
             "designs). µs per forward, bounded by what is named: MMA the point products (F(2x2); F(4x4) for "
             "`staged-f4x4`) at the measured wgmma rates of the design's tile; "
             f"path its bytes through the shared-memory data path at {DATA_PATH_BYTES_PER_CLOCK:.0f} B per clock and "
             f"SM ({CLOCK_GHZ} GHz); L2 U (multicast to {U_MULTICAST} blocks) and the input rows at "
             f"{BULK_BYTES_PER_CLOCK:.0f} B per clock and SM; bound the largest of MMA, path, L2, input + output at "
             f"{COPY_TBS} TB/s (I/O), the transform's instructions at 4 warp instructions per clock (issue; "
             "per value from the SASS of transform_count.cu for n64-split and rs-split, by hand for the "
             "others) and "
             "the R-layers' host path today (host); `staged` the transform kernel's time plus the GEMM's; "
             "`carrier` designs add a pass over the input for their scales. (x) = cuDNN's time over the bound, "
             "the best ratio the design could reach. The bar is 1.2x (geomean). cuDNN and ours: the auto "
             "`winograd` rows of `resnet-yolo` on this GPU, cuDNN at the same precision in the same process.\n"]
    for precision in ("bf16", "fp16"):
        table(precision, rates, suite, sms, out, lines)
    fwdbwd_table(rates, suite, sms, out, lines)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        out["source"] = "benchmarks/winograd_half_bound.py"
        with open(args.out + ".json", "w") as f:
            json.dump(out, f, indent=1)
        with open(args.out + ".md", "w") as f:
            f.write(text)


def pass_bounds(C, K, H, W, rates, sms, host_us, multicast=True):
    """Each design's bound (µs) on a forward-structured pass (the forward, or grad_input with C and K
    swapped): {design: {mma_us, data_path_us, intake_us, issue_us, prepass_us, bound_us}}; `multicast`
    as intake_bytes."""
    in_bytes, out_bytes = 32 * C * H * W * IN_BYTES, 32 * K * H * W * IN_BYTES
    io_us = (in_bytes + out_bytes) / (COPY_TBS * 1e12) * 1e6
    designs = {}
    for name, (layout, points, t, f, products, per_v, m) in DESIGNS.items():
        tiles = 32 * math.ceil(H / m) * math.ceil(W / m)
        tile_points = (m + 2) ** 2
        macs = tiles * float(tile_points) * C * K
        mmas, operand_bytes, _ = PRODUCTS[products]
        n = f if layout == "rs" else t  # the MMAs' N: filters (rs) or tiles
        source = "rs" if layout == "rs" else "ss"
        mma_us = sum(2.0 * macs / (rate_tflops(rates, f"{kind}-{source}", n) * 1e12) for kind, _ in mmas) * 1e6
        chunks = macs / (points * t * f * CHUNK)
        blocks = chunks / math.ceil(C / CHUNK)
        path_bytes = (chunks * chunk_bytes(layout, points, t, f, sum(b for _, b in mmas), operand_bytes)
                      + blocks * epilogue_bytes(points, t, f, m))
        path_us = path_bytes / (DATA_PATH_BYTES_PER_CLOCK * CLOCK_GHZ * 1e9 * sms) * 1e6
        intake_us = chunks * intake_bytes(layout, points, t, f, operand_bytes, multicast) / (
            BULK_BYTES_PER_CLOCK * CLOCK_GHZ * 1e9 * sms) * 1e6
        # Four warp instructions per clock and SM, 32 threads a warp.
        issue_us = chunks * points * t * CHUNK * per_v / (32 * 4 * CLOCK_GHZ * 1e9 * sms) * 1e6
        # The carriers' scales: a pass over the input for its largest value per pixel, first.
        prepass_us = in_bytes / (COPY_TBS * 1e12) * 1e6 if products in PREPASS_PRODUCTS else 0.0
        if layout == "staged":
            # A transform kernel (each V value once: the input read, V written), then the GEMM
            # with the output transform (V read once, the output written).
            v_bytes = tiles * float(tile_points) * C * operand_bytes
            issue_us = max(tiles * float(tile_points) * C * per_v / (32 * 4 * CLOCK_GHZ * 1e9 * sms) * 1e6,
                           (in_bytes + v_bytes) / (COPY_TBS * 1e12) * 1e6)
            gemm_us = max(mma_us, path_us, intake_us, (v_bytes + out_bytes) / (COPY_TBS * 1e12) * 1e6)
            kernels_us = prepass_us + issue_us + gemm_us
        else:
            kernels_us = prepass_us + max(mma_us, path_us, intake_us, issue_us, io_us)
        designs[name] = {"mma_us": mma_us, "data_path_us": path_us, "intake_us": intake_us,
                         "issue_us": issue_us, "prepass_us": prepass_us, "bound_us": max(kernels_us, host_us)}
    return designs


def table(precision, rates, suite, sms, out, lines):
    measured = {}
    for r in suite["rows"]:
        if (r["N"] == 32 and r["mode"] == "fwd" and r["precision"] == precision and r["layout"] == "nhwc"
                and r["R"] == 3 and r["stride"] == 1 and r["algorithm"] == "winograd"):
            measured[r["layer"]] = r  # cuDNN timed beside the auto Winograd, in the same process
    rows = []
    for layer in LAYERS:
        m = measured[layer]
        C, K, H, W = m["C"], m["K"], m["H"], m["W"]
        row = {"layer": layer, "C": C, "K": K, "HW": H, "cudnn_us": m["cudnn_ms"] * 1e3, "ours_us": m["ms"] * 1e3,
               "plan": m.get("plan", ""),
               "io_us": 32 * (C + K) * H * W * IN_BYTES / (COPY_TBS * 1e12) * 1e6,
               "host_us": HOST_US.get(layer, 0.0),
               "designs": pass_bounds(C, K, H, W, rates, sms, HOST_US.get(layer, 0.0))}
        row["designs_unicast"] = pass_bounds(C, K, H, W, rates, sms, HOST_US.get(layer, 0.0), multicast=False)
        for x in list(row["designs"].values()) + list(row["designs_unicast"].values()):
            x["ratio_bound"] = row["cudnn_us"] / x["bound_us"]
        rows.append(row)
    within = [d for d, spec in DESIGNS.items() if precision in PRODUCTS[spec[4]][2] and spec[4] != "tf32"]
    geo = {d: geomean([r["designs"][d]["ratio_bound"] for r in rows]) for d in DESIGNS}
    geo_ours = geomean([r["cudnn_us"] / r["ours_us"] for r in rows])
    # What `auto` could do: the best new design within the error bar on each layer.
    best = {r["layer"]: max(within, key=lambda d: r["designs"][d]["ratio_bound"]) for r in rows}
    geo_best = geomean([r["designs"][best[r["layer"]]]["ratio_bound"] for r in rows])
    # The same among the F(2x2) designs alone.
    within_f2x2 = [d for d in within if DESIGNS[d][6] == 2]
    geo_best_f2x2 = geomean([max(r["designs"][d]["ratio_bound"] for d in within_f2x2) for r in rows])
    geo_best_f2x2_unicast = geomean([max(r["designs_unicast"][d]["ratio_bound"] for d in within_f2x2) for r in rows])
    # The same without multicast (intake_bytes): each block takes in all of its operands.
    geo_unicast = {d: geomean([r["designs_unicast"][d]["ratio_bound"] for r in rows]) for d in DESIGNS}
    best_unicast = {r["layer"]: max(within, key=lambda d: r["designs_unicast"][d]["ratio_bound"]) for r in rows}
    geo_best_unicast = geomean([r["designs_unicast"][best_unicast[r["layer"]]]["ratio_bound"] for r in rows])
    out["precisions"][precision] = {"rows": rows, "within_error_bar": within, "geomean_ratio_bound": geo,
                                    "geomean_ratio_ours": geo_ours, "best_within_error_bar": best,
                                    "geomean_ratio_best": geo_best, "geomean_ratio_bound_unicast": geo_unicast,
                                    "best_within_error_bar_unicast": best_unicast,
                                    "geomean_ratio_best_unicast": geo_best_unicast,
                                    "geomean_ratio_best_f2x2": geo_best_f2x2,
                                    "geomean_ratio_best_f2x2_unicast": geo_best_f2x2_unicast}
    lines += [f"## {precision}\n",
              "Bound µs (cuDNN / bound). Within the error bar at this precision: " + ", ".join(
                  f"`{d}`" for d in within) + ".\n",
              "| design | " + " | ".join(LAYERS) + " | geomean |", "|---|" + "---|" * (len(LAYERS) + 1),
              "| cuDNN µs | " + " | ".join(f"{r['cudnn_us']:.0f}" for r in rows) + " | |",
              "| ours µs | " + " | ".join(f"{r['ours_us']:.0f} ({r['cudnn_us'] / r['ours_us']:.2f}x)" for r in rows)
              + f" | {geo_ours:.2f}x |"]
    for d in DESIGNS:
        cells = []
        for r in rows:
            x = r["designs"][d]
            parts = {"MMA": x["mma_us"], "path": x["data_path_us"], "L2": x["intake_us"], "issue": x["issue_us"]}
            gpu = x["bound_us"] - x["prepass_us"] if DESIGNS[d][0] != "staged" else None
            what = ("host" if x["bound_us"] == r["host_us"] else
                    "staged" if gpu is None else max(parts, key=parts.get) if max(parts.values()) >= r["io_us"] else
                    "I/O")
            cells.append(f"{x['bound_us']:.0f} {what} ({x['ratio_bound']:.2f}x)")
        lines.append(f"| `{d}` | " + " | ".join(cells) + f" | {geo[d]:.2f}x |")
    lines.append("")
    lines.append(f"The best design within the error bar on each layer ({', '.join(f'{k} `{v}`' for k, v in best.items())}): "
                 f"geomean **{geo_best:.2f}x** cuDNN at 100% of every bound"
                 + (f" (the F(2x2) designs alone: {geo_best_f2x2:.2f}x)." if within_f2x2 != within else "."))
    lines.append("")
    lines.append("Without multicast (each block takes in all of its U and V by unicast copies, as today's walking "
                 "clusters do), the designs whose bound moves:\n")
    lines.append("| design | " + " | ".join(LAYERS) + " | geomean |")
    lines.append("|---|" + "---|" * (len(LAYERS) + 1))
    for d in DESIGNS:
        if all(abs(r["designs_unicast"][d]["bound_us"] - r["designs"][d]["bound_us"]) < 0.5 for r in rows):
            continue
        lines.append(f"| `{d}` | " + " | ".join(
            f"{r['designs_unicast'][d]['bound_us']:.0f} ({r['designs_unicast'][d]['ratio_bound']:.2f}x)" for r in rows)
            + f" | {geo_unicast[d]:.2f}x |")
    lines.append("")
    lines.append(f"The best within the error bar on each layer without multicast "
                 f"({', '.join(f'{k} `{v}`' for k, v in best_unicast.items())}): geomean **{geo_best_unicast:.2f}x**"
                 + (f" (the F(2x2) designs alone: {geo_best_f2x2_unicast:.2f}x)." if within_f2x2 != within else "."))
    lines.append("")


if __name__ == "__main__":
    main()
