#pragma once
// The TMA stage ring every kernel streams its operands through: kStages shared-memory stages, each guarded by a
// full / empty mbarrier pair. One producer lane fills stages in order; consumer warps drain them in the same
// order. Both sides walk the ring with a PipelineState (stage index + the parity of the current pass).
//
// Parity (sm120_mbarrier.cuh): a fresh barrier reads parity 1 as complete, so on its first pass the producer's
// wait on `empty` with phase ^ 1 returns at once, and consumers wait `full` with the phase itself.

#include "sm120_arch.cuh"
#include "sm120_fence.cuh"
#include "sm120_mbarrier.cuh"

namespace sm120 {

template <uint32_t kStages>
struct PipelineState {
    static_assert(kStages >= 1, "a ring has at least one stage");
    uint32_t stage = 0, phase = 0;

    SM120_DEVICE void advance() {
        if (++stage == kStages) stage = 0, phase ^= 1;
    }
    // The state one stage on: consumers that look ahead (prefetch the next stage's first fragments) wait on it
    // before they hand the current stage back.
    SM120_DEVICE PipelineState next() const {
        PipelineState s = *this;
        s.advance();
        return s;
    }
};

// Block-collective: one barrier outside a ring (a buffer loaded once), initialized like a ring's.
SM120_DEVICE void init_barrier(uint64_t* bar, uint32_t arrive_count) {
    if (threadIdx.x == 0) {
        mbarrier_init(bar, arrive_count);
        fence_barrier_init();
    }
    __syncthreads();
}

// One consumer warp hands a TMA-filled buffer back. Hazard closed: this warp's generic-proxy reads of the buffer
// (ldmatrix, ld.shared) against the async-proxy (TMA) write that refills it once the producer sees `empty`
// complete. Every lane fences its own reads, the warp converges, and lane 0 arrives once for the warp (the
// barrier counts warps).
SM120_DEVICE void warp_release(uint64_t* empty, uint32_t lane) {
    fence_proxy_async_smem();
    __syncwarp();
    if (lane == 0) mbarrier_arrive(empty);
}

// The barrier arrays of a ring (full[kStages], then empty[kStages], in shared memory) and the operations on a stage.
template <uint32_t kStages>
struct StageRing {
    using State = PipelineState<kStages>;
    static constexpr uint32_t kBarrierBytes = 2 * kStages * sizeof(uint64_t);
    uint64_t* full;
    uint64_t* empty;

    // The ring whose barriers start at `barriers` (8-byte aligned shared memory, kBarrierBytes long).
    SM120_DEVICE static StageRing at(void* barriers) {
        uint64_t* b = static_cast<uint64_t*>(barriers);
        return StageRing{b, b + kStages};
    }
    // The shared memory just past the barriers (where a kernel keeps further barriers).
    SM120_DEVICE uint64_t* after() const { return empty + kStages; }

    // Block-collective: `full` completes on the producer's arrival plus its transaction bytes, `empty` once
    // `consumers` warps released the stage. Thread 0 initializes, the fence makes the barriers visible to TMA's
    // complete_tx, and __syncthreads to every thread.
    SM120_DEVICE void init(uint32_t consumers) const {
        if (threadIdx.x == 0) {
            for (uint32_t s = 0; s < kStages; ++s) {
                mbarrier_init(&full[s], 1);
                mbarrier_init(&empty[s], consumers);
            }
            fence_barrier_init();
        }
        __syncthreads();
    }

    // Producer: wait until every consumer released the stage (its previous pass).
    SM120_DEVICE void wait_empty(State s) const { mbarrier_wait(&empty[s.stage], s.phase ^ 1); }
    // Producer: announce the stage's `bytes` of TMA transactions; returns the barrier the loads complete on.
    SM120_DEVICE uint64_t* arm(State s, uint32_t bytes) const {
        mbarrier_arrive_expect_tx(&full[s.stage], bytes);
        return &full[s.stage];
    }
    // Producer: both, for a stage whose byte count is known before the wait.
    SM120_DEVICE uint64_t* acquire(State s, uint32_t bytes) const {
        wait_empty(s);
        return arm(s, bytes);
    }
    // Consumer: wait until the stage's data landed.
    SM120_DEVICE void wait_full(State s) const { mbarrier_wait(&full[s.stage], s.phase); }
    // Consumer warp: hand the stage back (warp_release).
    SM120_DEVICE void release(State s, uint32_t lane) const { warp_release(&empty[s.stage], lane); }
    // Consumer warp that looks ahead: when `more`, wait for the next stage and `prefetch(its index)` (its first
    // fragments, so the next MMAs need not wait) before handing the current one back; then step to the next.
    template <typename Prefetch>
    SM120_DEVICE void release_ahead(State& s, uint32_t lane, bool more, Prefetch&& prefetch) const {
        const State ahead = s.next();
        if (more) {
            wait_full(ahead);
            prefetch(ahead.stage);
        }
        release(s, lane);
        s = ahead;
    }
};

}  // namespace sm120
