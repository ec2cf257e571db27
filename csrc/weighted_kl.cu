// Weighted KL distillation loss on CUDA: one block per row, forward and gradient in one launch.
// Same maths as weighted_kl.cpp (see kernels.hpp); the loss is accumulated in double.
#include "cuda_common.cuh"

namespace edgefd::cuda {

namespace {

// Row i: its block computes both softmaxes' shifts and sums, adds w_i * row into *loss (scaled
// by T^2/B) and writes coef * (q_c S - v_c p_c) into grad (S = sum_c v_c p_c).
__global__ void weighted_kl_rows(const float* __restrict__ student, const float* __restrict__ teacher,
                                 std::int64_t C, float inv_t, const float* __restrict__ sample_weight,
                                 const float* __restrict__ class_weight, bool teacher_is_prob, float grad_scale,
                                 double loss_scale, float* __restrict__ grad, double* __restrict__ loss) {
    __shared__ float scratch[32];
    const std::int64_t i = blockIdx.x;
    const float* s = student + i * C;
    const float* t = teacher + i * C;

    float max_s = -INFINITY, max_t = -INFINITY;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        max_s = fmaxf(max_s, s[c]);
        if (!teacher_is_prob) max_t = fmaxf(max_t, t[c]);
    }
    max_s = block_max(max_s, scratch);
    if (!teacher_is_prob) max_t = block_max(max_t, scratch);
    const float shift_s = max_s * inv_t, shift_t = max_t * inv_t;

    float sum_s = 0.0f, sum_t = 0.0f;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        sum_s += expf(s[c] * inv_t - shift_s);
        if (!teacher_is_prob) sum_t += expf(t[c] * inv_t - shift_t);
    }
    sum_s = block_sum(sum_s, scratch);
    if (!teacher_is_prob) sum_t = block_sum(sum_t, scratch);
    const float log_sum_s = logf(sum_s), log_sum_t = teacher_is_prob ? 0.0f : logf(sum_t);

    // row = sum_c v_c p_c (log p_c - log q_c); weighted = sum_c v_c p_c
    float row = 0.0f, weighted = 0.0f;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const float v = class_weight ? class_weight[c] : 1.0f;
        const float log_q = s[c] * inv_t - shift_s - log_sum_s;
        float p, log_p;
        if (teacher_is_prob) {
            p = t[c];
            log_p = p > 0.0f ? logf(p) : 0.0f;
        } else {
            log_p = t[c] * inv_t - shift_t - log_sum_t;
            p = expf(log_p);
        }
        row += p > 0.0f ? v * p * (log_p - log_q) : 0.0f;
        weighted += v * p;
    }
    row = block_sum(row, scratch);
    weighted = block_sum(weighted, scratch);

    const float w = sample_weight ? sample_weight[i] : 1.0f;
    if (threadIdx.x == 0) atomicAdd(loss, loss_scale * static_cast<double>(w) * static_cast<double>(row));
    if (grad) {
        const float coef = grad_scale * w;
        float* g = grad + i * C;
        for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            const float v = class_weight ? class_weight[c] : 1.0f;
            const float q = expf(s[c] * inv_t - shift_s - log_sum_s);
            const float p = teacher_is_prob ? t[c] : expf(t[c] * inv_t - shift_t - log_sum_t);
            g[c] = coef * (q * weighted - v * p);
        }
    }
}

}  // namespace

void weighted_kl_forward(const float* student, const float* teacher, std::int64_t B, std::int64_t C,
                         float temperature, const float* sample_weight, const float* class_weight,
                         bool teacher_is_prob, float* grad, double* loss, void* stream) {
    if (B <= 0 || C <= 0) throw KernelError("student_logits: empty batch or class dimension");
    if (B > 2147483647) throw KernelError("student_logits: more than 2^31 - 1 rows");
    const float inv_t = 1.0f / temperature;
    const float grad_scale = temperature / static_cast<float>(B);  // T/B * w_i * (q S - v p)
    const double loss_scale = static_cast<double>(temperature) * temperature / static_cast<double>(B);
    weighted_kl_rows<<<static_cast<unsigned int>(B), row_threads(C), 0, as_stream(stream)>>>(
        student, teacher, C, inv_t, sample_weight, class_weight, teacher_is_prob, grad_scale, loss_scale, grad, loss);
    check_cuda(cudaGetLastError(), "weighted_kl launch");
}

}  // namespace edgefd::cuda
