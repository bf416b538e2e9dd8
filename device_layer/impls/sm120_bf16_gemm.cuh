#pragma once
// BF16 GEMM, NT layout:  D[M,N] = A[M,K] · B[N,K]^T (+ C[M,N]),  fp32 accumulation.
//
// Operand majorness: kAMNMajor / kBMNMajor select an MN-major operand (A stored [K, M], B stored [K, N]),
// i.e. the TN / NN / TT layouts. Such a tile is fetched as 64-element-wide boxes into [BLOCK_K][64]
// sub-tiles (128B swizzle) and its fragments are read with ldmatrix.trans; no host-side transposes.
//
// kSwapAB computes the same D as Dᵀ = B·Aᵀ: the host passes B's descriptor as the first operand and A's
// as the second (kernel m/n are then N/M), and the epilogue writes transposed. Small-M (decode) calls
// use it so the weight matrix fills the tile's 64/128-row side and the few tokens a 16/32-wide side.
//
// Warp specialization: warpgroup 0..(kMathWarps/4 - 1) are math warps; the last warpgroup is the
// producer (one lane issues TMA, the rest idle with few registers). A kStages-deep ring of
// swizzled smem tiles (128B for BLOCK_K 64, 64B for BLOCK_K 32) is filled by TMA (full barriers carry transaction bytes) and handed back
// by the math warps through empty barriers. Fragments come from smem via ldmatrix; MMA is
// mma.sync m16n8k16 bf16 -> fp32. The epilogue stores straight from registers with bounds checks,
// so M/N tails need nothing beyond TMA's zero fill of out-of-bounds A/B boxes (K tails likewise). With C, the
// accumulators start from C, loaded before the main loop, so the epilogue never waits on a read.

#include <cuda.h>
#include "../common/sm120_arch.cuh"
#include "../common/sm120_ldmatrix.cuh"
#include "../common/sm120_math.cuh"
#include "../common/sm120_mbarrier.cuh"
#include "../common/sm120_pdl.cuh"
#include "../common/sm120_pipeline.cuh"
#include "../common/sm120_swizzle.cuh"
#include "../common/sm120_tma.cuh"
#include "../common/sm120_types.cuh"
#include "../common/sm120_warp.cuh"
#include "../mma/sm120.cuh"
#include "../scheduler/sm120_gemm.cuh"
#include "../epilogue/sm120_gemm_epilogue.cuh"
#include "../tile/sm120_gemm_mainloop.cuh"
#include "../tile/sm120_gemm_tile.cuh"

namespace sm120 {

// bf16 rows of BLOCK_K elements: BLOCK_K 64 -> 128-byte rows (128B swizzle), 32 -> 64-byte rows (64B swizzle).
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t BLOCK_K, uint32_t kStages, uint32_t kWarpsM, uint32_t kWarpsN>
struct Bf16GemmConfig : GemmTileConfig<BLOCK_M, BLOCK_N, BLOCK_K * 2, kStages, kWarpsM, kWarpsN> {
    static constexpr uint32_t kBlockK = BLOCK_K;
    static_assert(BLOCK_K == 32 || BLOCK_K == 64, "BLOCK_K must be 32 (64B swizzle) or 64 (128B swizzle)");
};

// One operand tile into shared memory: K-major as a single [ROWS][BLOCK_K] box; MN-major as ROWS/64 boxes
// of [BLOCK_K][64] (the descriptor's inner dimension is then M or N, always 128B-swizzled). Both deliver
// ROWS * BLOCK_K elements, so the stage's transaction count is the same. kBatch: 3-D maps with the batch as
// dim 2 (batched, batch-reduce), the same boxes.
template <bool kMNMajor, uint32_t ROWS, uint32_t BLOCK_K, bool kBatch>
SM120_DEVICE void load_operand(uint8_t* dst, const CUtensorMap* desc, uint64_t* bar, int32_t k, uint32_t row,
                               int32_t batch) {
    auto box = [&](uint8_t* to, int32_t c0, int32_t c1) {
        if constexpr (kBatch) tma_load_3d(to, desc, bar, c0, c1, batch);
        else tma_load_2d(to, desc, bar, c0, c1);
    };
    if constexpr (kMNMajor) {
        constexpr uint32_t kSubTileBytes = BLOCK_K * kSwizzle128BRowBytes;
#pragma unroll
        for (uint32_t j = 0; j < ROWS / 64; ++j) box(dst + j * kSubTileBytes, static_cast<int32_t>(row + j * 64), k);
    } else {
        box(dst, k, static_cast<int32_t>(row));
    }
}

// K-grouped: point copies of the two operand maps at the group's first K row and limit their K extent to
// the group's K (so TMA zero-fills past the group's end), then publish them to `slots`. Warp-collective.
// aux = {A base, B base, A row bytes, B row bytes, slots base}; MN-major maps have dim 0 = M/N, dim 1 = K.
SM120_DEVICE void rebase_group_descriptors(uint8_t* stage, const CUtensorMap& tmap_a, const CUtensorMap& tmap_b,
                                           const uint64_t* aux, uint32_t k_offset, uint32_t group_k, uint32_t lane,
                                           CUtensorMap* slots) {
    if (lane == 0) {
        *reinterpret_cast<CUtensorMap*>(stage) = tmap_a;
        *reinterpret_cast<CUtensorMap*>(stage + 128) = tmap_b;
        const uint32_t extent = group_k > 0 ? group_k : 1u;  // an empty group issues no loads; keep the map valid
        tensormap_replace_address(stage,
                                  reinterpret_cast<const uint8_t*>(aux[0]) + static_cast<uint64_t>(k_offset) * aux[2]);
        tensormap_replace_dim<1>(stage, extent);
        tensormap_replace_address(stage + 128,
                                  reinterpret_cast<const uint8_t*>(aux[1]) + static_cast<uint64_t>(k_offset) * aux[3]);
        tensormap_replace_dim<1>(stage + 128, extent);
    }
    __syncwarp();
    tensormap_publish(slots, stage);
    tensormap_publish(slots + 1, stage + 128);
    if (lane == 0) {
        tensormap_acquire(slots);
        tensormap_acquire(slots + 1);
    }
    __syncwarp();
}

// A math lane's ldmatrix addressing of one k16 step: A fragments of kMI m16 tiles, B of kNI n8 tiles (layouts in
// mma/sm120.cuh). K-major tiles: rows are M (or N), 16-byte chunks along K. MN-major tiles: [BLOCK_K][64]
// sub-tiles whose rows are K and chunks run along M (N); ldmatrix.trans hands each lane the same fragment elements.
template <typename Cfg, bool kAMNMajor, bool kBMNMajor>
struct Bf16Fragments {
    static constexpr uint32_t kMI = Cfg::kMI, kNI = Cfg::kNI;
    static constexpr uint32_t kSubTileBytes = Cfg::kBlockK * kSwizzle128BRowBytes;
    uint32_t wm, wn;
    uint32_t a_row, a_chunk, b_row, b_chunk;            // K-major: the lane's row and 16-byte chunk
    uint32_t a_k_row, a_mn_chunk, b_k_row, b_mn_chunk;  // MN-major: the lane's K row and chunk along M / N

    SM120_DEVICE Bf16Fragments(uint32_t wm_, uint32_t wn_, uint32_t lane)
        : wm(wm_), wn(wn_), a_row(wm_ * Cfg::kWarpM + (lane & 15)), a_chunk(lane >> 4),
          b_row(wn_ * Cfg::kWarpN + (lane & 7) + ((lane >> 4) << 3)), b_chunk((lane >> 3) & 1),
          a_k_row((lane & 7) + ((lane >> 4) << 3)), a_mn_chunk((lane >> 3) & 1),
          b_k_row((lane & 7) + (((lane >> 3) & 1) << 3)), b_mn_chunk(lane >> 4) {}

    SM120_DEVICE void load(const uint8_t* tile_a, const uint8_t* tile_b, uint32_t kk, uint32_t (&af)[kMI][4],
                           uint32_t (&bfr)[kNI][2]) const {
        const uint32_t a_base = smem_addr(tile_a), b_base = smem_addr(tile_b);
#pragma unroll
        for (uint32_t i = 0; i < kMI; ++i) {
            if constexpr (kAMNMajor) {
                const uint32_t m0 = wm * Cfg::kWarpM + i * 16;
                ldmatrix_x4_trans(a_base + (m0 / 64) * kSubTileBytes +
                                      swizzle_offset<128>(kk * 16 + a_k_row, (m0 % 64) / 8 + a_mn_chunk),
                                  af[i][0], af[i][1], af[i][2], af[i][3]);
            } else {
                ldmatrix_x4(a_base + swizzle_offset<Cfg::kRowBytes>(a_row + i * 16, kk * 2 + a_chunk), af[i][0],
                            af[i][1], af[i][2], af[i][3]);
            }
        }
#pragma unroll
        for (uint32_t j = 0; j < kNI / 2; ++j) {
            if constexpr (kBMNMajor) {
                const uint32_t n0 = wn * Cfg::kWarpN + j * 16;
                ldmatrix_x4_trans(b_base + (n0 / 64) * kSubTileBytes +
                                      swizzle_offset<128>(kk * 16 + b_k_row, (n0 % 64) / 8 + b_mn_chunk),
                                  bfr[2 * j][0], bfr[2 * j][1], bfr[2 * j + 1][0], bfr[2 * j + 1][1]);
            } else {
                ldmatrix_x4(b_base + swizzle_offset<Cfg::kRowBytes>(b_row + j * 16, kk * 2 + b_chunk), bfr[2 * j][0],
                            bfr[2 * j][1], bfr[2 * j + 1][0], bfr[2 * j + 1][1]);
            }
        }
    }
};

template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t BLOCK_K, uint32_t kStages, uint32_t kWarpsM, uint32_t kWarpsN,
          uint32_t kGroupN, typename OutT, bool kWithC, bool kSwapAB, GemmType kType, bool kAMNMajor = false,
          bool kBMNMajor = false>
// clang-format off: a kernel declaration (see .clang-format)
__global__ void __launch_bounds__(Bf16GemmConfig<BLOCK_M, BLOCK_N, BLOCK_K, kStages, kWarpsM, kWarpsN>::kThreads, 1)
sm120_bf16_gemm_nt_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                          OutT* __restrict__ d, const OutT* c, const int32_t* layout, const uint64_t* aux,
                          uint32_t m, uint32_t n,
                          uint32_t k, uint32_t ldd, uint32_t ldc, uint32_t num_groups, uint32_t psum_layout,
                          uint32_t num_splits, uint32_t split_stride) {
    // clang-format on
    // Split-K (num_splits > 1): slice s of a tile writes fp32 partial sums to d + s * split_stride (a
    // workspace); impls/sm120_split_k_reduce.cuh adds the slices in order, so results are deterministic.
    // Batched: num_groups problems, D_g (and C_g) at d + g * split_stride. Batch-reduce: D = sum over the
    // num_groups batches, K blocks numbered batch-major (split-K slices may straddle batches).
    // K-grouped: layout = K of each group; aux = {A base, B base, A row bytes, B row bytes, descriptor slots}.
    static_assert(!(kSwapAB && kType != GemmType::kNormal), "swap-AB is for dense problems only");
    static_assert((!kAMNMajor || BLOCK_M % 64 == 0) && (!kBMNMajor || BLOCK_N % 64 == 0),
                  "MN-major tiles are fetched in 64-element boxes");
    using Cfg = Bf16GemmConfig<BLOCK_M, BLOCK_N, BLOCK_K, kStages, kWarpsM, kWarpsN>;
    constexpr bool kKGrouped = kType == GemmType::kKGroupedContiguous;
    // The K-grouped producer also rebases descriptors per group: 40 registers spilled under CUDA 13.5.
    constexpr uint32_t kProducerRegs = kKGrouped ? 56 : Cfg::kProducerRegs;
    constexpr uint32_t kMathRegsFit = ((65536 - 128 * kProducerRegs) / Cfg::kMathThreads) / 8 * 8;
    constexpr uint32_t kMathRegs = kMathRegsFit > 240 ? 240 : kMathRegsFit;
    constexpr uint32_t kMI = Cfg::kMI, kNI = Cfg::kNI;
    // The whole producer warp walks the tiles: K-grouped rebasing publishes tensor maps warp-collectively.
    using Mainloop = GemmMainloop<Cfg, Cfg::kBlockK / 16, true>;

    extern __shared__ __align__(1024) uint8_t smem[];
    const auto ml = Mainloop::at(smem);
    // K-grouped only: two 128-byte-aligned CUtensorMap copies edited with tensormap.replace
    uint8_t* desc_stage = smem + align_up(kStages * Cfg::kStageBytes + Cfg::kBarrierBytes, 128u);
    static_assert(!kKGrouped || (kAMNMajor && kBMNMajor), "K-grouped operands are [sum K, M] and [sum K, N]: MN-major");
    static_assert(!kKGrouped || align_up(Cfg::kSmemBytes, 128u) + 256 <= kMaxSmemPerBlock,
                  "descriptor staging does not fit");

    const uint32_t warp = warp_idx(), lane = lane_idx();
    ml.init();
    // Inputs may be produced by the previous kernel in the stream (PDL); wait before touching them.
    pdl_wait_primary();

    // Per-role state is set up after setmaxnreg: values live across the reallocation get spilled.
    const uint32_t batch_k_blocks = ceil_div(k, Cfg::kBlockK);
    const uint32_t num_k_blocks = kType == GemmType::kBatchReduce ? batch_k_blocks * num_groups : batch_k_blocks;
    using Scheduler = GemmTileScheduler<BLOCK_M, BLOCK_N, BLOCK_K, kGroupN, kType>;

    // The producer warp: all 32 lanes walk the tiles (rebasing is warp-collective), lane 0 issues the TMA loads.
    auto producer = [&] {
        const CUtensorMap* desc_a = &tmap_a;
        const CUtensorMap* desc_b = &tmap_b;
        int32_t desc_group = -1;
        // A group's tiles are consecutive in every CTA's sequence, so each group is rebased once per CTA, into a
        // slot of its own: in-flight loads of the previous group keep their map.
        auto rebase = [&](const TileInfo& tile) {
            if constexpr (kKGrouped) {
                if (tile.group == desc_group) return;
                CUtensorMap* slots = reinterpret_cast<CUtensorMap*>(aux[4]) +
                                     (static_cast<size_t>(blockIdx.x) * num_groups + tile.group) * 2;
                rebase_group_descriptors(desc_stage, tmap_a, tmap_b, aux, tile.k_offset,
                                         static_cast<uint32_t>(__ldg(layout + tile.group)), lane, slots);
                desc_a = slots, desc_b = slots + 1, desc_group = tile.group;
            }
        };
        // Batched: the tile's batch; batch-reduce: K blocks run over (batch, K block) pairs, batch-major.
        auto load_stage = [&](const TileInfo& tile, uint32_t kb, uint32_t s, uint64_t* full) {
            constexpr bool kBatch = kType == GemmType::kBatched || kType == GemmType::kBatchReduce;
            constexpr bool kReduce = kType == GemmType::kBatchReduce;
            const uint32_t batch = kReduce ? kb / batch_k_blocks : static_cast<uint32_t>(tile.group);
            const int32_t kc = static_cast<int32_t>((kReduce ? kb - batch * batch_k_blocks : kb) * Cfg::kBlockK);
            const int32_t b = static_cast<int32_t>(batch);
            load_operand<kAMNMajor, BLOCK_M, BLOCK_K, kBatch>(ml.tile_a(s), desc_a, full, kc, tile.a_row, b);
            load_operand<kBMNMajor, BLOCK_N, BLOCK_K, kBatch>(ml.tile_b(s), desc_b, full, kc, tile.b_row, b);
        };
        ml.produce(Scheduler(m, n, num_groups, layout, psum_layout != 0, num_k_blocks, num_splits), &tmap_a, &tmap_b,
                   lane, rebase, load_stage);
    };
    // The math warps: double-buffered fragments (af / bfr[buffer]) feeding one tile's accumulators at a time.
    auto math = [&] {
        Scheduler sched(m, n, num_groups, layout, psum_layout != 0, num_k_blocks, num_splits);
        const uint32_t wm = warp / kWarpsN, wn = warp % kWarpsN;
        const Bf16Fragments<Cfg, kAMNMajor, kBMNMajor> frags(wm, wn, lane);
        TileInfo tile;
        PipelineState<kStages> st;
        uint32_t af[2][kMI][4];
        uint32_t bfr[2][kNI][2];
        auto load_step = [&](uint32_t s, uint32_t kk, auto buf) {
            frags.load(ml.tile_a(s), ml.tile_b(s), kk, af[buf], bfr[buf]);
        };
        while (sched.next(tile)) {
            const size_t slice = kType == GemmType::kBatched ? static_cast<size_t>(tile.group) : tile.split;
            OutT* const d_slice = d + slice * split_stride;
            const OutT* const c_slice = kType == GemmType::kBatched && kWithC ? c + slice * split_stride : c;
            // D = acc + C starts from C (kWithC implies no split-K): its loads overlap the main loop (see
            // load_accumulators). The swap-AB epilogue adds C itself.
            // Where registers allow (warp tiles up to 64 values per thread), C lands in registers of its own and
            // is added after the main loop, so the first MMA does not wait for C's DRAM latency either.
            constexpr bool kCInAcc = kWithC && !kSwapAB;
            constexpr bool kCApart = kCInAcc && kMI * kNI * 4 <= 64;
            float acc[kMI][kNI][4];
            float c_acc[kCApart ? kMI : 1][kCApart ? kNI : 1][4];
            if constexpr (kCApart) {
                load_accumulators<kMI, kNI, kType>(c_acc, tile, c_slice, layout, psum_layout != 0, n, ldc,
                                                   wm * Cfg::kWarpM, wn * Cfg::kWarpN, lane);
            } else if constexpr (kCInAcc) {
                load_accumulators<kMI, kNI, kType>(acc, tile, c_slice, layout, psum_layout != 0, n, ldc,
                                                   wm * Cfg::kWarpM, wn * Cfg::kWarpN, lane);
            }
            if constexpr (!kCInAcc || kCApart) fill(acc, 0.0f);

            auto mma_step = [&](auto, auto buf) {
#pragma unroll
                for (uint32_t i = 0; i < kMI; ++i)
#pragma unroll
                    for (uint32_t j = 0; j < kNI; ++j) mma_bf16_16816(acc[i][j], af[buf][i], bfr[buf][j]);
            };
            ml.consume(st, tile, lane, NoStageData{}, load_step, mma_step);

            // Epilogue: registers -> global, each thread owning its elements (so C may alias D).
            if constexpr (kSwapAB) {
                store_accumulators_transposed<kMI, kNI, kType, kWithC>(acc, tile, d_slice, c, layout, psum_layout != 0,
                                                                       n, ldd, ldc, wm * Cfg::kWarpM, wn * Cfg::kWarpN,
                                                                       lane);
            } else {
                if constexpr (kCApart) {
#pragma unroll
                    for (uint32_t i = 0; i < kMI; ++i)
#pragma unroll
                        for (uint32_t j = 0; j < kNI; ++j)
#pragma unroll
                            for (uint32_t e = 0; e < 4; ++e) acc[i][j][e] += c_acc[i][j][e];
                }
                store_accumulators<kMI, kNI, kType, kWithC && !kCInAcc>(acc, tile, d_slice, c_slice, layout,
                                                                        psum_layout != 0, n, ldd, ldc, wm * Cfg::kWarpM,
                                                                        wn * Cfg::kWarpN, lane, 1.0f);
            }
        }
    };
    run_gemm_roles<Cfg, kProducerRegs, kMathRegs>(warp, producer, math);
}

}  // namespace sm120
