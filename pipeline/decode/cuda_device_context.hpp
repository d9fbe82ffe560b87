#pragma once
//! FFmpeg's CUDA device for NVDEC decoding, over the GPU's primary context, which is the context
//! the CUDA runtime (and so the executors) use: one CUDA context per GPU, never one per stream (a
//! context of its own costs a stream hundreds of MiB, and its surfaces could not be read by
//! kernels in another context). Thread-safe.
#include <memory>

struct AVBufferRef;
struct CUstream_st;   // cudaStream_t / CUstream

namespace framefuse {

//! A new reference (the caller unrefs it; AVCodecContext::hw_device_ctx takes it over) to an
//! AVHWDeviceContext (AV_HWDEVICE_TYPE_CUDA) of CUDA device `index`. Without `stream`: the one
//! every such decoder on the GPU shares, whose copies (NVDEC's output copies, transfers) go on the
//! legacy default stream; created on first use and kept until the process exits (releasing the
//! primary context at exit would race the CUDA runtime's own teardown). With `stream`: a device
//! context of its own over the same CUDA context whose copies go on `stream`, which it keeps alive
//! as long as it lives (its frames included). The driver is loaded at run time (libcuda.so.1):
//! hosts without one work, and get the error. Throws MediaError("cannot use CUDA device N for
//! NVDEC: <reason>").
AVBufferRef* cuda_decode_device(int index, std::shared_ptr<CUstream_st> stream = nullptr);

}  // namespace framefuse
