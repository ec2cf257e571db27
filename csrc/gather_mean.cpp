// FedCache's knowledge lookup: the mean of each sample's neighbours' cached logits.
#include <algorithm>
#include <limits>
#include <vector>

#include "kernels.hpp"

namespace edgefd {

namespace {

[[noreturn]] void bad_neighbour(std::int64_t row, std::int64_t col, std::int64_t value, std::int64_t M) {
    throw KernelError("neighbours: id " + std::to_string(value) + " at [" + std::to_string(row) + ", " +
                      std::to_string(col) + "] is outside [-1, " + std::to_string(M) + ")");
}

void check_neighbours(const std::int64_t* neighbours, std::int64_t n, std::int64_t R, std::int64_t M) {
    std::int64_t first_bad = std::numeric_limits<std::int64_t>::max();
#pragma omp parallel for schedule(static) reduction(min : first_bad) if (n * R >= kParallelGrain)
    for (std::int64_t k = 0; k < n * R; ++k) {
        const std::int64_t j = neighbours[k];
        if (j < -1 || j >= M) first_bad = std::min(first_bad, k);
    }
    if (first_bad != std::numeric_limits<std::int64_t>::max())
        bad_neighbour(first_bad / R, first_bad % R, neighbours[first_bad], M);
}

}  // namespace

// Rows ahead of the current one whose neighbours' cache rows are prefetched: the lookups are
// random, so without it each one waits for memory in turn.
constexpr std::int64_t kPrefetchRows = 4;

void gather_mean(const float* cache, std::int64_t M, std::int64_t C, const std::int64_t* neighbours,
                 std::int64_t n, std::int64_t R, float* out) {
    std::int64_t first_bad = std::numeric_limits<std::int64_t>::max();
#pragma omp parallel for schedule(static) reduction(min : first_bad) if (n * (R + C) >= kParallelGrain)
    for (std::int64_t i = 0; i < n; ++i) {
        if (i + kPrefetchRows < n) {
            const std::int64_t* ahead = neighbours + (i + kPrefetchRows) * R;
            for (std::int64_t r = 0; r < R; ++r) {
                const std::int64_t j = ahead[r];
                if (j >= 0 && j < M) {
                    for (std::int64_t c = 0; c < C; c += 16) __builtin_prefetch(cache + j * C + c);
                }
            }
        }
        float* o = out + i * C;
        std::fill(o, o + C, 0.0f);
        const std::int64_t* ids = neighbours + i * R;
        std::int64_t found = 0;
        for (std::int64_t r = 0; r < R; ++r) {
            const std::int64_t j = ids[r];
            if (j == -1) continue;
            if (j < -1 || j >= M) {
                first_bad = std::min(first_bad, i * R + r);
                continue;
            }
            const float* row = cache + j * C;
#pragma omp simd
            for (std::int64_t c = 0; c < C; ++c) o[c] += row[c];
            ++found;
        }
        if (found > 1) {
            const float inv = 1.0f / static_cast<float>(found);
#pragma omp simd
            for (std::int64_t c = 0; c < C; ++c) o[c] *= inv;
        }
    }
    if (first_bad != std::numeric_limits<std::int64_t>::max())
        bad_neighbour(first_bad / R, first_bad % R, neighbours[first_bad], M);
}

void gather_mean_backward(const float* grad_out, std::int64_t M, std::int64_t C,
                          const std::int64_t* neighbours, std::int64_t n, std::int64_t R,
                          float* grad_cache) {
    check_neighbours(neighbours, n, R, M);
    std::fill(grad_cache, grad_cache + M * C, 0.0f);
    // Serial scatter: two rows may name the same cache row, and this path is off the hot loop.
    for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t* ids = neighbours + i * R;
        std::int64_t found = 0;
        for (std::int64_t r = 0; r < R; ++r) found += ids[r] >= 0;
        if (found == 0) continue;
        const float inv = 1.0f / static_cast<float>(found);
        const float* g = grad_out + i * C;
        for (std::int64_t r = 0; r < R; ++r) {
            if (ids[r] < 0) continue;
            float* dst = grad_cache + ids[r] * C;
#pragma omp simd
            for (std::int64_t c = 0; c < C; ++c) dst[c] += inv * g[c];
        }
    }
}

}  // namespace edgefd
