#pragma once
// The main loop of the warp-specialized GEMMs (bf16_gemm, fp8_fp4_gemm_1d1d), written once: the CTA's roles,
// the producer's walk over the stage ring and the math warps' walk over one tile's K blocks. What differs
// between the kernels comes in as callbacks: how a K block is loaded into a stage (TMA issue), how a step's
// fragments are read and multiplied, and what else travels one K block ahead of the stages (block scales).
//
// Math warps drain the ring with double-buffered fragments: step kk + 1's fragments are read while step kk's
// MMAs run, and the last step of a stage reads the next stage's first fragments before handing its own stage
// back (StageRing::release_ahead), so the first MMAs of a stage never wait on shared memory.

#include <type_traits>
#include "../common/sm120_arch.cuh"
#include "../common/sm120_math.cuh"
#include "../common/sm120_pdl.cuh"
#include "../common/sm120_pipeline.cuh"
#include "../common/sm120_tma.cuh"
#include "../common/sm120_warp.cuh"
#include "../scheduler/sm120_gemm.cuh"

namespace sm120 {

// What a math lane fetches from global memory one K block ahead of its stage (the block-scaled GEMM's scale words):
// first(kb) loads the tile's first block for use, next(kb) starts loading block kb while the current stage runs,
// advance() makes the block next() loaded the current one. Three lambdas over the kernel's own registers.
template <typename First, typename Next, typename Advance>
struct StageData {
    First first;
    Next next;
    Advance advance;
};
template <typename First, typename Next, typename Advance>
SM120_DEVICE StageData<First, Next, Advance> stage_data(First first, Next next, Advance advance) {
    return {first, next, advance};
}
// The BF16 GEMM fetches nothing besides its stages.
struct NoStageData {
    SM120_DEVICE void first(uint32_t) const {}
    SM120_DEVICE void next(uint32_t) const {}
    SM120_DEVICE void advance() const {}
};

// The CTA's roles. Math warps [0, kMathWarps) run `math`; the producer warpgroup after them first hands registers
// to the math warps (setmaxnreg, only where those want more than the entry count) and its first warp runs
// `producer`; the other three idle.
template <typename Cfg, uint32_t kProducerRegs, uint32_t kMathRegs, typename Producer, typename Math>
SM120_DEVICE void run_gemm_roles(uint32_t warp, Producer&& producer, Math&& math) {
    if (warp >= Cfg::kMathWarps) {
        if constexpr (Cfg::kReallocRegs) warpgroup_reg_dealloc<kProducerRegs>();
        if (warp == Cfg::kMathWarps) producer();
    } else {
        if constexpr (Cfg::kReallocRegs) warpgroup_reg_alloc<kMathRegs>();
        math();
    }
}

// The stage ring of a GemmTileConfig (tile/sm120_gemm_tile.cuh) and the two loops over it. Shared memory: kStages
// A tiles, kStages B tiles, then the ring's full / empty barriers. kSteps MMA steps per stage. kWarpWalks: the
// producer's whole warp walks the tiles (its per-tile hook may be warp-collective, e.g. tensormap_publish) and
// lane 0 issues the loads; otherwise the producer runs in the issuing lane alone.
template <typename Cfg, uint32_t kSteps, bool kWarpWalks = false>
struct GemmMainloop {
    static_assert(kSteps % 2 == 0, "fragment double-buffering assumes an even number of steps per stage");
    static constexpr uint32_t kStages = Cfg::kNumStages;
    using Ring = StageRing<kStages>;
    using State = PipelineState<kStages>;

    uint8_t* smem_a;  // kStages A tiles
    uint8_t* smem_b;  // kStages B tiles
    Ring ring;

    SM120_DEVICE static GemmMainloop at(uint8_t* smem) {
        return GemmMainloop{smem, smem + kStages * Cfg::kTileABytes, Ring::at(smem + kStages * Cfg::kStageBytes)};
    }
    SM120_DEVICE uint8_t* tile_a(uint32_t stage) const { return smem_a + stage * Cfg::kTileABytes; }
    SM120_DEVICE uint8_t* tile_b(uint32_t stage) const { return smem_b + stage * Cfg::kTileBBytes; }
    // Block-collective: a stage goes back to the producer once every math warp released it.
    SM120_DEVICE void init() const { ring.init(Cfg::kMathWarps); }

    // Producer: walks the CTA's tiles and fills one stage per K block, in the order the math warps drain them.
    // on_tile(tile) runs first for each tile; load_stage(tile, kb, stage, full) issues the TMA loads of K block kb
    // into `stage`, completing on `full` (already armed with the stage's bytes).
    template <typename Scheduler, typename OnTile, typename LoadStage>
    SM120_DEVICE void produce(Scheduler&& sched, const CUtensorMap* map_a, const CUtensorMap* map_b, uint32_t lane,
                              OnTile&& on_tile, LoadStage&& load_stage) const {
        const bool issues = !kWarpWalks || lane == 0;
        if (issues) {
            tma_prefetch_descriptor(map_a);
            tma_prefetch_descriptor(map_b);
        }
        TileInfo tile;
        State st;
        while (sched.next(tile)) {
            on_tile(tile);
            if (issues) {
                for (uint32_t kb = tile.k_begin; kb < tile.k_end; ++kb, st.advance())
                    load_stage(tile, kb, st.stage, ring.acquire(st, Cfg::kStageBytes));
            }
            if constexpr (kWarpWalks) __syncwarp();
        }
        // every load of this CTA is issued: the next grid in the stream may start its prologue
        if (issues) pdl_launch_dependents();
    }

    // Math warp: the K blocks of one tile, from `st` on (the state carries over to the next tile).
    // load(stage, kk, buf) reads step kk's fragments into buffer buf (0 / 1); mma(kk, buf) runs step kk from it;
    // kk and buf are std::integral_constant (block-scaled selectors must be immediates). `data`: a StageData
    // (or NoStageData) for what travels one K block ahead of the stages.
    template <typename Data, typename Load, typename Mma>
    SM120_DEVICE void consume(State& st, const TileInfo& tile, uint32_t lane, Data&& data, Load&& load,
                              Mma&& mma) const {
        using Zero = std::integral_constant<uint32_t, 0>;
        if (tile.k_end > tile.k_begin) {
            data.first(tile.k_begin);
            ring.wait_full(st);
            load(st.stage, Zero{}, Zero{});
        }
        for (uint32_t kb = tile.k_begin; kb < tile.k_end; ++kb) {
            if (kb + 1 < tile.k_end) data.next(kb + 1);  // in flight during this stage
            static_for<0, kSteps>([&](auto step) {
                constexpr uint32_t kk = decltype(step)::value;
                using Cur = std::integral_constant<uint32_t, kk & 1>;
                using Nxt = std::integral_constant<uint32_t, (kk & 1) ^ 1>;
                if constexpr (kk + 1 < kSteps) {
                    load(st.stage, std::integral_constant<uint32_t, kk + 1>{}, Nxt{});
                } else {
                    // every fragment read of this stage has been issued: it may go back once the next stage's
                    // first fragments are requested (crossing into the next tile's stage is fine: the producer
                    // fills stages in the same order)
                    ring.release_ahead(st, lane, kb + 1 < tile.k_end,
                                       [&](uint32_t next_stage) { load(next_stage, Zero{}, Nxt{}); });
                }
                mma(step, Cur{});
            });
            if (kb + 1 < tile.k_end) data.advance();
        }
    }
};

}  // namespace sm120
