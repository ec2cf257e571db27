// The four edgefd kernels on CUDA device buffers: the same semantics as kernels.hpp.
//
// Built only with -DEDGEFD_CUDA=ON (EDGEFD_CUDA=1 at pip install). Every pointer here is a device
// pointer, float32 or int64, C-contiguous; every launch goes on `stream` (the caller's current
// torch stream, passed as a raw handle). Shapes are trusted (bindings_cuda.cpp checks them);
// label and neighbour values are checked on the device and the first bad one is reported by a
// KernelError after the launch, which costs one device-to-host copy of a flag.
//
// Written for sm_75 and newer (Turing, Ampere, Jetson Orin sm_87, Ada, Hopper). They have been
// compiled with nvcc and run under a CPU emulation of CUDA (tests/test_kernels_cuda_emulated.py),
// but never on a GPU: the machine that wrote them has none.
#pragma once

#include <cstdint>

#include "kernels.hpp"  // KernelError

namespace edgefd::cuda {

// Largest class count the block-per-row kernels accept (their shared memory holds two rows).
constexpr std::int64_t kMaxClassesSharedRow = 4096;

// Adds T^2/B * sum_i w_i sum_c v_c p_ic (log p_ic - log q_ic) into *loss (one double, zeroed by the
// caller); writes d loss / d student into grad when not null.
void weighted_kl_forward(const float* student, const float* teacher, std::int64_t B, std::int64_t C,
                         float temperature, const float* sample_weight, const float* class_weight,
                         bool teacher_is_prob, float* grad, double* loss, void* stream);

// Adds 1/B sum_i sum_c |softmax(s)_ic - mean_k softmax(t_k)_ic| into *loss (zeroed by the caller);
// writes the gradients when not null.
void sl_loss_forward(const float* student, const float* teacher, std::int64_t K, std::int64_t B, std::int64_t C,
                     float* grad_student, float* grad_teacher, double* loss, void* stream);

// Per-class (weighted) mean of rows; means: num_classes x C, counts: rows per class.
void labelwise_mean(const float* x, const std::int64_t* labels, std::int64_t N, std::int64_t C,
                    std::int64_t num_classes, const float* sample_weight, float* means, std::int64_t* counts,
                    void* stream);

void labelwise_mean_backward(const float* grad_means, const std::int64_t* labels, std::int64_t N, std::int64_t C,
                             std::int64_t num_classes, const float* sample_weight, float* grad_x, void* stream);

// out[i] = mean of cache[j] over the ids j >= 0 in neighbours[i]; -1 means none, all-none gives 0.
void gather_mean(const float* cache, std::int64_t M, std::int64_t C, const std::int64_t* neighbours,
                 std::int64_t n, std::int64_t R, float* out, void* stream);

void gather_mean_backward(const float* grad_out, std::int64_t M, std::int64_t C, const std::int64_t* neighbours,
                          std::int64_t n, std::int64_t R, float* grad_cache, void* stream);

// Number of CUDA devices the runtime sees (0 when there is no driver or no GPU).
int device_count();

}  // namespace edgefd::cuda
