#pragma once
// Small helpers usable on host and device: integer rounding, compile-time loops, register-array fills and copies.

#include <type_traits>
#include "sm120_arch.cuh"

namespace sm120 {

template <typename T>
SM120_HOST_DEVICE constexpr T ceil_div(T a, T b) {
    return (a + b - 1) / b;
}

template <typename T>
SM120_HOST_DEVICE constexpr T align_up(T a, T b) {
    return ceil_div(a, b) * b;
}

// f(std::integral_constant<uint32_t, i>{}) for i = kBegin .. kEnd-1: a loop whose index can be a template
// argument (the block-scaled MMA selectors must be immediates).
template <uint32_t kBegin, uint32_t kEnd, typename F>
SM120_DEVICE void static_for(F&& f) {
    if constexpr (kBegin < kEnd) {
        f(std::integral_constant<uint32_t, kBegin>{});
        static_for<kBegin + 1, kEnd>(f);
    }
}

// Every element of a register array of any rank (accumulators, partial sums) set to v, fully unrolled.
template <typename T>
SM120_DEVICE void fill(T& x, T v) {
    x = v;
}

template <typename T, size_t N, typename V>
SM120_DEVICE void fill(T (&a)[N], V v) {
#pragma unroll
    for (size_t i = 0; i < N; ++i) fill(a[i], v);
}

// A register array of any rank copied element by element from another of the same shape, fully unrolled.
template <typename T>
SM120_DEVICE void assign(T& dst, const T& src) {
    dst = src;
}

template <typename T, size_t N>
SM120_DEVICE void assign(T (&dst)[N], const T (&src)[N]) {
#pragma unroll
    for (size_t i = 0; i < N; ++i) assign(dst[i], src[i]);
}

}  // namespace sm120
