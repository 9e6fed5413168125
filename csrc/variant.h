// Process-wide choice between the variants of one algorithm (torchconv.set_variant). The first
// variant listed is the default.
#pragma once

#include <string>
#include <vector>

namespace torchconv {

// Winograd: "fused" runs the input transform, the 16 element-wise GEMMs and the output transform
// in one kernel (no V / M workspace); "staged" is seed 003's pipeline: an input-transform kernel
// writes V, a batched GEMM writes M, an output-transform kernel writes Y, in batch chunks that fit
// the workspace limit; "f4x4" runs F(4x4,3x3) (6x6 input tiles, 36 GEMMs) staged the same way for
// the forward and grad_input, grad_weight staying in F(2x2)'s domain; "auto" (default) picks one per
// call by the rule in cuda/winograd/winograd.cu (on the CPU fused and staged are one F(2x2), and auto
// takes F(4x4) or F(2x2) by the rule in cpu/winograd.cpp).
enum class WinogradVariant : int { kAuto = 0, kFused = 1, kStaged = 2, kF4x4 = 3 };

WinogradVariant winograd_variant();

// Unrolled GEMM: "implicit" (default) gathers the unrolled matrix inside the GEMM's tile loader;
// "explicit" writes it for a chunk of columns into a workspace bounded by the workspace limit first.
enum class GemmVariant : int { kImplicit = 0, kExplicit = 1 };

GemmVariant gemm_variant();

// Direct: how a strided grad_input runs. "phases" runs the forward kernel once per output phase,
// "gather" one thread per input pixel (better where the phase grids are short of the GPU); "auto"
// (default) picks per call by the rule in cuda/direct/direct.cu.
enum class DirectVariant : int { kAuto = 0, kPhases = 1, kGather = 2 };

DirectVariant direct_variant();

// The variants of `algorithm` ("direct", "gemm", "winograd"), default first; ValueError for an unknown algorithm.
const std::vector<std::string>& variants(const std::string& algorithm);
std::string get_variant(const std::string& algorithm);
void set_variant(const std::string& algorithm, const std::string& name);

}  // namespace torchconv
