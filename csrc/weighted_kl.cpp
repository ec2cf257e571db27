// Weighted KL distillation loss, forward and backward fused in one pass over the rows.
#include <vector>

#include "fast_math.hpp"
#include "kernels.hpp"
#include "simd_avx2.hpp"

namespace edgefd {

namespace {

struct RowSoftmax {
    float shift;    // max(x) / T
    float log_sum;  // log sum_c exp(x_c / T - shift)
    float sum;      // sum_c exp(x_c / T - shift)
};

// Fills e[c] = exp(x[c] / T - max(x) / T).
EDGEFD_INLINE RowSoftmax exp_row(const float* x, std::int64_t C, float inv_t, float* e) {
    float mx = x[0];
#pragma omp simd reduction(max : mx)
    for (std::int64_t c = 0; c < C; ++c) mx = x[c] > mx ? x[c] : mx;
    const float shift = mx * inv_t;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t c = 0; c < C; ++c) {
        e[c] = fast_exp(x[c] * inv_t - shift);
        sum += e[c];
    }
    return {shift, fast_log(sum), sum};
}

// One row: returns sum_c v_c p_c (log p_c - log q_c); writes coef * (q_c S - v_c p_c) into g
// when g is not null (S = sum_c v_c p_c). es and ep are scratch rows of length C; v is null for
// unit class weights (a separate instantiation, so the common case loads no weights).
//
// With teacher logits, log p_c - log q_c = (t_c - s_c)/T - K, K = (shift + log-sum of the teacher)
// - (the student's), so the loss needs no per-element log. Three passes over the row: both
// maxima; both exponentials (two independent chains in one loop, which the CPU overlaps) with
// their sums; the gradient.
template <bool kWeighted>
EDGEFD_INLINE float kl_row_logits(const float* s, const float* t, std::int64_t C, float inv_t, const float* v,
                                  float coef, float* es, float* ep, float* g) {
    float max_s = s[0], max_t = t[0];
#pragma omp simd reduction(max : max_s, max_t)
    for (std::int64_t c = 0; c < C; ++c) {
        max_s = s[c] > max_s ? s[c] : max_s;
        max_t = t[c] > max_t ? t[c] : max_t;
    }
    const float shift_s = max_s * inv_t, shift_t = max_t * inv_t;
    float sum_s = 0.0f, sum_t = 0.0f, weighted = 0.0f, gap = 0.0f;
#pragma omp simd reduction(+ : sum_s, sum_t, weighted, gap)
    for (std::int64_t c = 0; c < C; ++c) {
        const float eq = fast_exp(s[c] * inv_t - shift_s);
        const float e = fast_exp(t[c] * inv_t - shift_t);
        const float vc = kWeighted ? v[c] : 1.0f;
        es[c] = eq;
        ep[c] = e;
        sum_s += eq;
        sum_t += e;
        weighted += vc * e;
        gap += vc * e * (t[c] - s[c]);
    }
    const float p_scale = 1.0f / sum_t;
    const float k = (shift_t + fast_log(sum_t)) - (shift_s + fast_log(sum_s));
    const float weighted_p = weighted * p_scale;
    if (g) {
        const float qv_scale = coef * weighted_p / sum_s;
        const float pv_scale = coef * p_scale;
#pragma omp simd
        for (std::int64_t c = 0; c < C; ++c) {
            const float vc = kWeighted ? v[c] : 1.0f;
            g[c] = qv_scale * es[c] - pv_scale * vc * ep[c];
        }
    }
    return (gap * inv_t - k * weighted) * p_scale;
}

// The same for a teacher given as probabilities (0 log 0 = 0).
template <bool kWeighted>
EDGEFD_INLINE float kl_row_probs(const float* s, const float* p, std::int64_t C, float inv_t, const float* v,
                                 float coef, float* es, float* g) {
    const RowSoftmax q = exp_row(s, C, inv_t, es);
    float row = 0.0f, weighted_p = 0.0f;
#pragma omp simd reduction(+ : row, weighted_p)
    for (std::int64_t c = 0; c < C; ++c) {
        const float vc = kWeighted ? v[c] : 1.0f;
        const float log_q = s[c] * inv_t - q.shift - q.log_sum;
        row += p[c] > 0.0f ? vc * p[c] * (fast_log(p[c]) - log_q) : 0.0f;
        weighted_p += vc * p[c];
    }
    if (g) {
        const float q_scale = coef * weighted_p / q.sum;
#pragma omp simd
        for (std::int64_t c = 0; c < C; ++c) {
            const float vc = kWeighted ? v[c] : 1.0f;
            g[c] = q_scale * es[c] - coef * vc * p[c];
        }
    }
    return row;
}

float kl_row(const float* s, const float* t, std::int64_t C, float inv_t, const float* v, bool teacher_is_prob,
             float coef, float* es, float* ep, float* g) {
    if (teacher_is_prob)
        return v ? kl_row_probs<true>(s, t, C, inv_t, v, coef, es, g) : kl_row_probs<false>(s, t, C, inv_t, v, coef, es, g);
    return v ? kl_row_logits<true>(s, t, C, inv_t, v, coef, es, ep, g)
             : kl_row_logits<false>(s, t, C, inv_t, v, coef, es, ep, g);
}

// What the row functions need to know about the call.
struct KlProblem {
    const float* student;
    const float* teacher;
    std::int64_t B;
    std::int64_t C;
    float inv_t;
    const float* sample_weight;  // null: all 1
    const float* class_weight;   // null: all 1
    bool teacher_is_prob;
    float grad_scale;  // T / B
    float* grad;       // null: forward only
};

// Rows handled together. The AVX2 path runs each phase (maxima, exponentials, per-row scalars,
// gradient) over all rows of a block before the next phase, so that the rows' latency chains
// overlap instead of running one after the other; the block's scratch stays in L1.
constexpr std::int64_t kMaxBlockRows = 16;

std::int64_t padded(std::int64_t C) { return (C + 7) / 8 * 8; }

std::int64_t block_rows(std::int64_t C) {
    const std::int64_t rows = 4096 / padded(C);  // two scratch rows per row: 32 KiB per block
    return rows < 1 ? 1 : (rows > kMaxBlockRows ? kMaxBlockRows : rows);
}

// Rows [first, first + n): returns sum_i w_i * row_i. es and ep hold n padded rows.
double kl_block(const KlProblem& k, std::int64_t first, std::int64_t n, float* es, float* ep) {
    double total = 0.0;
    for (std::int64_t i = first; i < first + n; ++i) {
        const float w = k.sample_weight ? k.sample_weight[i] : 1.0f;
        const float row = kl_row(k.student + i * k.C, k.teacher + i * k.C, k.C, k.inv_t, k.class_weight,
                                 k.teacher_is_prob, k.grad_scale * w, es, ep, k.grad ? k.grad + i * k.C : nullptr);
        total += static_cast<double>(w) * static_cast<double>(row);
    }
    return total;
}

#if EDGEFD_AVX2
// The same rows with AVX2 intrinsics (see simd_avx2.hpp). Scratch rows are padded to whole
// vectors; a row's last, partial vector follows RowTail.
namespace kl_avx2 {

using namespace edgefd::avx2;

template <bool kTail>
EDGEFD_AVX2_INLINE __m256 load(const float* p, const RowTail& tail) {
    return kTail ? load_tail(p, tail) : _mm256_loadu_ps(p);
}

template <bool kTail>
EDGEFD_AVX2_INLINE void store(float* p, const RowTail& tail, __m256 x) {
    if (kTail)
        store_tail(p, tail, x);
    else
        _mm256_storeu_ps(p, x);
}

struct LogitSums {
    // sum e_q, sum e_p, sum v e_p, sum v e_p ((t - max t) - (s - max s)): measuring t and s from
    // their row maxima keeps the loss exact where they cancel (C = 1, equal rows of logits 1e4).
    __m256 s, t, weighted, gap;
};

// Eight classes of a row with teacher logits: both exponentials (stored), and their sums.
template <bool kWeighted, bool kTail>
EDGEFD_AVX2_INLINE void logits_step(const float* s, const float* t, const float* v, const RowTail& tail,
                                    __m256 scale, __m256 max_s, __m256 max_t, float* es, float* ep,
                                    LogitSums& acc) {
    const __m256 xs = load<kTail>(s, tail), xt = load<kTail>(t, tail);
    const __m256 ds = _mm256_sub_ps(xs, max_s), dt = _mm256_sub_ps(xt, max_t);
    const __m256 eq = exp2_8(_mm256_mul_ps(ds, scale));
    const __m256 e = exp2_8(_mm256_mul_ps(dt, scale));
    _mm256_storeu_ps(es, eq);
    _mm256_storeu_ps(ep, e);
    const __m256 eq_new = kTail ? keep_lanes(eq, tail) : eq;
    const __m256 e_new = kTail ? keep_lanes(e, tail) : e;
    acc.s = _mm256_add_ps(acc.s, eq_new);
    acc.t = _mm256_add_ps(acc.t, e_new);
    __m256 ev = e_new;
    if (kWeighted) {
        ev = _mm256_mul_ps(e_new, load<kTail>(v, tail));
        acc.weighted = _mm256_add_ps(acc.weighted, ev);
    }
    acc.gap = _mm256_fmadd_ps(ev, _mm256_sub_ps(dt, ds), acc.gap);
}

// g = qv_scale e_q - pv_scale v e_p over eight classes.
template <bool kWeighted, bool kTail>
EDGEFD_AVX2_INLINE void logits_grad_step(const float* es, const float* ep, const float* v, const RowTail& tail,
                                         __m256 qv_scale, __m256 pv_scale, float* g) {
    __m256 pv = _mm256_mul_ps(pv_scale, _mm256_loadu_ps(ep));
    if (kWeighted) pv = _mm256_mul_ps(pv, load<kTail>(v, tail));
    store<kTail>(g, tail, _mm256_fmsub_ps(qv_scale, _mm256_loadu_ps(es), pv));
}

// kl_row_logits for a block of rows, phase by phase (see kMaxBlockRows).
template <bool kWeighted>
EDGEFD_AVX2_INLINE double block_logits(const KlProblem& k, std::int64_t first, std::int64_t n, float* es,
                                       float* ep) {
    const std::int64_t C = k.C, stride = padded(C), full = C / kLanes * kLanes;
    const RowTail tail = row_tail(C);
    const std::int64_t o = tail.offset;
    const __m256 scale = _mm256_set1_ps(k.inv_t * kLog2e);
    const float* v = k.class_weight;
    float max_s[kMaxBlockRows], max_t[kMaxBlockRows];
    for (std::int64_t r = 0; r < n; ++r) {
        max_s[r] = row_max(k.student + (first + r) * C, C);
        max_t[r] = row_max(k.teacher + (first + r) * C, C);
    }
    float sum_s[kMaxBlockRows], sum_t[kMaxBlockRows], weighted[kMaxBlockRows], gap[kMaxBlockRows];
    for (std::int64_t r = 0; r < n; ++r) {
        const float* s = k.student + (first + r) * C;
        const float* t = k.teacher + (first + r) * C;
        float* es_r = es + r * stride;
        float* ep_r = ep + r * stride;
        // The next block's rows (the hardware prefetcher alone left the maxima and the gradient
        // stores waiting for memory: 1.09-1.2x from this at 65536 x 100).
        if (first + n + r < k.B) {
            prefetch_row(s + n * C, C);
            prefetch_row(t + n * C, C);
            if (k.grad) prefetch_row_for_write(k.grad + (first + n + r) * C, C);
        }
        const __m256 vs = _mm256_set1_ps(max_s[r]), vt = _mm256_set1_ps(max_t[r]);
        LogitSums acc{_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (std::int64_t c = 0; c < full; c += kLanes)
            logits_step<kWeighted, false>(s + c, t + c, v + c, tail, scale, vs, vt, es_r + c, ep_r + c, acc);
        if (full < C)
            logits_step<kWeighted, true>(s + o, t + o, v + o, tail, scale, vs, vt, es_r + o, ep_r + o, acc);
        sum_s[r] = hsum(acc.s);
        sum_t[r] = hsum(acc.t);
        weighted[r] = kWeighted ? hsum(acc.weighted) : sum_t[r];
        gap[r] = hsum(acc.gap);
    }
    double total = 0.0;
    float qv_scale[kMaxBlockRows], pv_scale[kMaxBlockRows];
    for (std::int64_t r = 0; r < n; ++r) {
        const float w = k.sample_weight ? k.sample_weight[first + r] : 1.0f;
        const float p_scale = 1.0f / sum_t[r];
        const float kk = fast_log(sum_t[r]) - fast_log(sum_s[r]);
        const float coef = k.grad_scale * w;
        qv_scale[r] = coef * weighted[r] * p_scale / sum_s[r];
        pv_scale[r] = coef * p_scale;
        const float row = (gap[r] * k.inv_t - kk * weighted[r]) * p_scale;
        total += static_cast<double>(w) * static_cast<double>(row);
    }
    if (k.grad) {
        for (std::int64_t r = 0; r < n; ++r) {
            float* g = k.grad + (first + r) * C;
            const float* es_r = es + r * stride;
            const float* ep_r = ep + r * stride;
            const __m256 qv = _mm256_set1_ps(qv_scale[r]), pv = _mm256_set1_ps(pv_scale[r]);
            for (std::int64_t c = 0; c < full; c += kLanes)
                logits_grad_step<kWeighted, false>(es_r + c, ep_r + c, v + c, tail, qv, pv, g + c);
            if (full < C) logits_grad_step<kWeighted, true>(es_r + o, ep_r + o, v + o, tail, qv, pv, g + o);
        }
    }
    return total;
}

struct ProbSums {
    __m256 q, plogp, pz, vp_kept, vp;  // sum e_q, sum' v p log p, sum' v p z, sum' v p, sum v p
};

// Eight classes of a row with teacher probabilities. With z = (s/T - shift) log2(e) and log q =
// z ln 2 - log sum e_q, the row is sum' v p log p - ln 2 sum' v p z + log(sum e_q) sum' v p,
// where sum' runs over the classes with p > 0 (0 log 0 = 0).
template <bool kWeighted, bool kTail>
EDGEFD_AVX2_INLINE void probs_step(const float* s, const float* p, const float* v, const RowTail& tail,
                                   __m256 scale, __m256 max, float* es, ProbSums& acc) {
    const __m256 xs = load<kTail>(s, tail), pc = load<kTail>(p, tail);
    const __m256 z = _mm256_mul_ps(_mm256_sub_ps(xs, max), scale);
    const __m256 e = exp2_8(z);
    _mm256_storeu_ps(es, e);
    acc.q = _mm256_add_ps(acc.q, kTail ? keep_lanes(e, tail) : e);
    __m256 vp = kWeighted ? _mm256_mul_ps(pc, load<kTail>(v, tail)) : pc;
    if (kTail) vp = keep_lanes(vp, tail);
    acc.vp = _mm256_add_ps(acc.vp, vp);
    const __m256 kept = _mm256_and_ps(vp, _mm256_cmp_ps(pc, _mm256_setzero_ps(), _CMP_GT_OQ));
    acc.vp_kept = _mm256_add_ps(acc.vp_kept, kept);
    acc.plogp = _mm256_fmadd_ps(kept, log8(pc), acc.plogp);
    acc.pz = _mm256_fmadd_ps(kept, z, acc.pz);
}

// g = q_scale e_q - coef v p over eight classes.
template <bool kWeighted, bool kTail>
EDGEFD_AVX2_INLINE void probs_grad_step(const float* es, const float* p, const float* v, const RowTail& tail,
                                        __m256 q_scale, __m256 coef, float* g) {
    __m256 vp = _mm256_mul_ps(coef, load<kTail>(p, tail));
    if (kWeighted) vp = _mm256_mul_ps(vp, load<kTail>(v, tail));
    store<kTail>(g, tail, _mm256_fmsub_ps(q_scale, _mm256_loadu_ps(es), vp));
}

// kl_row_probs for a block of rows, phase by phase.
template <bool kWeighted>
EDGEFD_AVX2_INLINE double block_probs(const KlProblem& k, std::int64_t first, std::int64_t n, float* es) {
    const std::int64_t C = k.C, stride = padded(C), full = C / kLanes * kLanes;
    const RowTail tail = row_tail(C);
    const std::int64_t o = tail.offset;
    const __m256 scale = _mm256_set1_ps(k.inv_t * kLog2e);
    const float* v = k.class_weight;
    float max[kMaxBlockRows];
    for (std::int64_t r = 0; r < n; ++r) max[r] = row_max(k.student + (first + r) * C, C);
    double total = 0.0;
    float q_scale[kMaxBlockRows], coef[kMaxBlockRows];
    for (std::int64_t r = 0; r < n; ++r) {
        const float* s = k.student + (first + r) * C;
        const float* p = k.teacher + (first + r) * C;
        float* es_r = es + r * stride;
        const __m256 vs = _mm256_set1_ps(max[r]);
        const __m256 zero = _mm256_setzero_ps();
        ProbSums acc{zero, zero, zero, zero, zero};
        for (std::int64_t c = 0; c < full; c += kLanes)
            probs_step<kWeighted, false>(s + c, p + c, v + c, tail, scale, vs, es_r + c, acc);
        if (full < C) probs_step<kWeighted, true>(s + o, p + o, v + o, tail, scale, vs, es_r + o, acc);
        const float sum_q = hsum(acc.q);
        constexpr float kLn2 = 0.693147180559945309f;
        const float row = hsum(acc.plogp) - kLn2 * hsum(acc.pz) + fast_log(sum_q) * hsum(acc.vp_kept);
        const float w = k.sample_weight ? k.sample_weight[first + r] : 1.0f;
        coef[r] = k.grad_scale * w;
        q_scale[r] = coef[r] * hsum(acc.vp) / sum_q;
        total += static_cast<double>(w) * static_cast<double>(row);
    }
    if (k.grad) {
        for (std::int64_t r = 0; r < n; ++r) {
            float* g = k.grad + (first + r) * C;
            const float* p = k.teacher + (first + r) * C;
            const float* es_r = es + r * stride;
            const __m256 qs = _mm256_set1_ps(q_scale[r]), cf = _mm256_set1_ps(coef[r]);
            for (std::int64_t c = 0; c < full; c += kLanes)
                probs_grad_step<kWeighted, false>(es_r + c, p + c, v + c, tail, qs, cf, g + c);
            if (full < C) probs_grad_step<kWeighted, true>(es_r + o, p + o, v + o, tail, qs, cf, g + o);
        }
    }
    return total;
}

EDGEFD_AVX2_FN double kl_block(const KlProblem& k, std::int64_t first, std::int64_t n, float* es, float* ep) {
    if (k.teacher_is_prob)
        return k.class_weight ? block_probs<true>(k, first, n, es) : block_probs<false>(k, first, n, es);
    return k.class_weight ? block_logits<true>(k, first, n, es, ep) : block_logits<false>(k, first, n, es, ep);
}

}  // namespace kl_avx2
#endif

}  // namespace

double weighted_kl_forward(const float* student, const float* teacher, std::int64_t B, std::int64_t C,
                           float temperature, const float* sample_weight, const float* class_weight,
                           bool teacher_is_prob, float* grad) {
    // d loss / d student_ic = T/B * w_i * (q_ic S_i - v_c p_ic)
    const KlProblem problem{student, teacher, B, C, 1.0f / temperature, sample_weight, class_weight, teacher_is_prob,
                            temperature / static_cast<float>(B), grad};
    const std::int64_t rows = block_rows(C);
    const std::int64_t blocks = (B + rows - 1) / rows;
#if EDGEFD_AVX2
    const auto block_fn = avx2::available() ? kl_avx2::kl_block : kl_block;
#else
    const auto block_fn = kl_block;
#endif
    double total = 0.0;

#pragma omp parallel reduction(+ : total) if (B * C >= kParallelGrain)
    {
        std::vector<float> es(rows * padded(C)), ep(rows * padded(C));
#pragma omp for schedule(static)
        for (std::int64_t b = 0; b < blocks; ++b) {
            const std::int64_t first = b * rows;
            total += block_fn(problem, first, first + rows <= B ? rows : B - first, es.data(), ep.data());
        }
    }
    return total * static_cast<double>(temperature) * temperature / static_cast<double>(B);
}

}  // namespace edgefd
