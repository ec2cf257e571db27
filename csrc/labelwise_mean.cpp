// Label-wise averaging of rows (FD, DFL and FedD2S soft targets).
//
// Each thread sums its share of rows into private double accumulators (no atomics, no
// rounding drift over a million rows), then the partial sums are reduced once.
#include <algorithm>
#include <limits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels.hpp"

namespace edgefd {

namespace {

int thread_count() {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

int thread_id() {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

[[noreturn]] void bad_label(std::int64_t index, std::int64_t value, std::int64_t num_classes) {
    throw KernelError("labels: value " + std::to_string(value) + " at index " + std::to_string(index) +
                      " is outside [0, " + std::to_string(num_classes) + ")");
}

}  // namespace

// Rows are summed into float accumulators over blocks of kBlock rows (cheap, vectorised), and
// each block's sums are added into double totals, so rounding error stays at float32 level
// however many rows there are.
constexpr std::int64_t kBlock = 2048;

void labelwise_mean(const float* x, const std::int64_t* labels, std::int64_t N, std::int64_t C,
                    std::int64_t num_classes, const float* sample_weight, float* means,
                    std::int64_t* counts) {
    const int threads = N * C >= kParallelGrain ? thread_count() : 1;
    const std::int64_t cells = num_classes * C;
    std::vector<double> sums(static_cast<size_t>(threads) * cells, 0.0);
    std::vector<double> weights(static_cast<size_t>(threads) * num_classes, 0.0);
    std::vector<std::int64_t> rows(static_cast<size_t>(threads) * num_classes, 0);
    std::vector<std::int64_t> first_bad(threads, std::numeric_limits<std::int64_t>::max());

#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        const int tid = thread_id();
        double* my_sums = sums.data() + tid * cells;
        double* my_weights = weights.data() + tid * num_classes;
        std::int64_t* my_rows = rows.data() + tid * num_classes;
        std::vector<float> block(cells);
        std::vector<float> block_weight(num_classes);
        const std::int64_t blocks = (N + kBlock - 1) / kBlock;
#pragma omp for schedule(static)
        for (std::int64_t b = 0; b < blocks; ++b) {
            std::fill(block.begin(), block.end(), 0.0f);
            std::fill(block_weight.begin(), block_weight.end(), 0.0f);
            const std::int64_t end = std::min(N, (b + 1) * kBlock);
            for (std::int64_t i = b * kBlock; i < end; ++i) {
                const std::int64_t label = labels[i];
                if (label < 0 || label >= num_classes) {
                    first_bad[tid] = std::min(first_bad[tid], i);
                    continue;
                }
                const float* row = x + i * C;
                float* acc = block.data() + label * C;
                if (sample_weight) {
                    const float w = sample_weight[i];
#pragma omp simd
                    for (std::int64_t c = 0; c < C; ++c) acc[c] += w * row[c];
                    block_weight[label] += w;
                } else {
#pragma omp simd
                    for (std::int64_t c = 0; c < C; ++c) acc[c] += row[c];
                    block_weight[label] += 1.0f;
                }
                my_rows[label] += 1;
            }
            for (std::int64_t k = 0; k < cells; ++k) my_sums[k] += block[k];
            for (std::int64_t l = 0; l < num_classes; ++l) my_weights[l] += block_weight[l];
        }
    }

    const std::int64_t bad = *std::min_element(first_bad.begin(), first_bad.end());
    if (bad != std::numeric_limits<std::int64_t>::max()) bad_label(bad, labels[bad], num_classes);

    for (std::int64_t l = 0; l < num_classes; ++l) {
        double w = 0.0;
        std::int64_t n = 0;
        for (int t = 0; t < threads; ++t) {
            w += weights[t * num_classes + l];
            n += rows[t * num_classes + l];
        }
        counts[l] = n;
        const double inv = w > 0.0 ? 1.0 / w : 0.0;
        for (std::int64_t c = 0; c < C; ++c) {
            double s = 0.0;
            for (int t = 0; t < threads; ++t) s += sums[t * cells + l * C + c];
            means[l * C + c] = static_cast<float>(s * inv);
        }
    }
}

void labelwise_mean_backward(const float* grad_means, const std::int64_t* labels, std::int64_t N,
                             std::int64_t C, std::int64_t num_classes, const float* sample_weight,
                             float* grad_x) {
    std::vector<double> weight(num_classes, 0.0);
    for (std::int64_t i = 0; i < N; ++i) {
        const std::int64_t label = labels[i];
        if (label < 0 || label >= num_classes) bad_label(i, label, num_classes);
        weight[label] += sample_weight ? sample_weight[i] : 1.0;
    }
    std::vector<float> inv(num_classes);
    for (std::int64_t l = 0; l < num_classes; ++l)
        inv[l] = weight[l] > 0.0 ? static_cast<float>(1.0 / weight[l]) : 0.0f;

#pragma omp parallel for schedule(static) if (N * C >= kParallelGrain)
    for (std::int64_t i = 0; i < N; ++i) {
        const std::int64_t label = labels[i];
        const float scale = inv[label] * (sample_weight ? sample_weight[i] : 1.0f);
        const float* g = grad_means + label * C;
        float* out = grad_x + i * C;
#pragma omp simd
        for (std::int64_t c = 0; c < C; ++c) out[c] = scale * g[c];
    }
}

}  // namespace edgefd
