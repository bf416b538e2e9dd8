#pragma once
// Small integer helpers usable on host and device.

#include <type_traits>
#include "sm120_arch.cuh"

namespace sm120 {

template <typename T>
SM120_HOST_DEVICE constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }

template <typename T>
SM120_HOST_DEVICE constexpr T align_up(T a, T b) { return ceil_div(a, b) * b; }

// f(std::integral_constant<uint32_t, i>{}) for i = kBegin .. kEnd-1: a loop whose index can be a template
// argument (the block-scaled MMA selectors must be immediates).
template <uint32_t kBegin, uint32_t kEnd, typename F>
SM120_DEVICE void static_for(F&& f) {
    if constexpr (kBegin < kEnd) {
        f(std::integral_constant<uint32_t, kBegin>{});
        static_for<kBegin + 1, kEnd>(f);
    }
}

}  // namespace sm120
