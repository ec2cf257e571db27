// The hot loops of edgefd, on raw float32 / int64 buffers.
//
// Every function here trusts its caller (bindings.cpp) for shapes, dtypes and contiguity, but
// checks the values it reads on the way (labels, neighbour ids) and reports the first bad one
// through KernelError, which the bindings turn into a Python ValueError.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace edgefd {

// Work (elements touched) below which a kernel runs on the calling thread alone. Waking an
// OpenMP team costs more than a small batch takes, and its threads would then spin against
// torch's own pool during training steps.
constexpr std::int64_t kParallelGrain = 1 << 15;

struct KernelError : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

// Weighted KL(p || q) over rows, p from the teacher, q = softmax(student / T).
// Returns T^2/B * sum_i w_i sum_c v_c p_ic (log p_ic - log q_ic). When grad is not null it also
// writes d loss / d student (B x C), so backward is a scale by the incoming gradient.
double weighted_kl_forward(const float* student, const float* teacher, std::int64_t B, std::int64_t C,
                           float temperature, const float* sample_weight, const float* class_weight,
                           bool teacher_is_prob, float* grad);

// FedZKT's SL loss: 1/B sum_i sum_c |softmax(s)_ic - mean_k softmax(t_k)_ic|.
// grad_student (B x C) and grad_teacher (K x B x C) are written when not null.
double sl_loss_forward(const float* student, const float* teacher, std::int64_t K, std::int64_t B,
                       std::int64_t C, float* grad_student, float* grad_teacher);

// Per-class (weighted) mean of rows. means: num_classes x C, counts: rows per class.
// A class with no rows (or zero total weight) gets a zero row.
void labelwise_mean(const float* x, const std::int64_t* labels, std::int64_t N, std::int64_t C,
                    std::int64_t num_classes, const float* sample_weight, float* means,
                    std::int64_t* counts);

// Gradient of labelwise_mean w.r.t. x: grad_x[i] = grad_means[label_i] * w_i / W_label.
void labelwise_mean_backward(const float* grad_means, const std::int64_t* labels, std::int64_t N,
                             std::int64_t C, std::int64_t num_classes, const float* sample_weight,
                             float* grad_x);

// out[i] = mean of cache[j] over the ids j >= 0 in neighbours[i]; -1 means "none", all-none gives 0.
void gather_mean(const float* cache, std::int64_t M, std::int64_t C, const std::int64_t* neighbours,
                 std::int64_t n, std::int64_t R, float* out);

// Gradient of gather_mean w.r.t. the cache (grad_cache is zeroed and then accumulated into).
void gather_mean_backward(const float* grad_out, std::int64_t M, std::int64_t C,
                          const std::int64_t* neighbours, std::int64_t n, std::int64_t R,
                          float* grad_cache);

}  // namespace edgefd
