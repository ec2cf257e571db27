// Vectorisable float32 exp and log.
//
// The kernels are bound by exp/log throughput, not by memory, when they call the scalar libm
// functions. These are the Cephes single-precision polynomials (about 1-2 ulp on the ranges the
// kernels use), written with plain arithmetic and bit casts so that the compiler can turn a loop
// over them into SIMD code on x86 (SSE/AVX) and ARM (NEON) alike.
#pragma once

#include <cstdint>

// The portable row loops are built from these helpers, which must be inlined for the loops to
// vectorise. On x86-64 with AVX2+FMA the kernels run hand-written AVX2 rows instead
// (simd_avx2.hpp); the portable loops serve ARM (NEON) and older x86 CPUs.
#if defined(__GNUC__)
#define EDGEFD_INLINE inline __attribute__((always_inline))
#else
#define EDGEFD_INLINE inline
#endif

namespace edgefd {

// __builtin_bit_cast (GCC 11+, Clang 9+) rather than memcpy: it keeps loops vectorisable.
EDGEFD_INLINE float bits_to_float(std::int32_t i) { return __builtin_bit_cast(float, i); }

EDGEFD_INLINE std::int32_t float_to_bits(float f) { return __builtin_bit_cast(std::int32_t, f); }

// exp(x); saturates at about 1.2e-38 below x = -87.3 (instead of 0) and at exp(88.4) above.
// Branch-free so that loops over it vectorise.
EDGEFD_INLINE float fast_exp(float x) {
    constexpr float kMax = 88.3762626647949f;
    constexpr float kMin = -87.3365447504f;  // below this 2^n would leave the normal range
    constexpr float kLog2e = 1.44269504088896341f;
    constexpr float kLn2Hi = 0.693359375f;
    constexpr float kLn2Lo = -2.12194440e-4f;
    constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
    x = x > kMax ? kMax : x;
    x = x < kMin ? kMin : x;
    const float fn = (x * kLog2e + kRound) - kRound;
    const float r = (x - fn * kLn2Hi) - fn * kLn2Lo;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * r * r + r + 1.0f;
    const std::int32_t n = static_cast<std::int32_t>(fn);
    return y * bits_to_float((n + 127) << 23);
}

// log(x) for finite x > 0 (normal range). x <= 0 gives a large negative number, never NaN;
// callers only pass positive sums and probabilities they have checked.
EDGEFD_INLINE float fast_log(float x) {
    constexpr float kSqrtHalf = 0.707106781186547524f;
    constexpr float kLn2Hi = 0.693359375f;
    constexpr float kLn2Lo = -2.12194440e-4f;
    x = x < 1.17549435e-38f ? 1.17549435e-38f : x;  // clamp to the smallest normal float
    const std::int32_t bits = float_to_bits(x);
    std::int32_t e = ((bits >> 23) & 0xff) - 126;
    float m = bits_to_float((bits & 0x007fffff) | 0x3f000000);  // mantissa in [0.5, 1)
    const bool small = m < kSqrtHalf;
    e = small ? e - 1 : e;
    m = small ? m + m - 1.0f : m - 1.0f;
    const float z = m * m;
    float p = 7.0376836292e-2f;
    p = p * m - 1.1514610310e-1f;
    p = p * m + 1.1676998740e-1f;
    p = p * m - 1.2420140846e-1f;
    p = p * m + 1.4249322787e-1f;
    p = p * m - 1.6668057665e-1f;
    p = p * m + 2.0000714765e-1f;
    p = p * m - 2.4999993993e-1f;
    p = p * m + 3.3333331174e-1f;
    const float fe = static_cast<float>(e);
    float y = m * z * p;
    y += fe * kLn2Lo;
    y -= 0.5f * z;
    return m + y + fe * kLn2Hi;
}

}  // namespace edgefd
