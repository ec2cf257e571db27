// FedCache's knowledge lookup on CUDA: one thread per output element reads its row's R
// neighbours (consecutive threads read consecutive classes of the same cache row, so the reads
// coalesce). The backward pass scatters with float atomics: when two rows name the same cache
// row the order of their additions varies between runs. Same semantics as gather_mean.cpp.
#include "cuda_common.cuh"

namespace edgefd::cuda {

namespace {

__global__ void gather_mean_elements(const float* __restrict__ cache, std::int64_t M, std::int64_t C,
                                     const std::int64_t* __restrict__ neighbours, std::int64_t n, std::int64_t R,
                                     float* __restrict__ out, long long* bad) {
    const std::int64_t total = n * C;
    for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < total;
         k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t i = k / C, c = k - i * C;
        const std::int64_t* ids = neighbours + i * R;
        float sum = 0.0f;
        std::int64_t found = 0;
        for (std::int64_t r = 0; r < R; ++r) {
            const std::int64_t j = ids[r];
            if (j == -1) continue;
            if (j < -1 || j >= M) {
                if (c == 0) flag_bad(bad, i * R + r);
                continue;
            }
            sum += cache[j * C + c];
            ++found;
        }
        out[k] = found > 1 ? sum * (1.0f / static_cast<float>(found)) : sum;
    }
}

__global__ void check_ids(const std::int64_t* __restrict__ neighbours, std::int64_t count, std::int64_t M,
                          long long* bad) {
    for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < count;
         k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t j = neighbours[k];
        if (j < -1 || j >= M) flag_bad(bad, k);
    }
}

__global__ void gather_mean_scatter(const float* __restrict__ grad_out, std::int64_t C,
                                    const std::int64_t* __restrict__ neighbours, std::int64_t n, std::int64_t R,
                                    float* __restrict__ grad_cache) {
    const std::int64_t total = n * C;
    for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < total;
         k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t i = k / C, c = k - i * C;
        const std::int64_t* ids = neighbours + i * R;
        std::int64_t found = 0;
        for (std::int64_t r = 0; r < R; ++r) found += ids[r] >= 0;
        if (found == 0) continue;
        const float g = grad_out[k] * (1.0f / static_cast<float>(found));
        for (std::int64_t r = 0; r < R; ++r)
            if (ids[r] >= 0) atomicAdd(grad_cache + ids[r] * C + c, g);
    }
}

[[noreturn]] void bad_neighbour(std::int64_t flat, const std::int64_t* neighbours, std::int64_t R, std::int64_t M,
                                cudaStream_t stream) {
    const std::int64_t value = read_index(neighbours + flat, stream);
    throw KernelError("neighbours: id " + std::to_string(value) + " at [" + std::to_string(flat / R) + ", " +
                      std::to_string(flat % R) + "] is outside [-1, " + std::to_string(M) + ")");
}

constexpr int kThreads = 256;

}  // namespace

void gather_mean(const float* cache, std::int64_t M, std::int64_t C, const std::int64_t* neighbours, std::int64_t n,
                 std::int64_t R, float* out, void* stream_handle) {
    const cudaStream_t stream = as_stream(stream_handle);
    if (n == 0 || C == 0) return;
    BadIndexFlag bad(stream);
    gather_mean_elements<<<grid_for(n * C, kThreads), kThreads, 0, stream>>>(cache, M, C, neighbours, n, R, out,
                                                                            bad.device());
    check_cuda(cudaGetLastError(), "gather_mean launch");
    const std::int64_t first_bad = bad.first_bad();
    if (first_bad >= 0) bad_neighbour(first_bad, neighbours, R, M, stream);
}

void gather_mean_backward(const float* grad_out, std::int64_t M, std::int64_t C, const std::int64_t* neighbours,
                          std::int64_t n, std::int64_t R, float* grad_cache, void* stream_handle) {
    const cudaStream_t stream = as_stream(stream_handle);
    if (M * C > 0) check_cuda(cudaMemsetAsync(grad_cache, 0, M * C * sizeof(float), stream), "zero grad_cache");
    if (n * R == 0 || C == 0) return;
    BadIndexFlag bad(stream);
    check_ids<<<grid_for(n * R, kThreads), kThreads, 0, stream>>>(neighbours, n * R, M, bad.device());
    check_cuda(cudaGetLastError(), "gather_mean_backward launch");
    const std::int64_t first_bad = bad.first_bad();
    if (first_bad >= 0) bad_neighbour(first_bad, neighbours, R, M, stream);
    gather_mean_scatter<<<grid_for(n * C, kThreads), kThreads, 0, stream>>>(grad_out, C, neighbours, n, R,
                                                                           grad_cache);
    check_cuda(cudaGetLastError(), "gather_mean_backward launch");
}

}  // namespace edgefd::cuda

namespace edgefd::cuda {

int device_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return count;
}

}  // namespace edgefd::cuda
