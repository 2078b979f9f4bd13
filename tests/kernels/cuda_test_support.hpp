#pragma once
// What the CUDA kernel tests (test_gpt_kernels_cuda.cpp, test_llama_kernels_cuda.cpp) share: the
// GPU (its stream and cuBLAS handle; a test without a usable GPU fails, saying why), device arrays,
// random data and the comparison of CUDA results with the CPU kernels'.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/dtype.hpp"

namespace {

namespace cpu = starzero::kernels;
namespace gpu = starzero::kernels::cuda;
using starzero::bf16;
using starzero::from_float;
using starzero::to_float;
using std::size_t;

constexpr double kTolF32 = 1e-4;
constexpr double kTolBf16 = 2e-2;
template <class T>
constexpr double kTol = std::is_same_v<T, float> ? kTolF32 : kTolBf16;
template <class T>
const char* type_name() {
  return std::is_same_v<T, float> ? "fp32" : "bf16";
}

// ---- the GPU, or the reason there is none ---------------------------------------------------------
struct Gpu {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  std::string error;  // non-empty: no usable GPU, and why
};

Gpu& gpu_state() {
  static Gpu g = [] {
    Gpu s;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      s.error = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
      return s;
    }
    if (count == 0) {
      s.error = "cudaGetDeviceCount found no CUDA device";
      return s;
    }
    cudaDeviceProp prop{};
    if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess ||
        (e = cudaStreamCreate(&s.stream)) != cudaSuccess) {
      s.error = std::string("CUDA device 0 unusable: ") + cudaGetErrorString(e);
      return s;
    }
    cublasStatus_t cs = cublasCreate(&s.cublas);
    if (cs == CUBLAS_STATUS_SUCCESS) cs = cublasSetStream(s.cublas, s.stream);
    if (cs != CUBLAS_STATUS_SUCCESS) {
      s.error = std::string("cuBLAS unusable: ") + cublasGetStatusString(cs);
      return s;
    }
    std::printf("CUDA device 0 of %d: %s (sm_%d%d, %.1f GiB)\n", count, prop.name, prop.major,
                prop.minor, double(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    return s;
  }();
  return g;
}

// Every test needs a GPU: without one it fails, saying why (never a silent pass).
Gpu& require_gpu() {
  Gpu& g = gpu_state();
  if (!g.error.empty())
    FAIL("no usable CUDA GPU (" << g.error
                                << "): this test compares the CUDA kernels with the CPU ones and "
                                   "must run on a machine with an NVIDIA GPU and driver");
  return g;
}

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) FAIL(what << " failed: " << cudaGetErrorName(e) << " (" << cudaGetErrorString(e) << ")");
}

// Waits for the stream and reports any asynchronous error.
void sync(const Gpu& g) {
  cuda_ok(cudaStreamSynchronize(g.stream), "cudaStreamSynchronize");
  cuda_ok(cudaGetLastError(), "a kernel on the test stream");
}

// ---- device arrays ------------------------------------------------------------------------------
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    cuda_ok(cudaMalloc(reinterpret_cast<void**>(&ptr_), bytes() ? bytes() : 1), "cudaMalloc");
    cuda_ok(cudaMemset(ptr_, 0, bytes()), "cudaMemset");
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    cuda_ok(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice), "cudaMemcpy to the device");
  }
  ~DeviceArray() { (void)cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() { return ptr_; }
  std::vector<T> download(const Gpu& g) const {
    sync(g);
    std::vector<T> host(n_);
    cuda_ok(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
    return host;
  }

 private:
  size_t bytes() const { return n_ * sizeof(T); }
  T* ptr_ = nullptr;
  size_t n_;
};

// ---- data and comparison ------------------------------------------------------------------------
template <class T>
std::vector<T> random_array(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) {
    float f = dist(rng);
    if (f == 0.0f) f = 0.5f * hi;  // non-zero
    x = from_float<T>(f);
  }
  return v;
}

// Checks got ≈ want element-wise (see the tolerance at the top); reports the worst element.
template <class T>
void check_close(const std::string& what, const std::vector<T>& got, const std::vector<T>& want, double tol) {
  REQUIRE(got.size() == want.size());
  double mean_abs = 0.0;
  for (const T& w : want) mean_abs += std::fabs(double(to_float(w)));
  mean_abs /= want.empty() ? 1.0 : double(want.size());
  double worst = 0.0;
  size_t worst_at = 0, bad = 0, non_finite = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = to_float(got[i]), w = to_float(want[i]);
    if (!std::isfinite(g) || !std::isfinite(w)) {
      ++non_finite;
      continue;
    }
    const double err = std::fabs(g - w) / (std::fabs(w) + mean_abs + 1e-30);
    if (err > tol) ++bad;
    if (err > worst) {
      worst = err;
      worst_at = i;
    }
  }
  std::ostringstream msg;
  msg << what << ": " << got.size() << " elements, worst relative error " << worst << " at [" << worst_at << "] (cuda "
      << (got.empty() ? 0.0f : to_float(got[worst_at])) << ", cpu " << (want.empty() ? 0.0f : to_float(want[worst_at]))
      << "), " << bad << " over tolerance " << tol << ", " << non_finite << " non-finite";
  INFO(msg.str());
  CHECK(non_finite == 0);
  CHECK(bad == 0);
}

// An array on both sides: host values and a device copy made from them. The CPU kernel runs on
// host(), the CUDA kernel on device(), and check() then compares the two results: of a forward
// kernel, into an output zero on both sides; of a backward kernel that accumulates, into the same
// random values on both sides.
template <class T>
class Mirrored {
 public:
  explicit Mirrored(std::vector<T> values) : host_(std::move(values)), device_(host_) {}
  // n zeros: an output.
  explicit Mirrored(size_t n) : Mirrored(std::vector<T>(n)) {}
  // random_array's non-zero values in [-1, 1).
  Mirrored(size_t n, std::mt19937& rng) : Mirrored(random_array<T>(n, rng)) {}

  T* host() { return host_.data(); }
  T* device() { return device_.get(); }
  // The host side, what the CPU kernel left.
  const std::vector<T>& cpu_values() const { return host_; }
  size_t size() const { return host_.size(); }
  void check(const std::string& what, const Gpu& g, double tol) const {
    check_close(what, device_.download(g), host_, tol);
  }

 private:
  std::vector<T> host_;
  DeviceArray<T> device_;
};

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace

TEST_CASE("a CUDA GPU is usable", "[cuda]") {
  Gpu& g = require_gpu();
  CHECK(g.stream != nullptr);
  CHECK(g.cublas != nullptr);
}
