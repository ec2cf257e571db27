// FedZKT's SL loss (L1 between the student's and the teachers' mean probabilities), fused
// forward and backward for the student and, when asked, for every teacher.
#include <algorithm>
#include <vector>

#include "fast_math.hpp"
#include "kernels.hpp"
#include "simd_avx2.hpp"

namespace edgefd {

namespace {

// Writes exp(x_c - max x) into out and returns their sum (softmax = out / sum).
EDGEFD_INLINE float exp_row(const float* x, std::int64_t C, float* out) {
    float mx = x[0];
#pragma omp simd reduction(max : mx)
    for (std::int64_t c = 0; c < C; ++c) mx = x[c] > mx ? x[c] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t c = 0; c < C; ++c) {
        out[c] = fast_exp(x[c] - mx);
        sum += out[c];
    }
    return sum;
}

// Scratch rows are padded (see kl_avx2's RowTail): C rounded up to a multiple of 8, plus 8.
std::int64_t padded_stride(std::int64_t C) { return (C + 7) / 8 * 8 + 8; }

struct Scratch {
    std::vector<float> q, p, m, sg;  // student probs, K teacher probs, their sum, sign(q - mean)
    Scratch(std::int64_t K, std::int64_t C)
        : q(padded_stride(C)), p(K * padded_stride(C)), m(padded_stride(C)), sg(padded_stride(C)) {}
};

// One row i: returns sum_c |q_c - m_c|; writes the student's and teachers' gradient rows when
// asked. `plane` is the stride between teachers (B * C).
float sl_row(const float* s, const float* t, std::int64_t K, std::int64_t C, std::int64_t plane, float inv_b,
             Scratch& w, float* gs, float* gt) {
    float* q = w.q.data();
    float* m = w.m.data();
    float* sg = w.sg.data();
    const float inv_q = 1.0f / exp_row(s, C, q);
#pragma omp simd
    for (std::int64_t c = 0; c < C; ++c) q[c] *= inv_q;
    std::fill(w.m.begin(), w.m.end(), 0.0f);
    for (std::int64_t k = 0; k < K; ++k) {
        // The teacher's probabilities are kept only when its gradient is wanted, otherwise they
        // go straight into the running mean.
        float* pk = w.p.data() + (gt ? k * C : 0);
        const float inv = 1.0f / exp_row(t + k * plane, C, pk);
        if (gt) {
#pragma omp simd
            for (std::int64_t c = 0; c < C; ++c) {
                pk[c] *= inv;
                m[c] += pk[c];
            }
        } else {
#pragma omp simd
            for (std::int64_t c = 0; c < C; ++c) m[c] += pk[c] * inv;
        }
    }
    const float inv_k = 1.0f / static_cast<float>(K);
    float row = 0.0f, sq = 0.0f;
#pragma omp simd reduction(+ : row, sq)
    for (std::int64_t c = 0; c < C; ++c) {
        const float d = q[c] - m[c] * inv_k;
        row += d > 0.0f ? d : -d;
        sg[c] = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f);  // torch's sign: 0 at 0
        sq += sg[c] * q[c];
    }
    if (gs) {
        // d|q - m| / d s_c = q_c (sg_c - sum_c' sg_c' q_c')
#pragma omp simd
        for (std::int64_t c = 0; c < C; ++c) gs[c] = inv_b * q[c] * (sg[c] - sq);
    }
    if (gt) {
        for (std::int64_t k = 0; k < K; ++k) {
            const float* pk = w.p.data() + k * C;
            float sp = 0.0f;
#pragma omp simd reduction(+ : sp)
            for (std::int64_t c = 0; c < C; ++c) sp += sg[c] * pk[c];
            float* g = gt + k * plane;
#pragma omp simd
            for (std::int64_t c = 0; c < C; ++c) g[c] = -inv_b * inv_k * pk[c] * (sg[c] - sp);
        }
    }
    return row;
}


#if EDGEFD_AVX2
// sl_row with AVX2 intrinsics (see simd_avx2.hpp). Every scratch row holds its C values and
// zeros up to padded_stride(C), so the loops over scratch rows run over whole vectors (a zero
// pads q - mean with zeros, whose sign is 0); only the inputs and the gradient rows need
// RowTail's handling of the last, partial vector.
namespace sl_avx2 {

using namespace edgefd::avx2;

// out[0, C) = exp(x - max x), zeros after; returns their sum.
EDGEFD_AVX2_INLINE float exp_row(const float* x, std::int64_t C, const RowTail& tail, float* out) {
    const __m256 scale = _mm256_set1_ps(kLog2e), max = _mm256_set1_ps(row_max(x, C));
    const std::int64_t full = C / kLanes * kLanes;
    __m256 sum = _mm256_setzero_ps();
    for (std::int64_t c = 0; c < full; c += kLanes) {
        const __m256 e = exp2_8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + c), max), scale));
        _mm256_storeu_ps(out + c, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (full < C) {
        const __m256 e = exp2_8(_mm256_mul_ps(_mm256_sub_ps(load_tail(x + tail.offset, tail), max), scale));
        _mm256_storeu_ps(out + tail.offset, e);
        sum = _mm256_add_ps(sum, keep_lanes(e, tail));
    }
    _mm256_storeu_ps(out + C, _mm256_setzero_ps());
    return hsum(sum);
}

// out = scale * a * (b - shift) over a row of C (a, b: padded scratch rows).
EDGEFD_AVX2_INLINE void grad_row(const float* a, const float* b, float shift, float scale, std::int64_t C,
                                 const RowTail& tail, float* out) {
    const __m256 vs = _mm256_set1_ps(shift), vk = _mm256_set1_ps(scale);
    const std::int64_t full = C / kLanes * kLanes;
    for (std::int64_t c = 0; c < full; c += kLanes)
        _mm256_storeu_ps(out + c, _mm256_mul_ps(_mm256_mul_ps(vk, _mm256_loadu_ps(a + c)),
                                                _mm256_sub_ps(_mm256_loadu_ps(b + c), vs)));
    if (full < C) {
        const std::int64_t o = tail.offset;
        store_tail(out + o, tail, _mm256_mul_ps(_mm256_mul_ps(vk, _mm256_loadu_ps(a + o)),
                                                _mm256_sub_ps(_mm256_loadu_ps(b + o), vs)));
    }
}

EDGEFD_AVX2_FN float sl_row(const float* s, const float* t, std::int64_t K, std::int64_t C, std::int64_t plane,
                            float inv_b, Scratch& w, float* gs, float* gt) {
    const RowTail tail = row_tail(C);
    const std::int64_t width = (C + 7) / 8 * 8;  // the scratch loops' extent
    float* q = w.q.data();
    float* m = w.m.data();
    float* sg = w.sg.data();
    const __m256 inv_q = _mm256_set1_ps(1.0f / exp_row(s, C, tail, q));
    for (std::int64_t c = 0; c < width; c += kLanes) _mm256_storeu_ps(m + c, _mm256_setzero_ps());
    for (std::int64_t k = 0; k < K; ++k) {
        // The teacher's probabilities are kept only when its gradient is wanted, otherwise they
        // go straight into the running sum.
        float* pk = w.p.data() + (gt ? k * padded_stride(C) : 0);
        const __m256 inv = _mm256_set1_ps(1.0f / exp_row(t + k * plane, C, tail, pk));
        for (std::int64_t c = 0; c < width; c += kLanes) {
            const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(pk + c), inv);
            if (gt) _mm256_storeu_ps(pk + c, p);
            _mm256_storeu_ps(m + c, _mm256_add_ps(_mm256_loadu_ps(m + c), p));
        }
    }
    const __m256 inv_k = _mm256_set1_ps(1.0f / static_cast<float>(K));
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 row = zero, sq = zero;
    for (std::int64_t c = 0; c < width; c += kLanes) {
        const __m256 qc = _mm256_mul_ps(_mm256_loadu_ps(q + c), inv_q);
        const __m256 d = _mm256_fnmadd_ps(_mm256_loadu_ps(m + c), inv_k, qc);
        row = _mm256_add_ps(row, _mm256_and_ps(d, abs_mask));
        // torch's sign: 1, -1, or 0 at 0
        const __m256 sign = _mm256_sub_ps(_mm256_and_ps(_mm256_cmp_ps(d, zero, _CMP_GT_OQ), one),
                                          _mm256_and_ps(_mm256_cmp_ps(d, zero, _CMP_LT_OQ), one));
        _mm256_storeu_ps(q + c, qc);
        _mm256_storeu_ps(sg + c, sign);
        sq = _mm256_fmadd_ps(sign, qc, sq);
    }
    // d|q - m| / d s_c = q_c (sg_c - sum_c' sg_c' q_c')
    if (gs) grad_row(q, sg, hsum(sq), inv_b, C, tail, gs);
    if (gt) {
        for (std::int64_t k = 0; k < K; ++k) {
            const float* pk = w.p.data() + k * padded_stride(C);
            __m256 sp = zero;
            for (std::int64_t c = 0; c < width; c += kLanes)
                sp = _mm256_fmadd_ps(_mm256_loadu_ps(sg + c), _mm256_loadu_ps(pk + c), sp);
            grad_row(pk, sg, hsum(sp), -inv_b / static_cast<float>(K), C, tail, gt + k * plane);
        }
    }
    return hsum(row);
}

}  // namespace sl_avx2
#endif

// Asks for row i's cache lines (inputs, and the gradient rows to be written) ahead of its turn:
// the K + 1 input rows of a row are K + 1 separate streams, which the hardware prefetcher alone
// did not keep up with.
void prefetch_row(const float* s, const float* t, std::int64_t K, std::int64_t C, std::int64_t plane,
                  float* gs, float* gt, std::int64_t i) {
    const std::int64_t bytes = C * static_cast<std::int64_t>(sizeof(float));
    const char* row = reinterpret_cast<const char*>(s + i * C);
    for (std::int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b);
    for (std::int64_t k = 0; k < K; ++k) {
        row = reinterpret_cast<const char*>(t + k * plane + i * C);
        for (std::int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b);
    }
    if (gs) {
        char* out = reinterpret_cast<char*>(gs + i * C);
        for (std::int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(out + b, 1);
    }
    if (gt) {
        for (std::int64_t k = 0; k < K; ++k) {
            char* out = reinterpret_cast<char*>(gt + k * plane + i * C);
            for (std::int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(out + b, 1);
        }
    }
}

}  // namespace

double sl_loss_forward(const float* student, const float* teacher, std::int64_t K, std::int64_t B,
                       std::int64_t C, float* grad_student, float* grad_teacher) {
    const std::int64_t plane = B * C;
    const float inv_b = 1.0f / static_cast<float>(B);
    double total = 0.0;

#pragma omp parallel reduction(+ : total) if ((K + 1) * B * C >= kParallelGrain)
    {
        Scratch scratch(K, C);
#if EDGEFD_AVX2
        const auto row_fn = avx2::available() ? sl_avx2::sl_row : sl_row;
#else
        const auto row_fn = sl_row;
#endif
#pragma omp for schedule(static)
        for (std::int64_t i = 0; i < B; ++i) {
            if (i + 1 < B) prefetch_row(student, teacher, K, C, plane, grad_student, grad_teacher, i + 1);
            total += row_fn(student + i * C, teacher + i * C, K, C, plane, inv_b, scratch,
                            grad_student ? grad_student + i * C : nullptr,
                            grad_teacher ? grad_teacher + i * C : nullptr);
        }
    }
    return total / static_cast<double>(B);
}

}  // namespace edgefd
