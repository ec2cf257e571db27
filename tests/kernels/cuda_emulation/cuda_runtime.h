// A CPU stand-in for <cuda_runtime.h>, for tests only: it lets g++ compile csrc/*.cu and run their
// kernels on the CPU with CUDA's execution model, one OS thread per CUDA thread.
//
// What is emulated: blocks (run one after another), threads of a block (all live at once, so
// __syncthreads is a real barrier), warps of 32 (__shfl_xor_sync through a per-warp exchange and
// barrier), __shared__ memory (function statics: one block runs at a time, so they are per
// block), dynamic shared memory, atomics (under one lock), and the runtime calls the kernels use
// (device memory is host memory). What is not: GPU memory ordering, warp divergence rules,
// resource limits, real performance. It checks the kernels' indexing, reductions and maths, not
// how a GPU runs them. tests/test_kernels_cuda_emulated.py rewrites `kernel<<<...>>>(args)` into
// `edgefd_cpu::launcher(kernel, ...)(args)` and `extern __shared__ float x[];` before compiling.
#pragma once

#include <math.h>

#include <barrier>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

struct uint3 {
    unsigned int x = 0, y = 0, z = 0;
};

struct dim3 {
    unsigned int x = 1, y = 1, z = 1;
    dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};

inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;

typedef void* cudaStream_t;
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };

inline const char* cudaGetErrorString(cudaError_t status) { return status == cudaSuccess ? "no error" : "error"; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaGetDeviceCount(int* count) {
    *count = 1;
    return cudaSuccess;
}
inline cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t) {
    *ptr = std::malloc(bytes ? bytes : 1);
    return *ptr ? cudaSuccess : cudaErrorInvalidValue;
}
inline cudaError_t cudaFreeAsync(void* ptr, cudaStream_t) {
    std::free(ptr);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t) {
    std::memcpy(dst, src, bytes);
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t) {
    std::memset(dst, value, bytes);
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

namespace edgefd_cpu {

struct Warp {
    std::barrier<> barrier{32};
    float values[32];
};

inline thread_local std::barrier<>* block_barrier = nullptr;
inline thread_local Warp* this_warp = nullptr;
inline thread_local unsigned char* dynamic_shared = nullptr;
inline std::mutex atomic_lock;

template <typename Kernel>
struct Launch {
    Kernel kernel;
    dim3 grid, block;
    size_t shared_bytes;

    template <typename... Args>
    void operator()(Args... args) const {
        if (block.x % 32 != 0) std::abort();  // the kernels launch whole warps
        for (unsigned int b = 0; b < grid.x; ++b) {
            std::barrier<> barrier(block.x);
            std::vector<Warp> warps(block.x / 32);
            std::vector<unsigned char> shared(shared_bytes + 16);
            std::vector<std::thread> threads;
            threads.reserve(block.x);
            for (unsigned int t = 0; t < block.x; ++t) {
                threads.emplace_back([&, b, t] {
                    threadIdx = uint3{t, 0, 0};
                    blockIdx = uint3{b, 0, 0};
                    blockDim = block;
                    gridDim = grid;
                    block_barrier = &barrier;
                    this_warp = &warps[t / 32];
                    dynamic_shared = shared.data();
                    kernel(args...);
                });
            }
            for (auto& thread : threads) thread.join();
        }
    }
};

template <typename Kernel>
Launch<Kernel> launcher(Kernel kernel, dim3 grid, dim3 block, size_t shared_bytes = 0, cudaStream_t = nullptr) {
    return Launch<Kernel>{kernel, grid, block, shared_bytes};
}

}  // namespace edgefd_cpu

inline void __syncthreads() { edgefd_cpu::block_barrier->arrive_and_wait(); }

inline float __shfl_xor_sync(unsigned int, float value, int lane_mask) {
    auto* warp = edgefd_cpu::this_warp;
    const unsigned int lane = threadIdx.x & 31u;
    warp->values[lane] = value;
    warp->barrier.arrive_and_wait();
    const float other = warp->values[lane ^ static_cast<unsigned int>(lane_mask)];
    warp->barrier.arrive_and_wait();
    return other;
}

template <typename T>
inline T atomicAdd(T* address, T value) {
    std::lock_guard<std::mutex> guard(edgefd_cpu::atomic_lock);
    const T old = *address;
    *address = old + value;
    return old;
}

template <typename T>
inline T atomicMin(T* address, T value) {
    std::lock_guard<std::mutex> guard(edgefd_cpu::atomic_lock);
    const T old = *address;
    if (value < old) *address = value;
    return old;
}
