// Hopper warpgroup MMA (wgmma) as PTX wrappers: the instructions exist only on sm_90a, so every
// body is guarded by __CUDA_ARCH_FEAT_SM90_ALL (setup.py builds the 9.0 target as 9.0a; other
// targets compile these to a trap and the host never launches them there, see
// kWgmmaCompiled in launch.cuh).
//
// Operands come from shared memory through matrix descriptors (TF32 A may also come from registers:
// WgmmaRegA). The convolution kernels' are K-major
// tiles whose rows are 128 bytes (64 float16 / bfloat16, or 32 float32 read as TF32) with the 128-byte
// swizzle: 16-byte word w of row r is stored at word w ^ (r % 8) of that row, tiles 1024-byte aligned,
// 8-row groups 1024 bytes apart. One k-step (32 bytes) later is the same descriptor with its start
// address 32 bytes on. grad_weight's are MN-major (WgmmaMnMajor): the same swizzled rows, each
// holding one k; so is grad_input's B where it is copied from a channels_last weight (WgmmaMnMajorB).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace torchconv {
namespace cuda {

// The matrix descriptor of a 128-byte-swizzled K-major tile at shared address `addr` (1024-aligned,
// or that plus a k-step offset): start address, leading-byte offset (unused by swizzled K-major
// layouts), stride-byte offset 1024 (8 rows of 128 bytes), layout 128-byte swizzle.
__device__ __forceinline__ uint64_t wgmma_descriptor(unsigned addr) {
  uint64_t desc = uint64_t((addr & 0x3FFFF) >> 4);
  desc |= uint64_t(1) << 16;
  desc |= uint64_t(1024 >> 4) << 32;
  desc |= uint64_t(1) << 62;
  return desc;
}

// The descriptor of a 128-byte-swizzled MN-major tile (16-bit types; the reduction runs along the
// rows): each 128-byte row holds 64 elements of M (or N) at one k, 16-byte word w of row r stored at
// word w ^ (r % 8); 8-row groups (k) 1024 bytes apart (stride-byte offset), 64-element blocks of M
// or N `block_bytes` apart (leading-byte offset). One k-step (16 rows) later is 2048 bytes on.
__device__ __forceinline__ uint64_t wgmma_descriptor_mn_major(unsigned addr, unsigned block_bytes) {
  uint64_t desc = uint64_t((addr & 0x3FFFF) >> 4);
  desc |= uint64_t((block_bytes >> 4) & 0x3FFF) << 16;
  desc |= uint64_t(1024 >> 4) << 32;
  desc |= uint64_t(1) << 62;
  return desc;
}

// The descriptor of a K-major tile without swizzle, in core matrices of 8 rows x 16 bytes (128
// contiguous bytes, a row's 16 bytes after the previous row's): `k_step_bytes` (leading-byte offset)
// from a core matrix to the next one along K, `row_step_bytes` (stride-byte offset) to the next 8
// rows. Such tiles may be any multiple of 4 TF32 words deep, and a warp storing 8 rows x 4 words
// of one core matrix covers the 32 banks once.
__device__ __forceinline__ uint64_t wgmma_descriptor_interleaved(unsigned addr, unsigned k_step_bytes,
                                                                 unsigned row_step_bytes) {
  uint64_t desc = uint64_t((addr & 0x3FFFF) >> 4);
  desc |= uint64_t((k_step_bytes >> 4) & 0x3FFF) << 16;
  desc |= uint64_t((row_step_bytes >> 4) & 0x3FFF) << 32;
  return desc;
}

// `desc` with its start address `units` 16-byte units further on. The 14-bit address field holds
// shared addresses >> 4, all below 2^14, so a sum that stays in shared memory never carries into the
// next field: one 32-bit add (callers pass units, not bytes, so that constant offsets fold into it).
__device__ __forceinline__ uint64_t wgmma_descriptor_advance(uint64_t desc, unsigned units) {
  return (desc & 0xFFFFFFFF00000000ull) | uint32_t(uint32_t(desc) + units);
}

// The 128-byte swizzle's slot of 16-byte word `word` in row `row` (and the word in slot `word`: an
// XOR undoes itself).
__device__ __forceinline__ int swizzled_word(int row, int word) { return word ^ (row & 7); }

// Byte offset of 16-byte word `word` of row `row` in a 128-byte-swizzled tile.
__device__ __forceinline__ int swizzle128(int row, int word) { return row * 128 + (swizzled_word(row, word) << 4); }

__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}
// Keeps A fragments an MMA read from registers in their registers up to this point: wgmma reads them
// while it runs, after the instruction has issued, so without this the compiler may give their
// registers to other values as soon as the MMAs are issued. Placed after the wgmma_wait that retires
// those MMAs.
__device__ __forceinline__ void hold_wgmma_operands(uint32_t (&f)[4]) {
  asm volatile("" : "+r"(f[0]), "+r"(f[1]), "+r"(f[2]), "+r"(f[3])::"memory");
}
// Makes this thread's completed generic-proxy writes to shared memory (cp.async) visible to the
// async proxy that wgmma reads through.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// A warpgroup's m64 x kN FP32 accumulators (the layout below) to a row-major float tile of `ld` floats
// a row, from its row 0 and column 0: a lane quad writes 32 contiguous bytes of each row.
template <int kN>
__device__ __forceinline__ void store_wgmma_accumulators(float* tile, int64_t ld, const float (&d)[kN / 2]) {
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
#pragma unroll
  for (int j = 0; j < kN / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<float2*>(tile + int64_t((warp % 4) * 16 + lane / 4 + 8 * h) * ld + j * 8 + (lane % 4) * 2) =
          make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
}

// d (m64 x kN per warpgroup, FP32) += A (m64 x k) * B (k x kN), or = when scale_d is 0; one k-step is
// 32 bytes of each operand row: k16 for float16 / bfloat16, k8 for float32 read as TF32 (the MMA does not
// round a float32 word itself, so TF32 callers round their tiles first, see tc_kernels.cuh).
// Accumulator d[4 * j + e] of a thread holds row 16 * (warp % 4) + lane / 4 + 8 * (e / 2), column
// 8 * j + 2 * (lane % 4) + e % 2 -- the mma.sync C-fragment layout, repeated over the n8 blocks.
template <typename T, int kN>
struct Wgmma;

// The PTX operand lists of the accumulator widths; `shape_types` is the instruction's suffix and
// `modes` its trailing immediates: A and B scales 1, and for 16-bit types both operands K-major (TF32
// takes no transpose operands: it is always K-major).
#define TORCHCONV_WGMMA_N32(shape_types, modes)                                                                   \
  __device__ __forceinline__ static void run(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int scale_d) {    \
    TORCHCONV_WGMMA_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\nwgmma.mma_async.sync.aligned." shape_types  \
                        " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, " modes ";\n}\n" \
                        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]) \
                        : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                               \
  }
#define TORCHCONV_WGMMA_N64(shape_types, modes)                                                                          \
  __device__ __forceinline__ static void run(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {    \
    TORCHCONV_WGMMA_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\nwgmma.mma_async.sync.aligned." shape_types  \
                        " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, " modes ";\n}\n"                                                 \
                        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                                                                   \
                        : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                               \
  }
#define TORCHCONV_WGMMA_N128(shape_types, modes)                                                                         \
  __device__ __forceinline__ static void run(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {    \
    TORCHCONV_WGMMA_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\nwgmma.mma_async.sync.aligned." shape_types  \
                        " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, " modes ";\n}\n"                                                 \
                        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                                                                   \
                        : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                               \
  }
#define TORCHCONV_WGMMA_N192(shape_types, modes)                                                                  \
  __device__ __forceinline__ static void run(float (&d)[96], uint64_t desc_a, uint64_t desc_b, int scale_d) {    \
    TORCHCONV_WGMMA_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\nwgmma.mma_async.sync.aligned." shape_types  \
                        " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, " modes ";\n}\n" \
                        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]) \
                        : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                               \
  }
#define TORCHCONV_WGMMA_N256(shape_types, modes)                                                                  \
  __device__ __forceinline__ static void run(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {   \
    TORCHCONV_WGMMA_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\nwgmma.mma_async.sync.aligned." shape_types \
                        " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, " modes ";\n}\n"                                                  \
                        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])                                                                                    \
                        : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                              \
  }
#define TORCHCONV_WGMMA_16BIT_MODES "1, 1, 0, 0"
#define TORCHCONV_WGMMA_TF32_MODES "1, 1"
#define TORCHCONV_WGMMA_16BIT_MN_MAJOR_MODES "1, 1, 1, 1"
#define TORCHCONV_WGMMA_16BIT_A_MN_MAJOR_MODES "1, 1, 1, 0"
#define TORCHCONV_WGMMA_16BIT_B_MN_MAJOR_MODES "1, 1, 0, 1"
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TORCHCONV_WGMMA_ASM(...) asm volatile(__VA_ARGS__)
#else
#define TORCHCONV_WGMMA_ASM(...) __trap()
#endif

template <>
struct Wgmma<__half, 64> {
  TORCHCONV_WGMMA_N64("m64n64k16.f32.f16.f16", TORCHCONV_WGMMA_16BIT_MODES)
};
template <>
struct Wgmma<__half, 128> {
  TORCHCONV_WGMMA_N128("m64n128k16.f32.f16.f16", TORCHCONV_WGMMA_16BIT_MODES)
};
template <>
struct Wgmma<__nv_bfloat16, 32> {
  TORCHCONV_WGMMA_N32("m64n32k16.f32.bf16.bf16", TORCHCONV_WGMMA_16BIT_MODES)
};
template <>
struct Wgmma<__nv_bfloat16, 64> {
  TORCHCONV_WGMMA_N64("m64n64k16.f32.bf16.bf16", TORCHCONV_WGMMA_16BIT_MODES)
};
template <>
struct Wgmma<__nv_bfloat16, 128> {
  TORCHCONV_WGMMA_N128("m64n128k16.f32.bf16.bf16", TORCHCONV_WGMMA_16BIT_MODES)
};
template <>
struct Wgmma<__half, 192> {
  TORCHCONV_WGMMA_N192("m64n192k16.f32.f16.f16", TORCHCONV_WGMMA_16BIT_MODES)
};
template <>
struct Wgmma<__nv_bfloat16, 192> {
  TORCHCONV_WGMMA_N192("m64n192k16.f32.bf16.bf16", TORCHCONV_WGMMA_16BIT_MODES)
};
template <>
struct Wgmma<__half, 256> {
  TORCHCONV_WGMMA_N256("m64n256k16.f32.f16.f16", TORCHCONV_WGMMA_16BIT_MODES)
};
template <>
struct Wgmma<__nv_bfloat16, 256> {
  TORCHCONV_WGMMA_N256("m64n256k16.f32.bf16.bf16", TORCHCONV_WGMMA_16BIT_MODES)
};
template <>
struct Wgmma<float, 32> {
  TORCHCONV_WGMMA_N32("m64n32k8.f32.tf32.tf32", TORCHCONV_WGMMA_TF32_MODES)
};
template <>
struct Wgmma<float, 64> {
  TORCHCONV_WGMMA_N64("m64n64k8.f32.tf32.tf32", TORCHCONV_WGMMA_TF32_MODES)
};
template <>
struct Wgmma<float, 128> {
  TORCHCONV_WGMMA_N128("m64n128k8.f32.tf32.tf32", TORCHCONV_WGMMA_TF32_MODES)
};
template <>
struct Wgmma<float, 256> {
  TORCHCONV_WGMMA_N256("m64n256k8.f32.tf32.tf32", TORCHCONV_WGMMA_TF32_MODES)
};

// Both operands MN-major (the transpose modes; 16-bit types only: TF32 operands are always K-major),
// descriptors from wgmma_descriptor_mn_major. Accumulators as in Wgmma.
template <typename T, int kN>
struct WgmmaMnMajor;
template <>
struct WgmmaMnMajor<__half, 64> {
  TORCHCONV_WGMMA_N64("m64n64k16.f32.f16.f16", TORCHCONV_WGMMA_16BIT_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajor<__half, 128> {
  TORCHCONV_WGMMA_N128("m64n128k16.f32.f16.f16", TORCHCONV_WGMMA_16BIT_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajor<__half, 192> {
  TORCHCONV_WGMMA_N192("m64n192k16.f32.f16.f16", TORCHCONV_WGMMA_16BIT_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajor<__half, 256> {
  TORCHCONV_WGMMA_N256("m64n256k16.f32.f16.f16", TORCHCONV_WGMMA_16BIT_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajor<__nv_bfloat16, 64> {
  TORCHCONV_WGMMA_N64("m64n64k16.f32.bf16.bf16", TORCHCONV_WGMMA_16BIT_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajor<__nv_bfloat16, 128> {
  TORCHCONV_WGMMA_N128("m64n128k16.f32.bf16.bf16", TORCHCONV_WGMMA_16BIT_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajor<__nv_bfloat16, 192> {
  TORCHCONV_WGMMA_N192("m64n192k16.f32.bf16.bf16", TORCHCONV_WGMMA_16BIT_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajor<__nv_bfloat16, 256> {
  TORCHCONV_WGMMA_N256("m64n256k16.f32.bf16.bf16", TORCHCONV_WGMMA_16BIT_MN_MAJOR_MODES)
};

// A MN-major (descriptor from wgmma_descriptor_mn_major), B K-major (wgmma_descriptor): 16-bit types
// only, for A tiles that keep an NCHW source's order (positions along the rows, one channel a row).
// Accumulators as in Wgmma.
template <typename T, int kN>
struct WgmmaMnMajorA;
template <>
struct WgmmaMnMajorA<__half, 64> {
  TORCHCONV_WGMMA_N64("m64n64k16.f32.f16.f16", TORCHCONV_WGMMA_16BIT_A_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajorA<__half, 128> {
  TORCHCONV_WGMMA_N128("m64n128k16.f32.f16.f16", TORCHCONV_WGMMA_16BIT_A_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajorA<__half, 256> {
  TORCHCONV_WGMMA_N256("m64n256k16.f32.f16.f16", TORCHCONV_WGMMA_16BIT_A_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajorA<__nv_bfloat16, 64> {
  TORCHCONV_WGMMA_N64("m64n64k16.f32.bf16.bf16", TORCHCONV_WGMMA_16BIT_A_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajorA<__nv_bfloat16, 128> {
  TORCHCONV_WGMMA_N128("m64n128k16.f32.bf16.bf16", TORCHCONV_WGMMA_16BIT_A_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajorA<__nv_bfloat16, 256> {
  TORCHCONV_WGMMA_N256("m64n256k16.f32.bf16.bf16", TORCHCONV_WGMMA_16BIT_A_MN_MAJOR_MODES)
};

// A K-major (wgmma_descriptor), B MN-major (wgmma_descriptor_mn_major): 16-bit types only, for B tiles
// copied from a weight whose destination channels are its contiguous dimension (grad_input reading
// a channels_last weight as it is). Accumulators as in Wgmma.
template <typename T, int kN>
struct WgmmaMnMajorB;
template <>
struct WgmmaMnMajorB<__half, 64> {
  TORCHCONV_WGMMA_N64("m64n64k16.f32.f16.f16", TORCHCONV_WGMMA_16BIT_B_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajorB<__half, 128> {
  TORCHCONV_WGMMA_N128("m64n128k16.f32.f16.f16", TORCHCONV_WGMMA_16BIT_B_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajorB<__half, 192> {
  TORCHCONV_WGMMA_N192("m64n192k16.f32.f16.f16", TORCHCONV_WGMMA_16BIT_B_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajorB<__half, 256> {
  TORCHCONV_WGMMA_N256("m64n256k16.f32.f16.f16", TORCHCONV_WGMMA_16BIT_B_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajorB<__nv_bfloat16, 64> {
  TORCHCONV_WGMMA_N64("m64n64k16.f32.bf16.bf16", TORCHCONV_WGMMA_16BIT_B_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajorB<__nv_bfloat16, 128> {
  TORCHCONV_WGMMA_N128("m64n128k16.f32.bf16.bf16", TORCHCONV_WGMMA_16BIT_B_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajorB<__nv_bfloat16, 192> {
  TORCHCONV_WGMMA_N192("m64n192k16.f32.bf16.bf16", TORCHCONV_WGMMA_16BIT_B_MN_MAJOR_MODES)
};
template <>
struct WgmmaMnMajorB<__nv_bfloat16, 256> {
  TORCHCONV_WGMMA_N256("m64n256k16.f32.bf16.bf16", TORCHCONV_WGMMA_16BIT_B_MN_MAJOR_MODES)
};

// TF32 with A from registers: the caller holds A's m64 x k8 fragment, a[e] = row 16 * (warp % 4) +
// lane / 4 + 8 * (e % 2), column lane % 4 + 4 * (e / 2) (the mma.sync A-fragment layout of m16n8k8),
// rounded to TF32; B from shared memory as in Wgmma. The registers are read while the MMA is in
// flight: a caller does not redefine them before a wgmma_wait that covers it. Accumulators as in Wgmma.
template <typename T, int kN>
struct WgmmaRegA;
template <>
struct WgmmaRegA<float, 64> {
  __device__ __forceinline__ static void run(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    TORCHCONV_WGMMA_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\nwgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
                        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }
};
template <>
struct WgmmaRegA<float, 128> {
  __device__ __forceinline__ static void run(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    TORCHCONV_WGMMA_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\nwgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
                        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
                        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }
};
template <>
struct WgmmaRegA<float, 256> {
  __device__ __forceinline__ static void run(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    TORCHCONV_WGMMA_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\nwgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 "
                        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1;\n}\n"
                        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }
};

#undef TORCHCONV_WGMMA_N32
#undef TORCHCONV_WGMMA_N64
#undef TORCHCONV_WGMMA_N128
#undef TORCHCONV_WGMMA_N192
#undef TORCHCONV_WGMMA_N256
#undef TORCHCONV_WGMMA_ASM
#undef TORCHCONV_WGMMA_16BIT_MODES
#undef TORCHCONV_WGMMA_TF32_MODES
#undef TORCHCONV_WGMMA_16BIT_MN_MAJOR_MODES

}  // namespace cuda
}  // namespace torchconv
