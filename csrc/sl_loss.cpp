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
    // Student probs, K teacher probs, their sum, sign(q - mean). The AVX2 rows keep the softmax
    // numerators in q and p instead, and their sums (student, then the K teachers) in sums.
    std::vector<float> q, p, m, sg;
    std::vector<float> sums;
    Scratch(std::int64_t K, std::int64_t C)
        : q(padded_stride(C)), p(K * padded_stride(C)), m(padded_stride(C)), sg(padded_stride(C)), sums(K + 1) {}
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

// For N rows at once: out[n][0, C) = exp(x[n] - max x[n]), zeros after; sums[n] = their sum.
// The N rows' phases (maximum, exponentials, sum) run side by side, so that their dependency
// chains (the max and sum reductions, each exponential's ~10-deep polynomial) overlap instead of
// running one row after another. Unless `ahead` is 0, the max pass also asks for the cache lines
// of each input's row `ahead` floats further on (the next batch row), spread over the pass: the
// K + 1 inputs are K + 1 streams that the hardware prefetcher alone does not keep up with, and
// asking for all of a batch row's lines at once (as the portable loop does) measured slower.
template <int N>
EDGEFD_AVX2_INLINE void exp_rows(const float* const* x, std::int64_t C, const RowTail& tail, float* const* out,
                                 float* sums, std::int64_t ahead) {
    const __m256 scale = _mm256_set1_ps(kLog2e), lowest = _mm256_set1_ps(-__builtin_inff());
    const std::int64_t full = C / kLanes * kLanes;
    __m256 max[N], sum[N];
    for (int n = 0; n < N; ++n) max[n] = lowest;
    for (std::int64_t c = 0; c < full; c += kLanes)
        for (int n = 0; n < N; ++n) {
            if (ahead && c % 16 == 0) _mm_prefetch(reinterpret_cast<const char*>(x[n] + ahead + c), _MM_HINT_T0);
            max[n] = _mm256_max_ps(max[n], _mm256_loadu_ps(x[n] + c));
        }
    for (int n = 0; n < N; ++n) {
        if (full < C) {
            const __m256 last = load_tail(x[n] + tail.offset, tail);
            max[n] = _mm256_max_ps(max[n], tail.masked ? _mm256_blendv_ps(lowest, last, _mm256_castsi256_ps(tail.keep))
                                                      : last);
        }
        max[n] = _mm256_set1_ps(hmax(max[n]));
        sum[n] = _mm256_setzero_ps();
    }
    for (std::int64_t c = 0; c < full; c += kLanes)
        for (int n = 0; n < N; ++n) {
            const __m256 e = exp2_8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x[n] + c), max[n]), scale));
            _mm256_storeu_ps(out[n] + c, e);
            sum[n] = _mm256_add_ps(sum[n], e);
        }
    for (int n = 0; n < N; ++n) {
        if (full < C) {
            const __m256 e = exp2_8(_mm256_mul_ps(_mm256_sub_ps(load_tail(x[n] + tail.offset, tail), max[n]), scale));
            _mm256_storeu_ps(out[n] + tail.offset, e);
            sum[n] = _mm256_add_ps(sum[n], keep_lanes(e, tail));
        }
        _mm256_storeu_ps(out[n] + C, _mm256_setzero_ps());
        sums[n] = hsum(sum[n]);
    }
}

// out = scale * a * (b - shift) over a row of C (a, b: padded scratch rows); unless `ahead` is 0,
// first asks for the lines of the output row `ahead` floats further on, for writing.
EDGEFD_AVX2_INLINE void grad_row(const float* a, const float* b, float shift, float scale, std::int64_t C,
                                 const RowTail& tail, float* out, std::int64_t ahead) {
    const __m256 vs = _mm256_set1_ps(shift), vk = _mm256_set1_ps(scale);
    const std::int64_t full = C / kLanes * kLanes;
    if (ahead) prefetch_row_for_write(out + ahead, C);
    for (std::int64_t c = 0; c < full; c += kLanes)
        _mm256_storeu_ps(out + c, _mm256_mul_ps(_mm256_mul_ps(vk, _mm256_loadu_ps(a + c)),
                                                _mm256_sub_ps(_mm256_loadu_ps(b + c), vs)));
    if (full < C) {
        const std::int64_t o = tail.offset;
        store_tail(out + o, tail, _mm256_mul_ps(_mm256_mul_ps(vk, _mm256_loadu_ps(a + o)),
                                                _mm256_sub_ps(_mm256_loadu_ps(b + o), vs)));
    }
}

// One column vector of the |q - mean| pass: normalises the student's exponentials q (in place),
// adds |q - mean| to row, writes sign(q - mean) (torch's: 1, -1, or 0 at 0) to sg, which the
// gradients need, and adds sign * q to sq.
EDGEFD_AVX2_INLINE void abs_diff(float* q, float* sg, __m256 inv_q, __m256 mean, __m256& row, __m256& sq) {
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 qc = _mm256_mul_ps(_mm256_loadu_ps(q), inv_q);
    const __m256 d = _mm256_sub_ps(qc, mean);
    row = _mm256_add_ps(row, _mm256_and_ps(d, abs_mask));
    const __m256 sign = _mm256_sub_ps(_mm256_and_ps(_mm256_cmp_ps(d, zero, _CMP_GT_OQ), one),
                                      _mm256_and_ps(_mm256_cmp_ps(d, zero, _CMP_LT_OQ), one));
    _mm256_storeu_ps(q, qc);
    _mm256_storeu_ps(sg, sign);
    sq = _mm256_fmadd_ps(sign, qc, sq);
}

// How many rows exp_rows works on side by side (the student's and the teachers' rows alike).
// Two measured fastest: 1.06-1.07x over four (whose chains spill registers) on two threads.
constexpr int kRowsAtOnce = 2;

EDGEFD_AVX2_FN float sl_row(const float* s, const float* t, std::int64_t K, std::int64_t C, std::int64_t plane,
                            float inv_b, Scratch& w, float* gs, float* gt, std::int64_t ahead) {
    const RowTail tail = row_tail(C);
    const std::int64_t width = (C + 7) / 8 * 8;  // the scratch loops' extent
    const std::int64_t stride = padded_stride(C);
    // Row 0 is the student (into q), rows 1..K the teachers (into p): their unnormalised
    // exponentials, whose sums w.sums holds.
    const float* in[kRowsAtOnce];
    float* out[kRowsAtOnce];
    auto source = [&](std::int64_t r) { return r == 0 ? s : t + (r - 1) * plane; };
    auto target = [&](std::int64_t r) { return r == 0 ? w.q.data() : w.p.data() + (r - 1) * stride; };
    std::int64_t r = 0;
    for (; r + kRowsAtOnce <= K + 1; r += kRowsAtOnce) {
        for (int n = 0; n < kRowsAtOnce; ++n) in[n] = source(r + n), out[n] = target(r + n);
        exp_rows<kRowsAtOnce>(in, C, tail, out, w.sums.data() + r, ahead);
    }
    if (r <= K) {
        in[0] = source(r), out[0] = target(r);
        exp_rows<1>(in, C, tail, out, w.sums.data() + r, ahead);
    }
    // 1 / sum for the student; 1 / (K sum) for teacher k, so that sum_k e_k w_k is the mean.
    float* inv = w.sums.data();
    inv[0] = 1.0f / inv[0];
    for (std::int64_t k = 1; k <= K; ++k) inv[k] = 1.0f / (static_cast<float>(K) * inv[k]);

    float* q = w.q.data();
    float* sg = w.sg.data();
    const float* p = w.p.data();
    const __m256 inv_q = _mm256_set1_ps(inv[0]);
    const __m256 zero = _mm256_setzero_ps();
    __m256 row = zero, sq = zero;
    // Two column vectors at a time: each teacher weight is broadcast once for both, and the two
    // sums are independent chains.
    std::int64_t c = 0;
    for (; c + 2 * kLanes <= width; c += 2 * kLanes) {
        __m256 mean0 = zero, mean1 = zero;
        for (std::int64_t k = 0; k < K; ++k) {
            const __m256 weight = _mm256_broadcast_ss(inv + k + 1);
            mean0 = _mm256_fmadd_ps(_mm256_loadu_ps(p + k * stride + c), weight, mean0);
            mean1 = _mm256_fmadd_ps(_mm256_loadu_ps(p + k * stride + c + kLanes), weight, mean1);
        }
        abs_diff(q + c, sg + c, inv_q, mean0, row, sq);
        abs_diff(q + c + kLanes, sg + c + kLanes, inv_q, mean1, row, sq);
    }
    if (c < width) {
        __m256 mean = zero;
        for (std::int64_t k = 0; k < K; ++k)
            mean = _mm256_fmadd_ps(_mm256_loadu_ps(p + k * stride + c), _mm256_broadcast_ss(inv + k + 1), mean);
        abs_diff(q + c, sg + c, inv_q, mean, row, sq);
    }
    // d|q - m| / d s_c = q_c (sg_c - sum_c' sg_c' q_c')
    if (gs) grad_row(q, sg, hsum(sq), inv_b, C, tail, gs, ahead);
    if (gt) {
        // Teacher k's probabilities are p_k = e_k K inv_k, and d|q - m| / d t_kc =
        // -p_kc (sg_c - sum_c' sg_c' p_kc') / K; written with e_k so that p_k is never formed.
        for (std::int64_t k = 0; k < K; ++k) {
            const float* ek = p + k * stride;
            const float norm = static_cast<float>(K) * inv[k + 1];
            __m256 sp = zero;
            for (std::int64_t j = 0; j < width; j += kLanes)
                sp = _mm256_fmadd_ps(_mm256_loadu_ps(sg + j), _mm256_loadu_ps(ek + j), sp);
            grad_row(ek, sg, norm * hsum(sp), -inv_b * inv[k + 1], C, tail, gt + k * plane, ahead);
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
        if (avx2::available()) {
#pragma omp for schedule(static)
            for (std::int64_t i = 0; i < B; ++i)
                total += sl_avx2::sl_row(student + i * C, teacher + i * C, K, C, plane, inv_b, scratch,
                                         grad_student ? grad_student + i * C : nullptr,
                                         grad_teacher ? grad_teacher + i * C : nullptr,
                                         i + 1 < B ? C : 0);
        } else
#endif
        {
#pragma omp for schedule(static)
            for (std::int64_t i = 0; i < B; ++i) {
                if (i + 1 < B) prefetch_row(student, teacher, K, C, plane, grad_student, grad_teacher, i + 1);
                total += sl_row(student + i * C, teacher + i * C, K, C, plane, inv_b, scratch,
                                grad_student ? grad_student + i * C : nullptr,
                                grad_teacher ? grad_teacher + i * C : nullptr);
            }
        }
    }
    return total / static_cast<double>(B);
}

}  // namespace edgefd
