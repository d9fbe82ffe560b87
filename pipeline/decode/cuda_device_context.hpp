#pragma once
//! FFmpeg's CUDA device for NVDEC decoding, over the GPU's primary context, which is the context
//! the CUDA runtime (and so the executors) use: one CUDA context per GPU, never one per stream (a
//! context of its own costs a stream hundreds of MiB, and its surfaces could not be read by
//! kernels in another context). Thread-safe.
struct AVBufferRef;

namespace framefuse {

//! A new reference (the caller unrefs it; AVCodecContext::hw_device_ctx takes it over) to an
//! AVHWDeviceContext (AV_HWDEVICE_TYPE_CUDA) of CUDA device `index`, the one every decoder on the
//! GPU shares, whose copies (NVDEC's output copies, transfers) go on the legacy default stream;
//! created on first use and kept until the process exits (releasing the primary context at exit
//! would race the CUDA runtime's own teardown). The driver is loaded at run time (libcuda.so.1):
//! hosts without one work, and get the error. Throws MediaError("cannot use CUDA device N for
//! NVDEC: <reason>").
AVBufferRef* cuda_decode_device(int index);

}  // namespace framefuse
