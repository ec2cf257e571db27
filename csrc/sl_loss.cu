// FedZKT's SL loss on CUDA: one block per row; the row's student probabilities and the signs of
// (q - mean teacher) live in shared memory, the teachers' probabilities are recomputed from their
// logits when needed (an exponential is cheaper than a second buffer). Same maths as sl_loss.cpp.
#include "cuda_common.cuh"

namespace edgefd::cuda {

namespace {

// Shared memory per block: q[C], sg[C], shift[K], inv_sum[K].
__global__ void sl_loss_rows(const float* __restrict__ student, const float* __restrict__ teacher, std::int64_t K,
                             std::int64_t B, std::int64_t C, float inv_b, float* __restrict__ grad_student,
                             float* __restrict__ grad_teacher, double* __restrict__ loss) {
    extern __shared__ float shared[];
    __shared__ float scratch[32];
    float* q = shared;
    float* sg = q + C;
    float* shift = sg + C;
    float* inv_sum = shift + K;
    const std::int64_t i = blockIdx.x;
    const std::int64_t plane = B * C;
    const float* s = student + i * C;

    float mx = -INFINITY;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) mx = fmaxf(mx, s[c]);
    mx = block_max(mx, scratch);
    float sum = 0.0f;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        q[c] = expf(s[c] - mx);
        sum += q[c];
    }
    sum = block_sum(sum, scratch);
    const float inv_q = 1.0f / sum;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) q[c] *= inv_q;

    for (std::int64_t k = 0; k < K; ++k) {
        const float* t = teacher + k * plane + i * C;
        float tm = -INFINITY;
        for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) tm = fmaxf(tm, t[c]);
        tm = block_max(tm, scratch);
        float ts = 0.0f;
        for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) ts += expf(t[c] - tm);
        ts = block_sum(ts, scratch);
        if (threadIdx.x == 0) {
            shift[k] = tm;
            inv_sum[k] = 1.0f / ts;
        }
    }
    __syncthreads();

    const float inv_k = 1.0f / static_cast<float>(K);
    float row = 0.0f, sq = 0.0f;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float m = 0.0f;
        for (std::int64_t k = 0; k < K; ++k) m += expf(teacher[k * plane + i * C + c] - shift[k]) * inv_sum[k];
        const float d = q[c] - m * inv_k;
        row += fabsf(d);
        sg[c] = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f);  // torch's sign: 0 at 0
        sq += sg[c] * q[c];
    }
    row = block_sum(row, scratch);
    sq = block_sum(sq, scratch);
    if (threadIdx.x == 0) atomicAdd(loss, static_cast<double>(row) / static_cast<double>(B));

    if (grad_student) {
        // d|q - m| / d s_c = q_c (sg_c - sum_c' sg_c' q_c')
        float* g = grad_student + i * C;
        for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) g[c] = inv_b * q[c] * (sg[c] - sq);
    }
    if (grad_teacher) {
        for (std::int64_t k = 0; k < K; ++k) {
            const float* t = teacher + k * plane + i * C;
            float sp = 0.0f;
            for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) sp += sg[c] * expf(t[c] - shift[k]) * inv_sum[k];
            sp = block_sum(sp, scratch);
            float* g = grad_teacher + k * plane + i * C;
            for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
                const float p = expf(t[c] - shift[k]) * inv_sum[k];
                g[c] = -inv_b * inv_k * p * (sg[c] - sp);
            }
        }
    }
}

}  // namespace

void sl_loss_forward(const float* student, const float* teacher, std::int64_t K, std::int64_t B, std::int64_t C,
                     float* grad_student, float* grad_teacher, double* loss, void* stream) {
    if (B <= 0 || C <= 0) throw KernelError("student_logits: empty batch or class dimension");
    if (K <= 0) throw KernelError("teacher_logits: no teachers (K = 0)");
    if (B > 2147483647) throw KernelError("student_logits: more than 2^31 - 1 rows");
    const std::int64_t shared_floats = 2 * C + 2 * K;
    if (shared_floats > 2 * kMaxClassesSharedRow)
        throw KernelError("sl_loss: C + K = " + std::to_string(C + K) + " is above the CUDA kernel's limit of " +
                          std::to_string(kMaxClassesSharedRow) + " (use the torch backend)");
    const float inv_b = 1.0f / static_cast<float>(B);
    sl_loss_rows<<<static_cast<unsigned int>(B), row_threads(C), shared_floats * sizeof(float), as_stream(stream)>>>(
        student, teacher, K, B, C, inv_b, grad_student, grad_teacher, loss);
    check_cuda(cudaGetLastError(), "sl_loss launch");
}

}  // namespace edgefd::cuda
