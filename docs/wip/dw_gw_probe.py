"""Device probe: the NHWC depthwise grad_weight's sliding window with runs of kRun output pixels whose
loads issue together (depthwise_nhwc_grad_weight_kernel's kRun; dw_nhwc_grad_weight_run is the
library's rule) on the depthwise suite's layers of 3-, 5- and 7-tap rows (and ResNeXt's 3x3 groups of
4), channels_last, trainable weights' grad_weight. The slices of output rows follow the library's rule
(about 1024 threads an SM; the workspace limit is not applied). Builds a small extension from the
library's kernel header only (about a minute), so a device call needs no library build. Times the
grad_weight kernel alone at runs r1 .. r8 (the slices' sum is the same for every run length), cuDNN's
whole grad_weight for reference, and, at the library's run length, the kernel and the slices' sum
together with each slice taking 1, 2, 4, 8 times the rule's output rows (x1 .. x8: fewer slices,
fewer threads, less workspace to write and add); checks that every column's partial sums equal
kRun = 1's bit for bit. Copies of the kernel (--copies), a column each:
- `rf`: the threads take the filter row fastest (the library's take the channel vector fastest): the
  R threads of one channel vector and slice then sit in one warp, so each gradient vector they all
  read is fetched once per warp rather than once per filter row;
- `lb<N>`: at least N blocks an SM in the launch bounds (a register cap, and ptxas schedules for it);
- `old`: the kernel and run rule of another header (--old-header: e.g. the header before a change,
  `git show HEAD~1:csrc/cuda/direct/depthwise_nhwc_kernels.cuh > old.cuh`).
Prints a table and writes $OUT/dw_gw_probe.json.

  python docs/wip/dw_gw_probe.py [--batch 32] [--dtypes bf16,fp16,fp32] [--slice-scales ""]
      [--copies rf,lb5,old --old-header old.cuh]
"""
import json
import os
import re
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suites import DEPTHWISE  # noqa: E402
from kernel_probe import TYPES, build, probe_parser, time_calls  # noqa: E402

RUNS = (1, 2, 4, 8)
VEC8_RUNS = (1, 2, 4)
KERNELS = os.path.join(ROOT, "csrc", "cuda", "direct", "depthwise_nhwc_kernels.cuh")
ORDER = """  const int vec = int(t % g.vecs);
  const int64_t rest = t / g.vecs;
  const int r = int(rest % g.R), slice = int(rest / g.R);
"""
ROWS_FASTEST = """  const int r = int(t % g.R);
  const int64_t rest = t / g.R;
  const int vec = int(rest % g.vecs), slice = int(rest / g.vecs);
"""


def kernel_copy(name, header=KERNELS, rows_fastest=False, min_blocks=None):
    """The grad_weight kernel, copied from `header` as `name` (escaped for the source template): with
    the filter row fastest in the thread index, or with a minimum of blocks an SM in its launch bounds
    (a register cap), if asked."""
    text = open(header).read()
    start = text.index("template <typename T, int kG, int kS, int kSw = 1, int kRun = 1")  # a kVec may follow
    depth, i = 0, text.index("{", text.index("depthwise_nhwc_grad_weight_kernel(", start))
    while True:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            break
    fn = text[start:i].replace("depthwise_nhwc_grad_weight_kernel(", name + "(")
    fn = fn.replace("template <typename T, int kG, int kS, int kSw = 1, int kRun = 1",
                    "template <typename T, int kG, int kS, int kSw, int kRun")
    if rows_fastest:
        assert ORDER in fn, "the kernel's thread order changed: update the probe"
        fn = fn.replace(ORDER, ROWS_FASTEST)
    if min_blocks:
        bounds = r"__launch_bounds__\(kDwNhwcThreads(, dw_nhwc_grad_weight_min_blocks\(kS, kSw, kG(, kVec)?\))?\)"
        fn, n = re.subn(bounds, f"__launch_bounds__(kDwNhwcThreads, {min_blocks})", fn)
        assert n == 1, "the kernel's launch bounds changed: update the probe"
    return fn.replace("%", "%%")


def run_rule_copy(name, header):
    """`header`'s run-length rule (dw_nhwc_grad_weight_run), copied as `name` (escaped)."""
    text = open(header).read()
    start = text.index("constexpr int dw_nhwc_grad_weight_run(")
    end = text.index("\n}\n", start) + 3
    return text[start:end].replace("dw_nhwc_grad_weight_run(", name + "(").replace("%", "%%")


# (channels per group, S, stride) the probe instances.
CONFIGS = ((1, 3, 1), (1, 3, 2), (1, 5, 1), (1, 5, 2), (1, 7, 1), (4, 3, 1))

SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include "cuda/common/slice_sum.cuh"
#include "cuda/direct/depthwise_nhwc_kernels.cuh"
namespace torchconv {
namespace cuda {
@COPIES@
}  // namespace cuda
}  // namespace torchconv
using namespace torchconv;
using namespace torchconv::cuda;
using T = %(T)s;

// copy 0: the library's kernel; copy i > 0: the probe's copy i, at its own run length only (copy<i>_run:
// the library's rule, or the rule of the header it was copied from).
template <int kG, int kS, int kSw, int kRun>
void (*kernel_for(int copy))(DwNhwcWeightGradArgs<T>) {
  constexpr bool kFloat32 = std::is_same_v<T, float>;
  (void)kFloat32;
  switch (copy) {
@CASES@
  }
  TORCH_CHECK(copy == 0, "copy ", copy, " runs at its own run length only");
  return depthwise_nhwc_grad_weight_kernel<T, kG, kS, kSw, kRun>;
}

template <int kG, int kS, int kSw, int kRun, int kVec>
bool instance(int G, int S, int sw, int run, int copy, const DwNhwcWeightGradArgs<T>& a) {
  if (G != kG || S != kS || sw != kSw || run != kRun) return false;
  TORCH_CHECK(kVec == kDwNhwcVec || copy == 0, "copies run 4-channel vectors");
  const auto kernel = kVec == kDwNhwcVec ? kernel_for<kG, kS, kSw, kRun>(copy)
                                         : depthwise_nhwc_grad_weight_kernel<T, kG, kS, kSw, kRun, kVec>;
  kernel<<<unsigned((a.g.threads + kDwNhwcThreads - 1) / kDwNhwcThreads), kDwNhwcThreads, 0,
           c10::cuda::getCurrentCUDAStream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

template <int kG, int kS, int kSw>
bool runs(int G, int S, int sw, int run, int copy, int vec, const DwNhwcWeightGradArgs<T>& a) {
  if (vec == 8) {  // 8 16-bit channels a thread (one 16-byte word), runs of at most 4
    if constexpr (!std::is_same_v<T, float>)
      return instance<kG, kS, kSw, 1, 8>(G, S, sw, run, copy, a) ||
             instance<kG, kS, kSw, 2, 8>(G, S, sw, run, copy, a) || instance<kG, kS, kSw, 4, 8>(G, S, sw, run, copy, a);
    return false;
  }
  return instance<kG, kS, kSw, 1, 4>(G, S, sw, run, copy, a) || instance<kG, kS, kSw, 2, 4>(G, S, sw, run, copy, a) ||
         instance<kG, kS, kSw, 4, 4>(G, S, sw, run, copy, a) || instance<kG, kS, kSw, 8, 4>(G, S, sw, run, copy, a);
}

// x, gy: channels_last; partial: slices x (R x S x G x C) float32. Returns the slices.
void run_%(name)s(int64_t run, int64_t copy, const at::Tensor& x, const at::Tensor& gy, at::Tensor& partial, int64_t R, int64_t S,
                  int64_t stride, int64_t ph, int64_t pw, int64_t G, int64_t rows_per_slice, int64_t vec) {
  DwNhwcWeightGrad g{};
  g.N = int(x.size(0)), g.C = int(x.size(1)), g.H = int(x.size(2)), g.W = int(x.size(3));
  g.Ho = int(gy.size(2)), g.Wo = int(gy.size(3)), g.R = int(R), g.S = int(S), g.sh = int(stride), g.sw = int(stride);
  g.ph = int(ph), g.pw = int(pw), g.dh = 1, g.dw = 1;
  g.vecs = g.C / int(vec);
  g.rows_per_slice = int(rows_per_slice);
  g.slices = int((int64_t(g.N) * g.Ho + rows_per_slice - 1) / rows_per_slice);
  g.threads = int64_t(g.vecs) * g.R * g.slices;
  TORCH_CHECK(partial.size(0) == g.slices, "partial slices");
  DwNhwcWeightGradArgs<T> a{reinterpret_cast<const T*>(x.const_data_ptr()), reinterpret_cast<const T*>(gy.const_data_ptr()),
                            partial.mutable_data_ptr<float>(), g};
  const int G_ = int(G), S_ = int(S), sw = int(stride), rn = int(run), cp = int(copy), v = int(vec);
  const bool done = runs<1, 3, 1>(G_, S_, sw, rn, cp, v, a) || runs<1, 3, 2>(G_, S_, sw, rn, cp, v, a) ||
                    runs<1, 5, 1>(G_, S_, sw, rn, cp, v, a) || runs<1, 5, 2>(G_, S_, sw, rn, cp, v, a) ||
                    runs<1, 7, 1>(G_, S_, sw, rn, cp, v, a) || runs<4, 3, 1>(G_, S_, sw, rn, cp, v, a);
  TORCH_CHECK(done, "no instance for S ", S, " stride ", stride, " run ", run, " group ", G);
}

// The run length of the library (copy 0) or of copy i for this row.
int64_t library_run_%(name)s(int64_t copy, int64_t S, int64_t stride, int64_t G) {
  const bool f32 = std::is_same_v<T, float>;
  switch (copy) {
@RUNS@
  }
  return dw_nhwc_grad_weight_run(int(S), int(stride), int(G), f32);
}

// The slices' sum into gw (C x G x taps, float32) as the library adds them.
void sum_%(name)s(const at::Tensor& partial, at::Tensor& gw, int64_t taps, int64_t G) {
  const int64_t C = gw.size(0), slice = partial.size(1);
  launch_sum_slices(partial.const_data_ptr<float>(), gw.mutable_data_ptr<float>(), gw.numel(), int(partial.size(0)), slice,
                    DwNhwcSliceMap{int(taps), int(G), int(C)}, 64, 256);
}
"""

FUNCTIONS = {
    "run": ("void", "(int64_t, int64_t, const at::Tensor&, const at::Tensor&, at::Tensor&, int64_t, int64_t, int64_t, int64_t, "
                    "int64_t, int64_t, int64_t, int64_t)"),
    "library_run": ("int64_t", "(int64_t, int64_t, int64_t, int64_t)"),
    "sum": ("void", "(const at::Tensor&, at::Tensor&, int64_t, int64_t)"),
}


def main():
    ap = probe_parser(batch="32", reps=20, rounds=5)
    ap.add_argument("--slice-scales", default="1,2,4,8",
                    help="output rows a slice takes, as multiples of the library's rule: the library's run length, "
                         "kernel and slices' sum timed together at each")
    ap.add_argument("--copies", default="rf",
                    help="copies of the kernel timed at the library's run length, a column each: rf (the filter "
                         "row fastest), lb<N> (at least N blocks an SM in the launch bounds), old (the kernel of "
                         "--old-header, e.g. the header before a change, kept beside the tree)")
    ap.add_argument("--old-header", default=None)
    ap.add_argument("--vec8", action="store_true",
                    help="also time 8 16-bit channels a thread (one 16-byte word): the kernel alone at runs "
                         f"{VEC8_RUNS} (v8r<run>), and kernel and slices' sum (p8s: the 4-channel rule's slices; p8r: "
                         "the rule's slices for C / 8 vectors) beside the 4-channel pass at the library's run (p4)")
    args = ap.parse_args()
    dtypes = args.dtypes.split(",")
    copies = [c for c in args.copies.split(",") if c]
    texts, cases, runs = [], [], []
    for i, c in enumerate(copies, 1):
        name = f"grad_weight_copy{i}_kernel"
        rule = "dw_nhwc_grad_weight_run"
        if c == "rf":
            texts.append(kernel_copy(name, rows_fastest=True))
        elif c.startswith("lb"):
            texts.append(kernel_copy(name, min_blocks=int(c[2:])))
        elif c == "old":
            texts.append(kernel_copy(name, header=args.old_header))
            texts.append(run_rule_copy(f"copy{i}_run", args.old_header))
            rule = f"copy{i}_run"
        else:
            raise SystemExit(f"unknown copy {c}")
        cases.append(f"    case {i}:\n      if constexpr (kRun == {rule}(kS, kSw, kG, kFloat32))\n"
                     f"        return grad_weight_copy{i}_kernel<T, kG, kS, kSw, kRun>;\n      break;")
        runs.append(f"    case {i}: return {rule}(int(S), int(stride), int(G), f32);")
    source = (SOURCE.replace("@COPIES@", "\n".join(texts)).replace("@CASES@", "\n".join(cases))
              .replace("@RUNS@", "\n".join(runs)))
    mods = build("dw_gw_probe", source, FUNCTIONS, dtypes)
    scales = [int(v) for v in args.slice_scales.split(",") if v]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = os.environ.get("OUT", ".")
    rows = []
    for name in dtypes:
        dt = TYPES[name][1]
        run, library_run, sum_slices = (mods[name][k] for k in ("run", "library_run", "sum"))
        for layer in DEPTHWISE:
            G = layer.C // layer.groups
            if (G, layer.kw, layer.stride) not in CONFIGS or layer.dilation != 1:
                continue
            R, S, stride = layer.R, layer.kw, layer.stride
            ph, pw = layer.pads
            for N in [int(b) for b in args.batch.split(",")]:
                C, H = layer.C, layer.HW
                g = torch.Generator(device="cuda").manual_seed(0)
                x = torch.randn(N, C, H, H, device="cuda", generator=g).to(dt).contiguous(memory_format=torch.channels_last)
                w = torch.randn(C, G, R, S, device="cuda", generator=g).to(dt)
                Ho = (H + 2 * ph - R) // stride + 1
                Wo = (H + 2 * pw - S) // stride + 1
                gy = torch.randn(N, C, Ho, Wo, device="cuda", generator=g).to(dt).contiguous(
                    memory_format=torch.channels_last)
                rows_total = N * Ho
                per_slice = max(1, -(-rows_total * (C // 4) * R // (sms * 1024)))
                per_slice = min(per_slice, rows_total)
                slices = -(-rows_total // per_slice)
                parts = {}
                fns = {"cudnn": lambda: torch.ops.aten.convolution_backward(
                    gy, x, w, None, [stride, stride], [ph, pw], [1, 1], False, [0, 0], layer.groups,
                    [False, True, False])}
                for rl in RUNS:
                    p = torch.full((slices, R * S * G * C), float("nan"), device="cuda")
                    run(rl, 0, x, gy, p, R, S, stride, ph, pw, G, per_slice, 4)
                    parts[rl] = p
                    fns[f"r{rl}"] = (lambda p=p, rl=rl: run(rl, 0, x, gy, p, R, S, stride, ph, pw, G, per_slice, 4))
                lib = library_run(0, S, stride, G)
                for i, c in enumerate(copies, 1):
                    p = torch.full((slices, R * S * G * C), float("nan"), device="cuda")
                    cr = library_run(i, S, stride, G)
                    run(cr, i, x, gy, p, R, S, stride, ph, pw, G, per_slice, 4)
                    parts[c] = p
                    fns[c] = (lambda p=p, i=i, cr=cr: run(cr, i, x, gy, p, R, S, stride, ph, pw, G, per_slice, 4))
                # 8 channels a thread: the kernel alone at the same slices (its sums bit for bit the 4-channel
                # kernel's), and kernel and sum at the same slices (p8s) and at the rule's slices for C / 8
                # vectors (p8r: twice the slices, so as many threads; checked against float64 below).
                vec8_errs = {}
                if args.vec8 and dt != torch.float32 and C % 8 == 0:
                    for rl in VEC8_RUNS:
                        p = torch.full((slices, R * S * G * C), float("nan"), device="cuda")
                        run(rl, 0, x, gy, p, R, S, stride, ph, pw, G, per_slice, 8)
                        parts[f"v8r{rl}"] = p
                        fns[f"v8r{rl}"] = (lambda p=p, rl=rl: run(rl, 0, x, gy, p, R, S, stride, ph, pw, G,
                                                                  per_slice, 8))
                    per_slice8 = min(max(1, -(-rows_total * (C // 8) * R // (sms * 1024))), rows_total)
                    for tag, ps, vec, rls in (("p4", per_slice, 4, (lib,)), ("p8s", per_slice, 8, VEC8_RUNS),
                                              ("p8r", per_slice8, 8, VEC8_RUNS)):
                        for rl in rls:
                            p = torch.empty((-(-rows_total // ps), R * S * G * C), device="cuda")
                            out_gw = torch.full((C, G, R, S), float("nan"), device="cuda")

                            def whole(p=p, ps=ps, out=out_gw, vec=vec, rl=rl):
                                run(rl, 0, x, gy, p, R, S, stride, ph, pw, G, ps, vec)
                                sum_slices(p, out, R * S, G)
                            whole()
                            fns[f"{tag}r{rl}"] = whole
                            vec8_errs[f"{tag}r{rl}"] = out_gw
                # The whole pass: kernel and slices' sum, rows per slice scaled.
                gws = {}
                for sc in scales:
                    ps = min(per_slice * sc, rows_total)
                    p = torch.empty((-(-rows_total // ps), R * S * G * C), device="cuda")
                    gws[sc] = torch.full((C, G, R, S), float("nan"), device="cuda")

                    def whole(p=p, ps=ps, out=gws[sc]):
                        run(lib, 0, x, gy, p, R, S, stride, ph, pw, G, ps, 4)
                        sum_slices(p, out, R * S, G)
                    whole()
                    fns[f"x{sc}"] = whole
                torch.cuda.synchronize()
                same = all(torch.equal(parts[1], v) for v in parts.values())
                # The slices' sum against a float64 reference (the probe's check of the kernel itself).
                gw = parts[1].sum(0).view(R, S, G, C).permute(3, 2, 0, 1).double()
                ref = torch.ops.aten.convolution_backward(
                    gy.double(), x.double(), w.double(), None, [stride, stride], [ph, pw], [1, 1], False, [0, 0],
                    layer.groups, [False, True, False])[1]
                err = float((gw - ref).norm() / ref.norm())
                scale_errs = {sc: float((v.double() - ref).norm() / ref.norm()) for sc, v in gws.items()}
                scale_errs.update({k: float((v.double() - ref).norm() / ref.norm()) for k, v in vec8_errs.items()})
                t = time_calls(fns, args.reps, args.rounds)
                rows.append(dict(layer=layer.name, dtype=name, N=N, slices=slices, library_run=lib, times_us=t,
                                 rel_err=err, bits_equal=same, rel_err_by_scale=scale_errs))
                best = min((f"r{rl}" for rl in RUNS), key=t.get)
                best_scale = min((k for k in t if k.startswith("x")), key=t.get, default="-")
                print(f"{layer.name:14s} {name} N{N:<3d} slices {slices:4d} cudnn {t['cudnn']:7.1f} "
                      + " ".join(f"{k}={t[k]:.1f}" for k in t if k != "cudnn")
                      + f"  best {best}, {best_scale} (run {lib}"
                      + "".join(f", {c}/r{lib} {t[c] / t[f'r{lib}']:.2f}" for c in copies) + ")"
                      + f"  err {err:.1e} (scales {max(scale_errs.values(), default=0):.1e}) eq {same}", flush=True)
    with open(os.path.join(out, "dw_gw_probe.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
