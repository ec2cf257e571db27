// FedZKT's SL loss (L1 between the student's and the teachers' mean probabilities), fused
// forward and backward for the student and, when asked, for every teacher.
#include <algorithm>
#include <vector>

#include "fast_math.hpp"
#include "kernels.hpp"

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

struct Scratch {
    std::vector<float> q, p, m, sg;  // student probs, K teacher probs, their sum, sign(q - mean)
    Scratch(std::int64_t K, std::int64_t C) : q(C), p(K * C), m(C), sg(C) {}
};

// One row i: returns sum_c |q_c - m_c|; writes the student's and teachers' gradient rows when
// asked. `plane` is the stride between teachers (B * C).
EDGEFD_MULTIVERSION
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

}  // namespace

double sl_loss_forward(const float* student, const float* teacher, std::int64_t K, std::int64_t B,
                       std::int64_t C, float* grad_student, float* grad_teacher) {
    const std::int64_t plane = B * C;
    const float inv_b = 1.0f / static_cast<float>(B);
    double total = 0.0;

#pragma omp parallel reduction(+ : total) if ((K + 1) * B * C >= kParallelGrain)
    {
        Scratch scratch(K, C);
#pragma omp for schedule(static)
        for (std::int64_t i = 0; i < B; ++i) {
            total += sl_row(student + i * C, teacher + i * C, K, C, plane, inv_b, scratch,
                            grad_student ? grad_student + i * C : nullptr,
                            grad_teacher ? grad_teacher + i * C : nullptr);
        }
    }
    return total / static_cast<double>(B);
}

}  // namespace edgefd
