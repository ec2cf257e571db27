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
inline RowSoftmax exp_row(const float* x, std::int64_t C, float inv_t, float* e) {
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
// when g is not null (S = sum_c v_c p_c). es and ep are scratch rows of length C.
EDGEFD_MULTIVERSION
float kl_row(const float* s, const float* t, std::int64_t C, float inv_t, const float* v, bool teacher_is_prob,
             float coef, float* es, float* ep, float* g) {
    const RowSoftmax q = exp_row(s, C, inv_t, es);
    float row = 0.0f, weighted_p = 0.0f;
    if (teacher_is_prob) {
#pragma omp simd reduction(+ : row, weighted_p)
        for (std::int64_t c = 0; c < C; ++c) {
            const float p = t[c];
            const float log_q = s[c] * inv_t - q.shift - q.log_sum;
            row += p > 0.0f ? v[c] * p * (fast_log(p) - log_q) : 0.0f;  // 0 log 0 = 0
            weighted_p += v[c] * p;
            ep[c] = p;
        }
    } else {
        const RowSoftmax p_row = exp_row(t, C, inv_t, ep);
        const float inv_sum = 1.0f / p_row.sum;
#pragma omp simd reduction(+ : row, weighted_p)
        for (std::int64_t c = 0; c < C; ++c) {
            const float p = ep[c] * inv_sum;
            const float log_p = t[c] * inv_t - p_row.shift - p_row.log_sum;
            const float log_q = s[c] * inv_t - q.shift - q.log_sum;
            row += v[c] * p * (log_p - log_q);
            weighted_p += v[c] * p;
            ep[c] = p;
        }
    }
    if (g) {
        const float inv_sum_q = 1.0f / q.sum;
#pragma omp simd
        for (std::int64_t c = 0; c < C; ++c) g[c] = coef * (es[c] * inv_sum_q * weighted_p - v[c] * ep[c]);
    }
    return row;
}

}  // namespace

double weighted_kl_forward(const float* student, const float* teacher, std::int64_t B, std::int64_t C,
                           float temperature, const float* sample_weight, const float* class_weight,
                           bool teacher_is_prob, float* grad) {
    const float inv_t = 1.0f / temperature;
    // d loss / d student_ic = T/B * w_i * (q_ic S_i - v_c p_ic)
    const float grad_scale = temperature / static_cast<float>(B);
    // Unit class weights as a real array keep the inner loops free of branches (and vectorised).
    std::vector<float> unit_weights;
    if (!class_weight) {
        unit_weights.assign(C, 1.0f);
        class_weight = unit_weights.data();
    }
    double total = 0.0;

#pragma omp parallel reduction(+ : total)
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
