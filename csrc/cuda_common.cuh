// Helpers shared by the CUDA kernels: error checks, block reductions, and the device-side
// "first bad index" flag that turns a bad label or neighbour id into a KernelError on the host.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>

#include "kernels_cuda.hpp"

namespace edgefd::cuda {

inline void check_cuda(cudaError_t status, const char* what) {
    if (status != cudaSuccess)
        throw std::runtime_error(std::string("edgefd CUDA kernel: ") + what + ": " + cudaGetErrorString(status));
}

inline cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Threads per block for the block-per-row kernels: a warp for narrow rows, 128 otherwise.
inline int row_threads(std::int64_t C) { return C <= 32 ? 32 : 128; }

// Blocks for a grid-stride loop over `work` items.
inline unsigned int grid_for(std::int64_t work, int threads) {
    const std::int64_t blocks = (work + threads - 1) / threads;
    return static_cast<unsigned int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum / max over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets
// the result. `scratch` is 32 floats of shared memory; it may be reused after the call returns.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    if (warps == 1) return v;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_max(v);
    if (warps == 1) return v;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

// A device int64 that kernels lower (atomicMin) to the first bad flat index they meet; "none"
// is INT64_MAX. Owned by the host function that launches the kernel.
class BadIndexFlag {
public:
    explicit BadIndexFlag(cudaStream_t stream) : stream_(stream) {
        check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&flag_), sizeof(long long), stream), "allocate flag");
        const long long none = std::numeric_limits<long long>::max();
        check_cuda(cudaMemcpyAsync(flag_, &none, sizeof(none), cudaMemcpyHostToDevice, stream), "set flag");
    }
    ~BadIndexFlag() { cudaFreeAsync(flag_, stream_); }
    BadIndexFlag(const BadIndexFlag&) = delete;
    BadIndexFlag& operator=(const BadIndexFlag&) = delete;

    long long* device() { return flag_; }

    // Waits for the stream; returns the first bad index, or -1 when every value was good.
    std::int64_t first_bad() {
        long long value = 0;
        check_cuda(cudaMemcpyAsync(&value, flag_, sizeof(value), cudaMemcpyDeviceToHost, stream_), "read flag");
        check_cuda(cudaStreamSynchronize(stream_), "synchronise");
        return value == std::numeric_limits<long long>::max() ? -1 : static_cast<std::int64_t>(value);
    }

private:
    cudaStream_t stream_;
    long long* flag_ = nullptr;
};

// Copies one int64 from the device (the bad value named in an error message).
inline std::int64_t read_index(const std::int64_t* device_value, cudaStream_t stream) {
    std::int64_t value = 0;
    check_cuda(cudaMemcpyAsync(&value, device_value, sizeof(value), cudaMemcpyDeviceToHost, stream), "read value");
    check_cuda(cudaStreamSynchronize(stream), "synchronise");
    return value;
}

__device__ __forceinline__ void flag_bad(long long* flag, std::int64_t index) {
    atomicMin(flag, static_cast<long long>(index));
}

}  // namespace edgefd::cuda
