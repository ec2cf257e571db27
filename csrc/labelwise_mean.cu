// Label-wise averaging of rows on CUDA. One thread per element adds into per-class double sums
// (atomics: the order of additions varies from run to run, but in double precision that changes
// the float32 result by at most one rounding); a second launch divides. Same semantics as
// labelwise_mean.cpp, including the error for a label outside [0, num_classes).
#include "cuda_common.cuh"

namespace edgefd::cuda {

namespace {

__global__ void labelwise_sums(const float* __restrict__ x, const std::int64_t* __restrict__ labels, std::int64_t N,
                               std::int64_t C, std::int64_t num_classes, const float* __restrict__ sample_weight,
                               double* __restrict__ sums, double* __restrict__ weights,
                               unsigned long long* __restrict__ counts, long long* bad) {
    const std::int64_t total = N * C;
    for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < total;
         k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t i = k / C, c = k - i * C;
        const std::int64_t label = labels[i];
        if (label < 0 || label >= num_classes) {
            if (c == 0) flag_bad(bad, i);
            continue;
        }
        const float w = sample_weight ? sample_weight[i] : 1.0f;
        atomicAdd(sums + label * C + c, static_cast<double>(w) * static_cast<double>(x[k]));
        if (c == 0) {
            atomicAdd(weights + label, static_cast<double>(w));
            atomicAdd(counts + label, 1ull);
        }
    }
}

__global__ void labelwise_divide(const double* __restrict__ sums, const double* __restrict__ weights,
                                 const unsigned long long* __restrict__ counts, std::int64_t C,
                                 std::int64_t num_classes, float* __restrict__ means,
                                 std::int64_t* __restrict__ out_counts) {
    const std::int64_t total = num_classes * C;
    for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < total;
         k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t l = k / C;
        const double w = weights[l];
        means[k] = static_cast<float>(w > 0.0 ? sums[k] / w : 0.0);
        if (k - l * C == 0) out_counts[l] = static_cast<std::int64_t>(counts[l]);
    }
}

__global__ void class_weights(const std::int64_t* __restrict__ labels, std::int64_t N, std::int64_t num_classes,
                              const float* __restrict__ sample_weight, double* __restrict__ weights, long long* bad) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < N;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t label = labels[i];
        if (label < 0 || label >= num_classes) {
            flag_bad(bad, i);
            continue;
        }
        atomicAdd(weights + label, sample_weight ? static_cast<double>(sample_weight[i]) : 1.0);
    }
}

__global__ void labelwise_scatter_grad(const float* __restrict__ grad_means, const std::int64_t* __restrict__ labels,
                                       std::int64_t N, std::int64_t C, const float* __restrict__ sample_weight,
                                       const double* __restrict__ weights, float* __restrict__ grad_x) {
    const std::int64_t total = N * C;
    for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < total;
         k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t i = k / C, c = k - i * C;
        const std::int64_t label = labels[i];
        const double w = weights[label];
        const float inv = w > 0.0 ? static_cast<float>(1.0 / w) : 0.0f;
        grad_x[k] = inv * (sample_weight ? sample_weight[i] : 1.0f) * grad_means[label * C + c];
    }
}

// Device scratch for one call, released at the end of the stream's work.
template <typename T>
struct DeviceBuffer {
    DeviceBuffer(std::int64_t count, cudaStream_t stream) : stream(stream) {
        check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&data), count * sizeof(T), stream), "allocate");
        check_cuda(cudaMemsetAsync(data, 0, count * sizeof(T), stream), "zero");
    }
    ~DeviceBuffer() { cudaFreeAsync(data, stream); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    T* data = nullptr;
    cudaStream_t stream;
};

[[noreturn]] void bad_label(std::int64_t index, const std::int64_t* labels, std::int64_t num_classes,
                            cudaStream_t stream) {
    const std::int64_t value = read_index(labels + index, stream);
    throw KernelError("labels: value " + std::to_string(value) + " at index " + std::to_string(index) +
                      " is outside [0, " + std::to_string(num_classes) + ")");
}

constexpr int kThreads = 256;

}  // namespace

void labelwise_mean(const float* x, const std::int64_t* labels, std::int64_t N, std::int64_t C,
                    std::int64_t num_classes, const float* sample_weight, float* means, std::int64_t* counts,
                    void* stream_handle) {
    if (num_classes <= 0) throw KernelError("num_classes: must be > 0");
    const cudaStream_t stream = as_stream(stream_handle);
    DeviceBuffer<double> sums(num_classes * C, stream), weights(num_classes, stream);
    DeviceBuffer<unsigned long long> rows(num_classes, stream);
    BadIndexFlag bad(stream);
    labelwise_sums<<<grid_for(N * C, kThreads), kThreads, 0, stream>>>(x, labels, N, C, num_classes, sample_weight,
                                                                     sums.data, weights.data, rows.data, bad.device());
    check_cuda(cudaGetLastError(), "labelwise_mean launch");
    const std::int64_t first_bad = bad.first_bad();
    if (first_bad >= 0) bad_label(first_bad, labels, num_classes, stream);
    labelwise_divide<<<grid_for(num_classes * C, kThreads), kThreads, 0, stream>>>(
        sums.data, weights.data, rows.data, C, num_classes, means, counts);
    check_cuda(cudaGetLastError(), "labelwise_mean launch");
}

void labelwise_mean_backward(const float* grad_means, const std::int64_t* labels, std::int64_t N, std::int64_t C,
                             std::int64_t num_classes, const float* sample_weight, float* grad_x,
                             void* stream_handle) {
    const cudaStream_t stream = as_stream(stream_handle);
    DeviceBuffer<double> weights(num_classes, stream);
    BadIndexFlag bad(stream);
    class_weights<<<grid_for(N, kThreads), kThreads, 0, stream>>>(labels, N, num_classes, sample_weight, weights.data,
                                                                 bad.device());
    check_cuda(cudaGetLastError(), "labelwise_mean_backward launch");
    const std::int64_t first_bad = bad.first_bad();
    if (first_bad >= 0) bad_label(first_bad, labels, num_classes, stream);
    labelwise_scatter_grad<<<grid_for(N * C, kThreads), kThreads, 0, stream>>>(grad_means, labels, N, C,
                                                                              sample_weight, weights.data, grad_x);
    check_cuda(cudaGetLastError(), "labelwise_mean_backward launch");
}

}  // namespace edgefd::cuda
