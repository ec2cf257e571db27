// A plain C interface to the CUDA kernels' host functions, for the emulation test (loaded with
// ctypes: compiling it takes seconds, where pybind11 bindings take tens of seconds). Same
// argument order as csrc/bindings_cuda.cpp; returns 0, 1 for a KernelError (bad input, message
// in edgefd_last_error) or 2 for any other error.
#include <cstdint>
#include <exception>
#include <string>

#include "kernels_cuda.hpp"

namespace cu = edgefd::cuda;

namespace {

thread_local std::string last_error;

template <typename F>
int guarded(F call) {
    try {
        call();
        return 0;
    } catch (const edgefd::KernelError& error) {
        last_error = error.what();
        return 1;
    } catch (const std::exception& error) {
        last_error = error.what();
        return 2;
    }
}

}  // namespace

extern "C" {

const char* edgefd_last_error() { return last_error.c_str(); }

int edgefd_weighted_kl(const float* s, const float* t, std::int64_t B, std::int64_t C, float temperature,
                       const float* w, const float* v, int teacher_is_prob, float* grad, double* loss) {
    return guarded([&] { cu::weighted_kl_forward(s, t, B, C, temperature, w, v, teacher_is_prob != 0, grad, loss, nullptr); });
}

int edgefd_sl_loss(const float* s, const float* t, std::int64_t K, std::int64_t B, std::int64_t C, float* gs,
                   float* gt, double* loss) {
    return guarded([&] { cu::sl_loss_forward(s, t, K, B, C, gs, gt, loss, nullptr); });
}

int edgefd_labelwise_mean(const float* x, const std::int64_t* labels, std::int64_t N, std::int64_t C,
                          std::int64_t num_classes, const float* w, float* means, std::int64_t* counts) {
    return guarded([&] { cu::labelwise_mean(x, labels, N, C, num_classes, w, means, counts, nullptr); });
}

int edgefd_labelwise_mean_backward(const float* grad_means, const std::int64_t* labels, std::int64_t N,
                                   std::int64_t C, std::int64_t num_classes, const float* w, float* grad_x) {
    return guarded([&] { cu::labelwise_mean_backward(grad_means, labels, N, C, num_classes, w, grad_x, nullptr); });
}

int edgefd_gather_mean(const float* cache, std::int64_t M, std::int64_t C, const std::int64_t* neighbours,
                       std::int64_t n, std::int64_t R, float* out) {
    return guarded([&] { cu::gather_mean(cache, M, C, neighbours, n, R, out, nullptr); });
}

int edgefd_gather_mean_backward(const float* grad_out, std::int64_t M, std::int64_t C,
                                const std::int64_t* neighbours, std::int64_t n, std::int64_t R, float* grad_cache) {
    return guarded([&] { cu::gather_mean_backward(grad_out, M, C, neighbours, n, R, grad_cache, nullptr); });
}

}  // extern "C"
