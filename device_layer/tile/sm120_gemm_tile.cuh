#pragma once
// The configuration of a warp-specialized GEMM tile (bf16_gemm, fp8_fp4_gemm_1d1d): warps, per-warp fragments,
// stage sizes, the shared-memory budget and the register split between the producer and the math warps.

#include "../common/sm120_arch.cuh"
#include "../common/sm120_swizzle.cuh"

namespace sm120 {

// A BLOCK_M x BLOCK_N tile whose A stages are kRowBytes per row and B stages kRowBytesB (one swizzle span each;
// they differ only for mixed FP8 x packed-FP4 operands), kWarpsM x kWarpsN math warps plus one producer warpgroup.
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kRowBytes_, uint32_t kStages, uint32_t kWarpsM, uint32_t kWarpsN,
          uint32_t kRowBytesB_ = kRowBytes_>
struct GemmTileConfig {
    static constexpr uint32_t kRowBytes = kRowBytes_;
    static constexpr uint32_t kRowBytesB = kRowBytesB_;
    static constexpr uint32_t kNumStages = kStages;
    static constexpr uint32_t kMathWarps = kWarpsM * kWarpsN;
    static constexpr uint32_t kMathThreads = kMathWarps * 32;
    static constexpr uint32_t kThreads = kMathThreads + 128;  // + one producer warpgroup
    static constexpr uint32_t kWarpM = BLOCK_M / kWarpsM;
    static constexpr uint32_t kWarpN = BLOCK_N / kWarpsN;
    static constexpr uint32_t kMI = kWarpM / 16;
    static constexpr uint32_t kNI = kWarpN / 8;
    static constexpr uint32_t kTileABytes = BLOCK_M * kRowBytes;
    static constexpr uint32_t kTileBBytes = BLOCK_N * kRowBytesB;
    static constexpr uint32_t kStageBytes = kTileABytes + kTileBBytes;
    static constexpr uint32_t kBarrierBytes = 2 * kStages * sizeof(uint64_t);
    static constexpr uint32_t kSmemBytes = kStages * kStageBytes + kBarrierBytes;
    // Register split after setmaxnreg: the producer keeps 40, math warps take the rest (multiple of 8).
    static constexpr uint32_t kProducerRegs = 40;
    static constexpr uint32_t kMathRegs = ((65536 - 128 * kProducerRegs) / kMathThreads) / 8 * 8 > 240
                                              ? 240
                                              : ((65536 - 128 * kProducerRegs) / kMathThreads) / 8 * 8;

    // Registers per thread at entry under __launch_bounds__(kThreads, 1). setmaxnreg.inc may only grow a
    // warp's allocation, so reallocate only when the math warps want more than that (384-thread kernels);
    // 256-thread kernels already start with the 255-register maximum.
    static constexpr uint32_t kEntryRegs = (65536 / kThreads) / 8 * 8 > 255 ? 255 : (65536 / kThreads) / 8 * 8;
    static constexpr bool kReallocRegs = kMathRegs > kEntryRegs;

    static_assert(kMathWarps % 4 == 0, "math warps must form whole warpgroups (setmaxnreg is per warpgroup)");
    static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "warp tile must be a multiple of 16x16");
    static_assert((kRowBytes == 64 || kRowBytes == 128) && (kRowBytesB == 64 || kRowBytesB == 128),
                  "stage rows are one 64B or 128B swizzle span");
    static_assert(kTileABytes % kSwizzleAtomBytes == 0 && kTileBBytes % kSwizzleAtomBytes == 0,
                  "tiles must keep 1024-byte swizzle-atom alignment");
    static_assert(kSmemBytes <= kMaxSmemPerBlock, "shared memory exceeds the SM120 per-block budget (101376 B)");
    static_assert(BLOCK_M <= 256 && BLOCK_N <= 256, "TMA box dimensions are limited to 256");
};

}  // namespace sm120
