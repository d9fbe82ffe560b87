#pragma once
//! FFmpeg's CUDA device for NVDEC decoding, over the GPU's primary context, which is the context
//! the CUDA runtime (and so the executors) use: one CUDA context per GPU, never one per stream (a
//! context of its own costs a stream hundreds of MiB, and its surfaces could not be read by
//! kernels in another context). Thread-safe.
struct AVBufferRef;
struct CUctx_st;     // CUcontext
struct CUevent_st;   // CUevent / cudaEvent_t

namespace framefuse {

//! A new reference (the caller unrefs it; AVCodecContext::hw_device_ctx takes it over) to an
//! AVHWDeviceContext (AV_HWDEVICE_TYPE_CUDA) of CUDA device `index`, the one every decoder on the
//! GPU shares, whose copies (NVDEC's output copies, transfers) go on the legacy default stream;
//! created on first use and kept until the process exits (releasing the primary context at exit
//! would race the CUDA runtime's own teardown). The driver is loaded at run time (libcuda.so.1):
//! hosts without one work, and get the error. Throws MediaError("cannot use CUDA device N for
//! NVDEC: <reason>").
AVBufferRef* cuda_decode_device(int index);

//! A host wait for the work queued so far on the legacy default stream of device `index`'s shared
//! context, where NVDEC decoders map and copy their frames: a decoder's thread waits after each
//! frame, so its frames reach executors as finished device memory. (Each pipeline's submit
//! recording an event on the legacy stream instead made `cudaGraphLaunch` block: p99 decode ->
//! output <= 20 ms at 51 live streams on the H200, against <= 5 ms with this wait; tests/bench/
//! RESULTS.md, session 9.) Cost: a stream without B-frames hands each frame out as soon as its
//! decode is queued, so the wait covers that decode and one such stream alone decodes ~18 % slower
//! (1080p: 456 against 559 fps); several streams still fill NVDEC. A blocking-sync event: the thread
//! sleeps. One thread at a time.
class LegacyStreamFence {
 public:
  //! Throws MediaError as cuda_decode_device() does.
  explicit LegacyStreamFence(int index);
  ~LegacyStreamFence();
  LegacyStreamFence(const LegacyStreamFence&) = delete;
  LegacyStreamFence& operator=(const LegacyStreamFence&) = delete;

  //! Returns once everything queued on the legacy stream before the call has run. Throws
  //! MediaError when the device reports an error.
  void wait();

 private:
  int index_;
  CUctx_st* ctx_ = nullptr;
  CUevent_st* event_ = nullptr;
};

}  // namespace framefuse
