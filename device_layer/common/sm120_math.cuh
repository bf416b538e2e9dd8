#pragma once
// Small integer helpers usable on host and device.

#include "sm120_arch.cuh"

namespace sm120 {

template <typename T>
SM120_HOST_DEVICE constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }

template <typename T>
SM120_HOST_DEVICE constexpr T align_up(T a, T b) { return ceil_div(a, b) * b; }

SM120_HOST_DEVICE constexpr bool is_pow2(uint32_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace sm120
