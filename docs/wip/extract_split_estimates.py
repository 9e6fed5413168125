"""Cuts the split estimates (cluster_split_estimate with its constants and helpers, and
weight_grad_split_estimate) out of a gemm_tc.cu for split_terms_harness.cpp:

    git show main:csrc/cuda/gemm/gemm_tc.cu > /tmp/main_gemm_tc.cu
    python3 docs/wip/extract_split_estimates.py /tmp/main_gemm_tc.cu /tmp/old.inc
    python3 docs/wip/extract_split_estimates.py csrc/cuda/gemm/gemm_tc.cu /tmp/new.inc
    g++ -std=c++20 -O2 -I/tmp -o /tmp/split_terms_harness docs/wip/split_terms_harness.cpp && /tmp/split_terms_harness
"""
import sys
src, out = sys.argv[1], sys.argv[2]
s = open(src).read()
a = s.index("constexpr int kBlockFixedChunks = 20;")
e = s.index("best.time *=", a); e = s.index("return best;\n}\n", e) + len("return best;\n}\n")
b = s.index("constexpr int kWeightGradBlockFixedChunks = 8;")
f = s.index("template <typename Cfg>\nint64_t weight_grad_split_estimate", b)
f = s.index("\n}\n", f) + 3
open(out, "w").write(s[a:e] + "\n" + s[b:f])
