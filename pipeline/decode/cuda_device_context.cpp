#include "pipeline/decode/cuda_device_context.hpp"

#include <map>
#include <mutex>
#include <string>
#include <spdlog/fmt/fmt.h>

#include "pipeline/decode/av_util.hpp"
#include "pipeline/error.hpp"

#if FRAMEFUSE_HAVE_FFNVCODEC
// The driver API through nv-codec-headers' run-time loader (as FFmpeg itself does): no link-time
// dependency on libcuda, and its CUDA types make hwcontext_cuda.h need no toolkit <cuda.h>.
#define FFNV_LOG_FUNC(logctx, msg, ...)
#define FFNV_DEBUG_LOG_FUNC(logctx, msg, ...)
#include <ffnvcodec/dynlink_loader.h>
#endif

extern "C" {
#include <libavutil/hwcontext.h>
#if FRAMEFUSE_HAVE_FFNVCODEC
#include <libavutil/hwcontext_cuda.h>
#endif
}

namespace framefuse {

#if FRAMEFUSE_HAVE_FFNVCODEC
namespace {

std::string cu_error(const CudaFunctions& cu, CUresult r) {
  const char* name = nullptr;
  return cu.cuGetErrorName(r, &name) == CUDA_SUCCESS && name ? name : fmt::format("CUresult {}", int(r));
}

CudaFunctions* cu = nullptr;   //!< the driver, loaded by the first retain_primary_context() and kept

//! The device's primary context, retained for the process' life. Not av_hwdevice_ctx_create with
//! `primary_ctx`: FFmpeg refuses a primary context that the CUDA runtime already activated with its
//! default scheduling flags ("Primary context already active with incompatible flags"), which
//! depends on whether an executor or a decoder touched the device first. A context given to
//! FFmpeg this way is used as it is and never released by FFmpeg.
CUcontext retain_primary_context(int index) {
  if (!cu && cuda_load_functions(&cu, nullptr) < 0) throw std::runtime_error("no NVIDIA driver (libcuda.so.1 not loadable)");
  CUresult r = cu->cuInit(0);
  if (r != CUDA_SUCCESS) throw std::runtime_error(fmt::format("cuInit: {}", cu_error(*cu, r)));
  CUdevice device{};
  if ((r = cu->cuDeviceGet(&device, index)) != CUDA_SUCCESS)
    throw std::runtime_error(fmt::format("cuDeviceGet: {}", cu_error(*cu, r)));
  CUcontext ctx = nullptr;
  if ((r = cu->cuDevicePrimaryCtxRetain(&ctx, device)) != CUDA_SUCCESS)
    throw std::runtime_error(fmt::format("cuDevicePrimaryCtxRetain: {}", cu_error(*cu, r)));
  return ctx;
}

//! An FFmpeg CUDA device over `ctx` (never released by FFmpeg), copying on the legacy default stream.
AVBufferRef* create_device(CUcontext ctx) {
  AVBufferRef* ref = av_hwdevice_ctx_alloc(AV_HWDEVICE_TYPE_CUDA);
  if (!ref) throw std::runtime_error("this FFmpeg has no CUDA support");
  auto* device = reinterpret_cast<AVHWDeviceContext*>(ref->data);
  static_cast<AVCUDADeviceContext*>(device->hwctx)->cuda_ctx = ctx;
  if (const int err = av_hwdevice_ctx_init(ref); err < 0) {
    av_buffer_unref(&ref);
    throw std::runtime_error(fmt::format("FFmpeg CUDA device: {}", av_error(err)));
  }
  return ref;
}

//! The shared context of device `index` (cuda_decode_device's).
CUcontext shared_context(int index) {
  AVBufferRef* ref = cuda_decode_device(index);
  const CUcontext ctx =
      static_cast<const AVCUDADeviceContext*>(reinterpret_cast<const AVHWDeviceContext*>(ref->data)->hwctx)->cuda_ctx;
  av_buffer_unref(&ref);   // the shared device itself lives on
  return ctx;
}

//! Runs fn() with `ctx` current on this thread; a failing CUresult becomes MediaError naming `what`.
template <class Fn>
void in_context(int index, CUcontext ctx, const char* what, Fn&& fn) {
  CUresult r = cu->cuCtxPushCurrent(ctx);
  if (r == CUDA_SUCCESS) {
    r = fn();
    CUcontext popped = nullptr;
    cu->cuCtxPopCurrent(&popped);
  }
  if (r != CUDA_SUCCESS) throw MediaError(fmt::format("CUDA device {}: {}: {}", index, what, cu_error(*cu, r)));
}

}  // namespace
#endif

AVBufferRef* cuda_decode_device(int index) {
#if FRAMEFUSE_HAVE_FFNVCODEC
  static std::mutex mu;
  static auto* devices = new std::map<int, AVBufferRef*>();   // never freed: see header
  std::lock_guard lock(mu);
  try {
    auto it = devices->find(index);
    if (it == devices->end()) {
      const CUcontext ctx = retain_primary_context(index);   // kept even if FFmpeg fails: see header
      it = devices->emplace(index, create_device(ctx)).first;
    }
    AVBufferRef* ref = av_buffer_ref(it->second);
    if (!ref) throw std::runtime_error("out of memory");
    return ref;
  } catch (const std::exception& e) {
    throw MediaError(fmt::format("cannot use CUDA device {} for NVDEC: {}", index, e.what()));
  }
#else
  throw MediaError(fmt::format("cannot use CUDA device {} for NVDEC: built without the nv-codec-headers "
                               "(ffnvcodec)",
                               index));
#endif
}

#if FRAMEFUSE_HAVE_FFNVCODEC
LegacyStreamFence::LegacyStreamFence(int index) : index_(index), ctx_(shared_context(index)) {
  in_context(index_, ctx_, "cuEventCreate",
             [&] { return cu->cuEventCreate(&event_, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC); });
}

LegacyStreamFence::~LegacyStreamFence() {
  if (event_) cu->cuEventDestroy(event_);
}

void LegacyStreamFence::wait() {
  in_context(index_, ctx_, "waiting for the decoder's copies", [&] {
    const CUresult r = cu->cuEventRecord(event_, nullptr);   // null: the legacy default stream
    return r == CUDA_SUCCESS ? cu->cuEventSynchronize(event_) : r;
  });
}
#else
LegacyStreamFence::LegacyStreamFence(int index) : index_(index) { cuda_decode_device(index); }   // throws: no NVDEC
LegacyStreamFence::~LegacyStreamFence() = default;
void LegacyStreamFence::wait() {}
#endif

}  // namespace framefuse
