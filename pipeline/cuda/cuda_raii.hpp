#pragma once
//! RAII owners for CUDA runtime objects and the one error check every CUDA call goes through.
//! Host code only (links the CUDA runtime); destructors never throw.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "pipeline/error.hpp"

namespace framefuse::cuda {

//! Sub-allocations inside one device buffer start on this boundary: aligned vector access for any
//! dtype, whatever odd sizes come before.
inline constexpr size_t kAlign = 256;
constexpr size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

//! Throws DeviceError("<what>: <cuda error string>") unless err is cudaSuccess.
inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw DeviceError(std::string(what) + ": " + cudaGetErrorString(err));
}

template <class T, auto Free>
class Handle {
 public:
  Handle() = default;
  explicit Handle(T h) : h_(h) {}
  Handle(Handle&& o) noexcept : h_(std::exchange(o.h_, T{})) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, T{});
    }
    return *this;
  }
  ~Handle() { reset(); }
  T get() const { return h_; }
  operator T() const { return h_; }
  void reset() {
    if (h_) Free(h_);
    h_ = T{};
  }

 private:
  T h_{};
};

using Stream = Handle<cudaStream_t, cudaStreamDestroy>;
using Event = Handle<cudaEvent_t, cudaEventDestroy>;
using Graph = Handle<cudaGraph_t, cudaGraphDestroy>;
using GraphExec = Handle<cudaGraphExec_t, cudaGraphExecDestroy>;

inline Stream make_stream() {
  cudaStream_t s{};
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return Stream(s);
}

//! Timing disabled unless asked: cheaper record/wait on the hot path.
inline Event make_event(bool timing = false) {
  cudaEvent_t e{};
  check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreate");
  return Event(e);
}

//! A captured and instantiated CUDA graph.
struct CapturedGraph {
  Graph graph;
  GraphExec exec;
  size_t nodes = 0;   //!< top-level nodes of `graph`
};

//! Captures what `enqueue(stream)` puts on `stream` (thread-local capture mode) and instantiates it.
template <class Enqueue>
CapturedGraph capture_graph(cudaStream_t stream, Enqueue&& enqueue) {
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
  try {
    enqueue(stream);
  } catch (...) {   // whatever failed, the stream stops capturing (on this thread, as it began)
    cudaGraph_t broken{};
    if (cudaStreamEndCapture(stream, &broken) == cudaSuccess && broken) cudaGraphDestroy(broken);
    cudaGetLastError();
    throw;
  }
  cudaGraph_t raw_graph{};
  check(cudaStreamEndCapture(stream, &raw_graph), "end capture");
  CapturedGraph g;
  g.graph = Graph(raw_graph);
  check(cudaGraphGetNodes(g.graph, nullptr, &g.nodes), "graph nodes");
  cudaGraphExec_t raw_exec{};
  check(cudaGraphInstantiate(&raw_exec, g.graph, 0), "instantiate graph");
  g.exec = GraphExec(raw_exec);
  return g;
}

//! Untyped device or pinned-host allocation of `bytes`.
template <cudaError_t (*Free)(void*)>
class Buffer {
 public:
  Buffer() = default;
  Buffer(void* p, size_t bytes) : p_(p), bytes_(bytes) {}
  Buffer(Buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      if (p_) Free(p_);
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~Buffer() {
    if (p_) Free(p_);
  }
  template <class T = std::byte>
  T* as() const { return static_cast<T*>(p_); }
  size_t size() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

using DeviceBuffer = Buffer<cudaFree>;
using PinnedBuffer = Buffer<cudaFreeHost>;

inline DeviceBuffer alloc_device(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return DeviceBuffer(p, bytes);
}

inline PinnedBuffer alloc_pinned(size_t bytes) {
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes), "cudaMallocHost");
  return PinnedBuffer(p, bytes);
}

//! Pinned host memory the device writes directly (cudaHostAllocMapped); its device address comes
//! from cudaHostGetDevicePointer.
inline PinnedBuffer alloc_mapped(size_t bytes) {
  void* p = nullptr;
  check(cudaHostAlloc(&p, bytes, cudaHostAllocMapped), "cudaHostAlloc(mapped)");
  return PinnedBuffer(p, bytes);
}

}  // namespace framefuse::cuda
