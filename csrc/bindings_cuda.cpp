// pybind11 bindings of the CUDA kernels: raw device pointers (torch's `tensor.data_ptr()`) and the
// caller's CUDA stream handle (`torch.cuda.current_stream().cuda_stream`) in, no libtorch link.
//
// Device buffers carry no shape, so the Python layer (edgefd/kernels_cuda.py) checks dtype,
// device, contiguity and shapes before it calls in; 0 for an optional pointer means "none".
#include <pybind11/pybind11.h>

#include <cstdint>

#include "kernels_cuda.hpp"

namespace py = pybind11;
using edgefd::KernelError;
namespace cu = edgefd::cuda;

namespace {

template <typename T>
T* ptr(std::uintptr_t address) { return reinterpret_cast<T*>(address); }

void* stream_of(std::uintptr_t handle) { return reinterpret_cast<void*>(handle); }

}  // namespace

PYBIND11_MODULE(_kernels_cuda, m) {
    m.doc() = "edgefd CUDA kernels (float32 / int64 C-contiguous device buffers, passed as raw pointers)";
    py::register_exception<KernelError>(m, "KernelError", PyExc_ValueError);

    m.def("weighted_kl", [](std::uintptr_t student, std::uintptr_t teacher, std::int64_t B, std::int64_t C,
                            float temperature, std::uintptr_t sample_weight, std::uintptr_t class_weight,
                            bool teacher_is_prob, std::uintptr_t grad, std::uintptr_t loss, std::uintptr_t stream) {
        if (!(temperature > 0.0f)) throw KernelError("temperature: must be > 0");
        py::gil_scoped_release release;
        cu::weighted_kl_forward(ptr<const float>(student), ptr<const float>(teacher), B, C, temperature,
                                ptr<const float>(sample_weight), ptr<const float>(class_weight), teacher_is_prob,
                                ptr<float>(grad), ptr<double>(loss), stream_of(stream));
    });
    m.def("sl_loss", [](std::uintptr_t student, std::uintptr_t teacher, std::int64_t K, std::int64_t B, std::int64_t C,
                        std::uintptr_t grad_student, std::uintptr_t grad_teacher, std::uintptr_t loss,
                        std::uintptr_t stream) {
        py::gil_scoped_release release;
        cu::sl_loss_forward(ptr<const float>(student), ptr<const float>(teacher), K, B, C, ptr<float>(grad_student),
                            ptr<float>(grad_teacher), ptr<double>(loss), stream_of(stream));
    });
    m.def("labelwise_mean", [](std::uintptr_t x, std::uintptr_t labels, std::int64_t N, std::int64_t C,
                               std::int64_t num_classes, std::uintptr_t sample_weight, std::uintptr_t means,
                               std::uintptr_t counts, std::uintptr_t stream) {
        py::gil_scoped_release release;
        cu::labelwise_mean(ptr<const float>(x), ptr<const std::int64_t>(labels), N, C, num_classes,
                           ptr<const float>(sample_weight), ptr<float>(means), ptr<std::int64_t>(counts),
                           stream_of(stream));
    });
    m.def("labelwise_mean_backward", [](std::uintptr_t grad_means, std::uintptr_t labels, std::int64_t N,
                                        std::int64_t C, std::int64_t num_classes, std::uintptr_t sample_weight,
                                        std::uintptr_t grad_x, std::uintptr_t stream) {
        py::gil_scoped_release release;
        cu::labelwise_mean_backward(ptr<const float>(grad_means), ptr<const std::int64_t>(labels), N, C, num_classes,
                                    ptr<const float>(sample_weight), ptr<float>(grad_x), stream_of(stream));
    });
    m.def("gather_mean", [](std::uintptr_t cache, std::int64_t M, std::int64_t C, std::uintptr_t neighbours,
                            std::int64_t n, std::int64_t R, std::uintptr_t out, std::uintptr_t stream) {
        py::gil_scoped_release release;
        cu::gather_mean(ptr<const float>(cache), M, C, ptr<const std::int64_t>(neighbours), n, R, ptr<float>(out),
                        stream_of(stream));
    });
    m.def("gather_mean_backward", [](std::uintptr_t grad_out, std::int64_t M, std::int64_t C,
                                     std::uintptr_t neighbours, std::int64_t n, std::int64_t R,
                                     std::uintptr_t grad_cache, std::uintptr_t stream) {
        py::gil_scoped_release release;
        cu::gather_mean_backward(ptr<const float>(grad_out), M, C, ptr<const std::int64_t>(neighbours), n, R,
                                 ptr<float>(grad_cache), stream_of(stream));
    });
    m.def("device_count", &cu::device_count, "CUDA devices the runtime sees (0 without a driver or GPU)");
}
