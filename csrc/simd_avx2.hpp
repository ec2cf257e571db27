// Hand-written AVX2+FMA versions of the kernels' row loops, chosen at run time on x86-64.
//
// GCC's vectoriser does turn the portable loops of fast_math.hpp into AVX2 code (when built for
// x86-64-v3), but it spills the polynomial constants, turns the clamps into compare-and-blend
// pairs and runs the last C % 8 elements of every row through the scalar exp. Written with
// intrinsics, an exponential is 14 vector instructions (exp2_8 below, with the scaling FMA),
// and a row's last, partial vector is one vector too (RowTail).
//
// Everything here is compiled for AVX2+FMA only (the target attribute), whatever the build's
// baseline; the kernels call `available()` once per call and otherwise run the portable loops,
// which ARM builds (NEON) and x86 CPUs without AVX2 use. EDGEFD_NO_MULTIVERSION turns this path
// off at build time.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(EDGEFD_NO_MULTIVERSION)
#define EDGEFD_AVX2 1
#else
#define EDGEFD_AVX2 0
#endif

#if EDGEFD_AVX2

#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

// For functions of the AVX2 path: compiled for AVX2+FMA whatever the build's baseline is.
#define EDGEFD_AVX2_FN __attribute__((target("avx2,fma")))
#define EDGEFD_AVX2_INLINE inline __attribute__((always_inline, target("avx2,fma")))

namespace edgefd::avx2 {

// True when the CPU runs AVX2 and FMA (checked once), unless the environment variable
// EDGEFD_KERNELS_PORTABLE is set to something other than "" or "0": then the portable loops run,
// which is how the tests check on x86 the code that ARM devices run.
inline bool available() {
    static const bool ok = [] {
        const char* portable = std::getenv("EDGEFD_KERNELS_PORTABLE");
        if (portable && *portable && std::strcmp(portable, "0") != 0) return false;
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }();
    return ok;
}

constexpr std::int64_t kLanes = 8;

// Lanes [0, n) set, n in [0, 8]: the mask of a row's last, partial vector.
EDGEFD_AVX2_INLINE __m256i tail_mask(std::int64_t n) {
    alignas(32) static const std::int32_t table[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(table + 8 - n));
}

EDGEFD_AVX2_INLINE float hsum(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

EDGEFD_AVX2_INLINE float hmax(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

// How a row's last, partial vector (C % 8 classes) is handled. With C >= 8 it is the row's
// last eight classes, overlapping the vector before: plain loads and stores (rewriting an
// element with the value it already holds is harmless), and `keep` selects the lanes not yet
// counted in sums. Only a row shorter than a vector uses masked loads and stores: vmaskmovps
// stores are microcoded and slow on AMD Zen (masking every row's tail that way cost 15-40 ns
// per row of 100 classes here).
struct RowTail {
    std::int64_t offset;  // first class of the last vector
    __m256i keep;         // lanes of that vector which are new
    bool masked;          // C < 8: masked loads and stores
};

EDGEFD_AVX2_INLINE RowTail row_tail(std::int64_t C) {
    if (C < kLanes) return {0, tail_mask(C), true};
    const __m256i old = tail_mask(kLanes - C % kLanes);
    return {C - kLanes, _mm256_xor_si256(old, _mm256_set1_epi32(-1)), false};
}

EDGEFD_AVX2_INLINE __m256 load_tail(const float* p, const RowTail& tail) {
    return tail.masked ? _mm256_maskload_ps(p, tail.keep) : _mm256_loadu_ps(p);
}

EDGEFD_AVX2_INLINE void store_tail(float* p, const RowTail& tail, __m256 x) {
    if (tail.masked)
        _mm256_maskstore_ps(p, tail.keep, x);
    else
        _mm256_storeu_ps(p, x);
}

EDGEFD_AVX2_INLINE __m256 keep_lanes(__m256 x, const RowTail& tail) {
    return _mm256_and_ps(x, _mm256_castsi256_ps(tail.keep));
}

// Asks for the cache lines of x[0, C) ahead of their use (for writing: the lines of an output
// row, so that the store does not wait for the line to be read).
EDGEFD_AVX2_INLINE void prefetch_row(const float* x, std::int64_t C) {
    const char* p = reinterpret_cast<const char*>(x);
    for (std::int64_t b = 0; b < C * static_cast<std::int64_t>(sizeof(float)); b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
}

EDGEFD_AVX2_INLINE void prefetch_row_for_write(float* x, std::int64_t C) {
    char* p = reinterpret_cast<char*>(x);
    for (std::int64_t b = 0; b < C * static_cast<std::int64_t>(sizeof(float)); b += 64) __builtin_prefetch(p + b, 1);
}

// The maximum of x[0, C), C >= 1.
EDGEFD_AVX2_INLINE float row_max(const float* x, std::int64_t C) {
    const __m256 lowest = _mm256_set1_ps(-__builtin_inff());
    __m256 m = lowest;
    const std::int64_t full = C / kLanes * kLanes;
    for (std::int64_t c = 0; c < full; c += kLanes) m = _mm256_max_ps(m, _mm256_loadu_ps(x + c));
    if (full < C) {
        const RowTail tail = row_tail(C);
        const __m256 last = load_tail(x + tail.offset, tail);
        m = _mm256_max_ps(m, tail.masked ? _mm256_blendv_ps(lowest, last, _mm256_castsi256_ps(tail.keep)) : last);
    }
    return hmax(m);
}

// 2^t for t <= 127; below t = -125 it saturates at 2^-125 (about 2.4e-38) instead of going
// to 0, as fast_exp does. The kernels compute exp((x - max x) / T) as 2^((x - max x) a) with
// a = log2(e) / T: x - max x is exact or nearly so, so t keeps float precision relative to
// itself even for logits of 1e4 (x / T - max / T would lose the small differences).
//
// n = round(t) comes from adding 1.5 * 2^23, which leaves n in the low mantissa bits; f = t - n
// lies in [-1/2, 1/2], where a degree-6 polynomial (fitted for relative error, 2e-9) gives 2^f;
// 2^n goes straight into the exponent field by an integer add (no multiply: the clamp keeps the
// result a normal float). Within 1.2 ulp of 2^t (measured over [-124, 0]), with about half the
// latency of the Cephes exp and its two-step reduction by ln 2, and fewer multiply-port
// instructions.
EDGEFD_AVX2_INLINE __m256 exp2_8(__m256 t) {
    const __m256 round = _mm256_set1_ps(12582912.0f);  // 1.5 * 2^23
    t = _mm256_max_ps(t, _mm256_set1_ps(-125.0f));
    const __m256 shifted = _mm256_add_ps(t, round);
    const __m256 f = _mm256_sub_ps(t, _mm256_sub_ps(shifted, round));
    const __m256 f2 = _mm256_mul_ps(f, f);
    // Estrin's scheme: (1 + c1 f) + f^2 ((c2 + c3 f) + f^2 ((c4 + c5 f) + c6 f^2))
    const __m256 lo = _mm256_fmadd_ps(_mm256_set1_ps(6.9314718246e-01f), f, _mm256_set1_ps(1.0f));
    const __m256 mid = _mm256_fmadd_ps(_mm256_set1_ps(5.5503323674e-02f), f, _mm256_set1_ps(2.4022647738e-01f));
    __m256 hi = _mm256_fmadd_ps(_mm256_set1_ps(1.3398875017e-03f), f, _mm256_set1_ps(9.6184369177e-03f));
    hi = _mm256_fmadd_ps(_mm256_set1_ps(1.5353361960e-04f), f2, hi);
    const __m256 p = _mm256_fmadd_ps(_mm256_fmadd_ps(hi, f2, mid), f2, lo);
    const __m256i exponent = _mm256_slli_epi32(_mm256_castps_si256(shifted), 23);
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), exponent));
}

constexpr float kLog2e = 1.44269504088896341f;

// log(x) for x > 0 (smaller values are clamped to the smallest normal float): the Cephes
// polynomial of fast_log, eight lanes at a time.
EDGEFD_AVX2_INLINE __m256 log8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    x = _mm256_max_ps(x, _mm256_set1_ps(1.17549435e-38f));
    const __m256i bits = _mm256_castps_si256(x);
    __m256 e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(126)));
    __m256 m = _mm256_castsi256_ps(
        _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x3f000000)));
    // m in [0.5, 1): below sqrt(1/2) use 2m - 1 and e - 1, else m - 1.
    const __m256 small = _mm256_cmp_ps(m, _mm256_set1_ps(0.707106781186547524f), _CMP_LT_OQ);
    e = _mm256_sub_ps(e, _mm256_and_ps(small, one));
    m = _mm256_sub_ps(_mm256_add_ps(m, _mm256_and_ps(small, m)), one);
    const __m256 z = _mm256_mul_ps(m, m);
    __m256 p = _mm256_set1_ps(7.0376836292e-2f);
    p = _mm256_fmadd_ps(p, m, _mm256_set1_ps(-1.1514610310e-1f));
    p = _mm256_fmadd_ps(p, m, _mm256_set1_ps(1.1676998740e-1f));
    p = _mm256_fmadd_ps(p, m, _mm256_set1_ps(-1.2420140846e-1f));
    p = _mm256_fmadd_ps(p, m, _mm256_set1_ps(1.4249322787e-1f));
    p = _mm256_fmadd_ps(p, m, _mm256_set1_ps(-1.6668057665e-1f));
    p = _mm256_fmadd_ps(p, m, _mm256_set1_ps(2.0000714765e-1f));
    p = _mm256_fmadd_ps(p, m, _mm256_set1_ps(-2.4999993993e-1f));
    p = _mm256_fmadd_ps(p, m, _mm256_set1_ps(3.3333331174e-1f));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(m, z), p);
    y = _mm256_fmadd_ps(e, _mm256_set1_ps(-2.12194440e-4f), y);
    y = _mm256_fnmadd_ps(_mm256_set1_ps(0.5f), z, y);
    return _mm256_fmadd_ps(e, _mm256_set1_ps(0.693359375f), _mm256_add_ps(m, y));
}

}  // namespace edgefd::avx2

#endif  // EDGEFD_AVX2
