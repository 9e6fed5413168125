"""What the kernel probes (dw_rows_probe.py, dw_gw_probe.py) share: an extension built from a
source template over the library's headers, one source per dtype, and interleaved timing."""
import argparse
import os
import statistics
import tempfile

import torch
from torch.utils import cpp_extension

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TYPES = {"bf16": ("__nv_bfloat16", torch.bfloat16), "fp16": ("__half", torch.float16), "fp32": ("float", torch.float32)}

BINDING = r"""
#include <torch/extension.h>
%(decls)s
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
%(defs)s
}
"""


def probe_parser(batch, reps, rounds):
    """The options every probe takes: batch sizes, dtypes, and the timing's calls a round and rounds.
    Also sets cuDNN as the probes' reference runs it (benchmark mode, TF32 off)."""
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default=batch)
    ap.add_argument("--dtypes", default="bf16,fp16,fp32")
    ap.add_argument("--reps", type=int, default=reps)
    ap.add_argument("--rounds", type=int, default=rounds)
    return ap


def build(name, source, functions, dtypes):
    """One extension `name`; `source` % {T, name} per dtype (compiled in parallel) defines, for each
    prefix -> C++ parameter list in `functions`, a function <prefix>_<dtype>. Returns dtype ->
    {prefix: function}."""
    d = tempfile.mkdtemp(prefix=name + "_")
    sources = []
    for dtype in dtypes:
        sources.append(os.path.join(d, f"probe_{dtype}.cu"))
        with open(sources[-1], "w") as f:
            f.write(source % {"T": TYPES[dtype][0], "name": dtype})
    sources.append(os.path.join(d, "binding.cpp"))
    decls = [(f"{p}_{n}", sig) for n in dtypes for p, sig in functions.items()]
    with open(sources[-1], "w") as f:
        f.write(BINDING % {"decls": "\n".join(f"{ret} {fn}{sig};" for fn, (ret, sig) in decls),
                           "defs": "\n".join(f'  m.def("{fn}", &{fn});' for fn, _ in decls)})
    mod = cpp_extension.load(
        name=name, sources=sources, build_directory=d, verbose=False,
        extra_include_paths=[os.path.join(ROOT, "csrc")],
        extra_cuda_cflags=["-O3", "-lineinfo", "--expt-relaxed-constexpr", "-DTORCHCONV_WITH_CUDA", "-std=c++20"])
    return {n: {p: getattr(mod, f"{p}_{n}") for p in functions} for n in dtypes}


def time_calls(fns, reps, rounds, warmup=3):
    """fns: name -> callable. Interleaved rounds; median µs a call per name."""
    times = {k: [] for k in fns}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for f in fns.values():
        for _ in range(warmup):
            f()
    torch.cuda.synchronize()
    for _ in range(rounds):
        for k, f in fns.items():
            start.record()
            for _ in range(reps):
                f()
            end.record()
            end.synchronize()
            times[k].append(start.elapsed_time(end) * 1000 / reps)
    return {k: statistics.median(v) for k, v in times.items()}
