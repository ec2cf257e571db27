// pybind11 bindings: numpy buffers in, numpy buffers (caller-allocated) out.
//
// The Python layer (edgefd/kernels.py) validates user input and gives friendly messages; these
// checks are the last line of defence so that no call can read or write out of bounds.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels.hpp"
#include "simd_avx2.hpp"

namespace py = pybind11;
using edgefd::KernelError;

namespace {

template <typename T>
const char* dtype_name();
template <>
const char* dtype_name<float>() { return "float32"; }
template <>
const char* dtype_name<std::int64_t>() { return "int64"; }

// Checks dtype, C-contiguity and shape of one argument; -1 in `shape` accepts any size.
template <typename T>
void check(const py::array& a, const char* name, std::vector<py::ssize_t> shape) {
    if (!py::isinstance<py::array_t<T>>(a) || a.dtype().kind() != py::dtype::of<T>().kind() ||
        a.itemsize() != sizeof(T))
        throw KernelError(std::string(name) + ": expected dtype " + dtype_name<T>() + ", got " +
                          std::string(py::str(a.dtype())));
    if (!(a.flags() & py::array::c_style))
        throw KernelError(std::string(name) + ": expected a C-contiguous array");
    if (a.ndim() != static_cast<py::ssize_t>(shape.size()))
        throw KernelError(std::string(name) + ": expected " + std::to_string(shape.size()) + " dimensions, got " +
                          std::to_string(a.ndim()));
    for (size_t d = 0; d < shape.size(); ++d)
        if (shape[d] >= 0 && a.shape(d) != shape[d])
            throw KernelError(std::string(name) + ": dimension " + std::to_string(d) + " is " +
                              std::to_string(a.shape(d)) + ", expected " + std::to_string(shape[d]));
}

template <typename T>
const T* in(const py::array& a) { return static_cast<const T*>(a.data()); }

template <typename T>
T* out(py::array& a) {
    if (!a.writeable()) throw KernelError("output array is read-only");
    return static_cast<T*>(a.mutable_data());
}

template <typename T>
T* optional_out(std::optional<py::array>& a) { return a ? out<T>(*a) : nullptr; }

double weighted_kl(py::array student, py::array teacher, float temperature,
                   std::optional<py::array> sample_weight, std::optional<py::array> class_weight,
                   bool teacher_is_prob, std::optional<py::array> grad) {
    check<float>(student, "student_logits", {-1, -1});
    const auto B = student.shape(0), C = student.shape(1);
    if (B == 0 || C == 0) throw KernelError("student_logits: empty batch or class dimension");
    check<float>(teacher, "teacher", {B, C});
    if (sample_weight) check<float>(*sample_weight, "sample_weight", {B});
    if (class_weight) check<float>(*class_weight, "class_weight", {C});
    if (grad) check<float>(*grad, "grad", {B, C});
    if (!(temperature > 0.0f)) throw KernelError("temperature: must be > 0");
    const float* s = in<float>(student);
    const float* t = in<float>(teacher);
    const float* w = sample_weight ? in<float>(*sample_weight) : nullptr;
    const float* v = class_weight ? in<float>(*class_weight) : nullptr;
    float* g = optional_out<float>(grad);
    py::gil_scoped_release release;
    return edgefd::weighted_kl_forward(s, t, B, C, temperature, w, v, teacher_is_prob, g);
}

double sl_loss(py::array student, py::array teacher, std::optional<py::array> grad_student,
               std::optional<py::array> grad_teacher) {
    check<float>(student, "student_logits", {-1, -1});
    const auto B = student.shape(0), C = student.shape(1);
    if (B == 0 || C == 0) throw KernelError("student_logits: empty batch or class dimension");
    check<float>(teacher, "teacher_logits", {-1, B, C});
    const auto K = teacher.shape(0);
    if (K == 0) throw KernelError("teacher_logits: no teachers (K = 0)");
    if (grad_student) check<float>(*grad_student, "grad_student", {B, C});
    if (grad_teacher) check<float>(*grad_teacher, "grad_teacher", {K, B, C});
    const float* s = in<float>(student);
    const float* t = in<float>(teacher);
    float* gs = optional_out<float>(grad_student);
    float* gt = optional_out<float>(grad_teacher);
    py::gil_scoped_release release;
    return edgefd::sl_loss_forward(s, t, K, B, C, gs, gt);
}

void labelwise_mean(py::array x, py::array labels, std::int64_t num_classes,
                    std::optional<py::array> sample_weight, py::array means, py::array counts) {
    check<float>(x, "logits", {-1, -1});
    const auto N = x.shape(0), C = x.shape(1);
    if (num_classes <= 0) throw KernelError("num_classes: must be > 0");
    check<std::int64_t>(labels, "labels", {N});
    if (sample_weight) check<float>(*sample_weight, "sample_weight", {N});
    check<float>(means, "means", {num_classes, C});
    check<std::int64_t>(counts, "counts", {num_classes});
    const float* px = in<float>(x);
    const std::int64_t* pl = in<std::int64_t>(labels);
    const float* pw = sample_weight ? in<float>(*sample_weight) : nullptr;
    float* pm = out<float>(means);
    std::int64_t* pc = out<std::int64_t>(counts);
    py::gil_scoped_release release;
    edgefd::labelwise_mean(px, pl, N, C, num_classes, pw, pm, pc);
}

void labelwise_mean_backward(py::array grad_means, py::array labels, std::optional<py::array> sample_weight,
                             py::array grad_x) {
    check<float>(grad_means, "grad_means", {-1, -1});
    const auto num_classes = grad_means.shape(0), C = grad_means.shape(1);
    check<std::int64_t>(labels, "labels", {-1});
    const auto N = labels.shape(0);
    if (sample_weight) check<float>(*sample_weight, "sample_weight", {N});
    check<float>(grad_x, "grad_x", {N, C});
    const float* pg = in<float>(grad_means);
    const std::int64_t* pl = in<std::int64_t>(labels);
    const float* pw = sample_weight ? in<float>(*sample_weight) : nullptr;
    float* po = out<float>(grad_x);
    py::gil_scoped_release release;
    edgefd::labelwise_mean_backward(pg, pl, N, C, num_classes, pw, po);
}

void gather_mean(py::array cache, py::array neighbours, py::array result) {
    check<float>(cache, "cache", {-1, -1});
    const auto M = cache.shape(0), C = cache.shape(1);
    check<std::int64_t>(neighbours, "neighbours", {-1, -1});
    const auto n = neighbours.shape(0), R = neighbours.shape(1);
    check<float>(result, "out", {n, C});
    const float* pc = in<float>(cache);
    const std::int64_t* pn = in<std::int64_t>(neighbours);
    float* po = out<float>(result);
    py::gil_scoped_release release;
    edgefd::gather_mean(pc, M, C, pn, n, R, po);
}

void gather_mean_backward(py::array grad_out, py::array neighbours, py::array grad_cache) {
    check<float>(grad_out, "grad_out", {-1, -1});
    const auto n = grad_out.shape(0), C = grad_out.shape(1);
    check<std::int64_t>(neighbours, "neighbours", {n, -1});
    const auto R = neighbours.shape(1);
    check<float>(grad_cache, "grad_cache", {-1, C});
    const auto M = grad_cache.shape(0);
    const float* pg = in<float>(grad_out);
    const std::int64_t* pn = in<std::int64_t>(neighbours);
    float* po = out<float>(grad_cache);
    py::gil_scoped_release release;
    edgefd::gather_mean_backward(pg, M, C, pn, n, R, po);
}

}  // namespace

PYBIND11_MODULE(_kernels, m) {
    m.doc() = "edgefd C++ kernels (float32, C-contiguous numpy buffers, OpenMP over rows)";
    py::register_exception<KernelError>(m, "KernelError", PyExc_ValueError);

    m.def("weighted_kl", &weighted_kl, py::arg("student"), py::arg("teacher"), py::arg("temperature"),
          py::arg("sample_weight"), py::arg("class_weight"), py::arg("teacher_is_prob"), py::arg("grad"),
          "Weighted KL loss; writes d loss / d student into grad when given.");
    m.def("sl_loss", &sl_loss, py::arg("student"), py::arg("teacher"), py::arg("grad_student"),
          py::arg("grad_teacher"), "SL loss; writes the gradients when given.");
    m.def("labelwise_mean", &labelwise_mean, py::arg("logits"), py::arg("labels"), py::arg("num_classes"),
          py::arg("sample_weight"), py::arg("means"), py::arg("counts"));
    m.def("labelwise_mean_backward", &labelwise_mean_backward, py::arg("grad_means"), py::arg("labels"),
          py::arg("sample_weight"), py::arg("grad_x"));
    m.def("gather_mean", &gather_mean, py::arg("cache"), py::arg("neighbours"), py::arg("out"));
    m.def("gather_mean_backward", &gather_mean_backward, py::arg("grad_out"), py::arg("neighbours"),
          py::arg("grad_cache"));

    m.def("set_num_threads", [](int n) {
#ifdef _OPENMP
        if (n < 1) throw KernelError("num_threads: must be >= 1");
        omp_set_num_threads(n);
#endif
    });
    m.def("get_num_threads", []() {
#ifdef _OPENMP
        return omp_get_max_threads();
#else
        return 1;
#endif
    });
    // Which row loops run: "avx2" (x86-64 with AVX2+FMA) or "portable" (ARM, older x86, or
    // EDGEFD_KERNELS_PORTABLE=1).
    m.def("simd_path", []() {
#if EDGEFD_AVX2
        return std::string(edgefd::avx2::available() ? "avx2" : "portable");
#else
        return std::string("portable");
#endif
    });
#ifdef _OPENMP
    m.attr("has_openmp") = true;
#else
    m.attr("has_openmp") = false;
#endif
}
