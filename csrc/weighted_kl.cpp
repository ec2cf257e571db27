// Weighted KL distillation loss, forward and backward fused in one pass over the rows.
#include <vector>

#include "fast_math.hpp"
#include "kernels.hpp"

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

EDGEFD_MULTIVERSION
float kl_row(const float* s, const float* t, std::int64_t C, float inv_t, const float* v, bool teacher_is_prob,
             float coef, float* es, float* ep, float* g) {
    if (teacher_is_prob)
        return v ? kl_row_probs<true>(s, t, C, inv_t, v, coef, es, g) : kl_row_probs<false>(s, t, C, inv_t, v, coef, es, g);
    return v ? kl_row_logits<true>(s, t, C, inv_t, v, coef, es, ep, g)
             : kl_row_logits<false>(s, t, C, inv_t, v, coef, es, ep, g);
}

}  // namespace

double weighted_kl_forward(const float* student, const float* teacher, std::int64_t B, std::int64_t C,
                           float temperature, const float* sample_weight, const float* class_weight,
                           bool teacher_is_prob, float* grad) {
    const float inv_t = 1.0f / temperature;
    // d loss / d student_ic = T/B * w_i * (q_ic S_i - v_c p_ic)
    const float grad_scale = temperature / static_cast<float>(B);
    double total = 0.0;

#pragma omp parallel reduction(+ : total) if (B * C >= kParallelGrain)
    {
        std::vector<float> es(C), ep(C);
#pragma omp for schedule(static)
        for (std::int64_t i = 0; i < B; ++i) {
            const float w = sample_weight ? sample_weight[i] : 1.0f;
            const float row = kl_row(student + i * C, teacher + i * C, C, inv_t, class_weight, teacher_is_prob,
                                     grad_scale * w, es.data(), ep.data(), grad ? grad + i * C : nullptr);
            total += static_cast<double>(w) * static_cast<double>(row);
        }
    }
    return total * static_cast<double>(temperature) * temperature / static_cast<double>(B);
}

}  // namespace edgefd
