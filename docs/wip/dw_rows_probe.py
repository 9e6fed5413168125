"""Device probe: the NHWC depthwise kernel that loads every filter row's inputs before its products
(depthwise_nhwc_rows_kernel) against today's per-row unrolled instance and cuDNN, on the depthwise
suite's 3x3 / 5x5 / 7x7 layers and its 3x3 groups of 4 (ResNeXt), channels_last, forward. Builds a small extension from the library's
kernel header only (about a minute), so a device call needs no library build. Prints a table and
writes $OUT/dw_rows_probe.json.

  python docs/wip/dw_rows_probe.py [--batch 32,1] [--dtypes bf16,fp16,fp32]
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suites import DEPTHWISE  # noqa: E402
from kernel_probe import TYPES, build, probe_parser, time_calls  # noqa: E402

# (R, S, stride, channels per group) -> strips of the rows kernel to try.
ROWS_STRIPS = {(3, 3, 1, 1): (4, 6, 8), (3, 3, 2, 1): (2, 4, 6), (5, 5, 1, 1): (2, 4), (5, 5, 2, 1): (2, 4),
               (7, 7, 1, 1): (2, 3), (3, 3, 1, 4): (2, 4, 8)}

SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include "cuda/direct/depthwise_nhwc_kernels.cuh"
using namespace torchconv;
using namespace torchconv::cuda;
using T = %(T)s;

template <typename K>
void launch(K kernel, int strip, const at::Tensor& x, const at::Tensor& wt, at::Tensor& y, int R, int S, int stride, int pad) {
  ConvShape p{x.size(0), x.size(1), x.size(2), x.size(3), x.size(1), R, S, y.size(2), y.size(3), stride, stride, pad, pad, 1, 1, x.size(1) / wt.size(2)};
  DwNhwcArgs<T> a{};
  static_cast<LaunchMap&>(a.cv) = forward_map(p);
  a.cv.vecs = int(p.C) / kDwNhwcVec;
  a.cv.strips = int((p.Wo + strip - 1) / strip);
  a.cv.threads = p.N * p.Ho * a.cv.strips * a.cv.vecs;
  a.src = reinterpret_cast<const T*>(x.const_data_ptr());
  a.wt = wt.const_data_ptr<float>();
  a.dst = reinterpret_cast<T*>(y.mutable_data_ptr());
  kernel<<<unsigned((a.cv.threads + kDwNhwcThreads - 1) / kDwNhwcThreads), kDwNhwcThreads, 0,
           c10::cuda::getCurrentCUDAStream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <int kG, int kR, int kS, int kSx>
bool old_instance(int G, int R, int S, int stride, const at::Tensor& x, const at::Tensor& wt, at::Tensor& y, int pad) {
  if (G != kG || R != kR || S != kS || stride != kSx) return false;
  constexpr int strip = dw_nhwc_unrolled_strip(kS, kSx, kG);
  launch(depthwise_nhwc_kernel<T, kG, strip, kS, kSx>, strip, x, wt, y, R, S, stride, pad);
  return true;
}
template <int kG, int kR, int kS, int kSx, int kStrip>
bool rows_instance(int G, int R, int S, int stride, int strip, const at::Tensor& x, const at::Tensor& wt, at::Tensor& y, int pad) {
  if (G != kG || R != kR || S != kS || stride != kSx || strip != kStrip) return false;
  launch(depthwise_nhwc_rows_kernel<T, kG, kStrip, kR, kS, kSx>, kStrip, x, wt, y, R, S, stride, pad);
  return true;
}

// strip 0: today's instance; otherwise the rows kernel with that strip. g: channels per group.
void run_%(name)s(int64_t strip, const at::Tensor& x, const at::Tensor& wt, at::Tensor& y, int64_t R, int64_t S, int64_t stride, int64_t pad) {
  const int g = int(wt.size(2)), r = int(R), s = int(S), st = int(stride), sp = int(strip), pd = int(pad);
  bool done = false;
  if (sp == 0) {
    done = old_instance<1, 3, 3, 1>(g, r, s, st, x, wt, y, pd) || old_instance<1, 3, 3, 2>(g, r, s, st, x, wt, y, pd) ||
           old_instance<1, 5, 5, 1>(g, r, s, st, x, wt, y, pd) || old_instance<1, 5, 5, 2>(g, r, s, st, x, wt, y, pd) ||
           old_instance<1, 7, 7, 1>(g, r, s, st, x, wt, y, pd) || old_instance<4, 3, 3, 1>(g, r, s, st, x, wt, y, pd);
  } else {
    done = rows_instance<1, 3, 3, 1, 4>(g, r, s, st, sp, x, wt, y, pd) || rows_instance<1, 3, 3, 1, 6>(g, r, s, st, sp, x, wt, y, pd) ||
           rows_instance<1, 3, 3, 1, 8>(g, r, s, st, sp, x, wt, y, pd) || rows_instance<1, 3, 3, 2, 2>(g, r, s, st, sp, x, wt, y, pd) ||
           rows_instance<1, 3, 3, 2, 4>(g, r, s, st, sp, x, wt, y, pd) || rows_instance<1, 3, 3, 2, 6>(g, r, s, st, sp, x, wt, y, pd) ||
           rows_instance<1, 5, 5, 1, 2>(g, r, s, st, sp, x, wt, y, pd) || rows_instance<1, 5, 5, 1, 4>(g, r, s, st, sp, x, wt, y, pd) ||
           rows_instance<1, 5, 5, 2, 2>(g, r, s, st, sp, x, wt, y, pd) || rows_instance<1, 5, 5, 2, 4>(g, r, s, st, sp, x, wt, y, pd) ||
           rows_instance<1, 7, 7, 1, 2>(g, r, s, st, sp, x, wt, y, pd) || rows_instance<1, 7, 7, 1, 3>(g, r, s, st, sp, x, wt, y, pd) ||
           rows_instance<4, 3, 3, 1, 2>(g, r, s, st, sp, x, wt, y, pd) || rows_instance<4, 3, 3, 1, 4>(g, r, s, st, sp, x, wt, y, pd) ||
           rows_instance<4, 3, 3, 1, 8>(g, r, s, st, sp, x, wt, y, pd);
  }
  TORCH_CHECK(done, "no instance for ", R, "x", S, " stride ", stride, " strip ", strip, " group ", g);
}
"""

FUNCTIONS = {"run": ("void", "(int64_t, const at::Tensor&, const at::Tensor&, at::Tensor&, int64_t, int64_t, int64_t, "
                             "int64_t)")}


def main():
    ap = probe_parser(batch="32,1", reps=50, rounds=7)
    args = ap.parse_args()
    dtypes = args.dtypes.split(",")
    mods = build("dw_rows_probe", SOURCE, FUNCTIONS, dtypes)
    out = os.environ.get("OUT", ".")
    rows = []
    for name in dtypes:
        dt = TYPES[name][1]
        run = mods[name]["run"]
        for layer in DEPTHWISE:
            R, S = layer.R, layer.kw
            stride = layer.stride
            cg = layer.C // layer.groups
            key = (R, S, stride, cg)
            if key not in ROWS_STRIPS or layer.padding is not None:
                continue
            pad = R // 2
            for N in [int(b) for b in args.batch.split(",")]:
                C, H = layer.C, layer.HW
                g = torch.Generator(device="cuda").manual_seed(0)
                x = torch.randn(N, C, H, H, device="cuda", generator=g).to(dt).contiguous(memory_format=torch.channels_last)
                w = torch.randn(C, cg, R, S, device="cuda", generator=g).to(dt)
                wt = w.float().permute(2, 3, 1, 0).contiguous()
                ref = F.conv2d(x.double(), w.double(), stride=stride, padding=pad, groups=layer.groups)
                y0 = torch.empty_like(ref, dtype=dt).contiguous(memory_format=torch.channels_last)
                ys = {}
                fns = {"cudnn": lambda: F.conv2d(x, w, stride=stride, padding=pad, groups=layer.groups)}
                for strip in (0,) + ROWS_STRIPS[key]:
                    y = torch.full_like(y0, float("nan"))
                    run(strip, x, wt, y, R, S, stride, pad)
                    ys[strip] = y
                    fns[f"s{strip}"] = (lambda y=y, strip=strip: run(strip, x, wt, y, R, S, stride, pad))
                torch.cuda.synchronize()
                errs = {k: float((v.double() - ref).norm() / ref.norm()) for k, v in ys.items()}
                same = {k: bool(torch.equal(v, ys[0])) for k, v in ys.items()}
                t = time_calls(fns, args.reps, args.rounds, warmup=5)
                row = dict(layer=layer.name, dtype=name, N=N, times_us=t, rel_err=errs, bits_equal_old=same)
                rows.append(row)
                best = min((k for k in t if k.startswith("s") and k != "s0"), key=t.get)
                print(f"{layer.name:14s} {name} N{N:<3d} cudnn {t['cudnn']:7.1f} old {t['s0']:7.1f} best {best} "
                      f"{t[best]:7.1f}  " + " ".join(f"{k}={v:.1f}" for k, v in t.items() if k not in ('cudnn', 's0')) +
                      f"  err old {errs[0]:.1e} eq {all(same.values())}", flush=True)
    with open(os.path.join(out, "dw_rows_probe.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
