#pragma once
//! Typed description of a pipeline: what the YAML config turns into, and what the pipeline builds
//! from. Pure data, no YAML and no CUDA. Values are validated once, by config/ at load time (static
//! checks) and by make_output_params() when the first frame's size is known (crop inside frame).
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/ops/image.hpp"
#include "pipeline/ops/resize.hpp"
#include "pipeline/ops/write.hpp"

namespace framefuse {

enum class SourceKind : uint8_t { File, Rtsp };
enum class RtspTransport : uint8_t { Tcp, Udp };
enum class DecoderKind : uint8_t { Auto, Nvdec, Cpu };
//! "auto", "nvdec", "cpu": the config's names, as metrics and reports show them.
constexpr const char* decoder_name(DecoderKind k) {
  return k == DecoderKind::Nvdec ? "nvdec" : (k == DecoderKind::Cpu ? "cpu" : "auto");
}

struct SourceSpec {
  SourceKind kind = SourceKind::File;
  std::string uri;                 //!< file path or rtsp:// URL (may hold credentials; redact when shown)
  bool loop = false;               //!< files: restart at EOF
  bool realtime = false;           //!< files: pace at the stream frame rate like a camera
  RtspTransport transport = RtspTransport::Tcp;
  std::chrono::microseconds socket_timeout{5'000'000};   //!< FFmpeg `timeout` option (µs)
  std::chrono::milliseconds stall_timeout{10'000};       //!< no frame for this long = stalled
  std::chrono::milliseconds reconnect_initial{500};
  std::chrono::milliseconds reconnect_max{30'000};
  int32_t max_reconnects = -1;     //!< -1 = unlimited
  int64_t max_frames = -1;         //!< stop after this many decoded frames (-1 = all)
  bool operator==(const SourceSpec&) const = default;
};

//! A rectangle in pixels, or in fractions of the frame when `fractional` (all four in [0,1]).
struct RectSpec {
  double x = 0, y = 0, w = 1, h = 1;
  bool fractional = true;
  bool operator==(const RectSpec&) const = default;
};

enum class AspectMode : uint8_t { Stretch, Letterbox, CenterCropFill };
enum class ChannelOrder : uint8_t { Rgb, Bgr, Gray };

//! How the resize target is given: exact size, or the shorter side (torchvision Resize(int)).
struct ResizeSpec {
  int32_t width = 0, height = 0;   //!< exact target (with `aspect`)
  int32_t shorter_side = 0;        //!< > 0: scale so the shorter side is this, keeping aspect
  bool operator==(const ResizeSpec&) const = default;
};

struct OutputSpec {
  std::string name;
  RectSpec crop;                                   //!< default: whole frame
  ResizeSpec resize;
  ops::Interp interp = ops::Interp::Linear;
  AspectMode aspect = AspectMode::Stretch;
  std::optional<std::array<int32_t, 2>> center_crop;   //!< [w, h] after resize (torchvision CenterCrop)
  std::array<float, 3> pad_value{114.f, 114.f, 114.f};  //!< letterbox fill, in 0..255 pixel units
  ChannelOrder channels = ChannelOrder::Rgb;
  float scale = 1.f / 255.f;                       //!< applied before mean/std
  std::array<float, 3> mean{0.f, 0.f, 0.f};
  std::array<float, 3> std{1.f, 1.f, 1.f};
  ops::Layout layout = ops::Layout::Chw;
  ops::DType dtype = ops::DType::F32;
  bool operator==(const OutputSpec&) const = default;
};

//! Colour interpretation; unset fields come from the stream's metadata.
struct ColorSpec {
  std::optional<ops::ColorMatrix> matrix;
  std::optional<ops::ColorRange> range;
  ops::ChromaUpsample chroma_upsample = ops::ChromaUpsample::Nearest;
  bool operator==(const ColorSpec&) const = default;
};

enum class SinkKind : uint8_t { Npy, Null, Shm, CudaIpc };

struct SinkSpec {
  SinkKind kind = SinkKind::Npy;
  std::string directory;           //!< npy: output folder, one subfolder per output
  int32_t frames_per_file = 1;     //!< npy: frames stacked per .npy file ([N, ...])
  std::string shm_name;            //!< shm, cuda_ipc: the ring's name, /dev/shm/<shm_name>
  int32_t slots = 8;               //!< shm, cuda_ipc: frames the ring holds
  bool operator==(const SinkSpec&) const = default;
};

enum class DeviceKind : uint8_t { Auto, Cpu, Cuda };
struct DeviceSpec {
  DeviceKind kind = DeviceKind::Auto;
  int32_t index = 0;
  bool operator==(const DeviceSpec&) const = default;
};

//! auto_gain: a PI controller (in log luma) drives each chosen output's mean luma toward `target`
//! by scaling its pixels before normalize. See pipeline/control/controllers.hpp.
struct AutoGainSpec {
  bool enabled = false;
  std::vector<std::string> outputs;   //!< outputs whose gain it drives; empty = all
  double target = 0.45;               //!< mean output luma, (0, 1]
  double kp = 0.1, ki = 0.3;          //!< >= 0, not both 0
  double min_gain = 0.25, max_gain = 8;   //!< 0 < min_gain <= 1 <= max_gain
  double max_step = 0.25;             //!< largest gain change per frame, > 0
  bool operator==(const AutoGainSpec&) const = default;
};

//! roi_follow: moves one output's crop window (size kept) toward the motion centroid: a digital
//! pan/tilt. The window stays inside `bounds`.
struct RoiFollowSpec {
  bool enabled = false;
  std::string output;                 //!< the output whose crop moves (required when enabled)
  double smoothing = 0.2;             //!< fraction of the remaining distance moved per frame, (0, 1]
  double dead_band = 0.02;            //!< centroid this close (fraction of the frame) = no move, [0, 0.5]
  double min_motion = 0.0005;         //!< whole-frame motion below this = hold, [0, 1]
  RectSpec bounds;                    //!< region the window may cover; default the whole frame
  bool operator==(const RoiFollowSpec&) const = default;
};

//! health: flags with hysteresis, from whole-frame statistics.
struct HealthSpec {
  bool enabled = false;
  double frozen_motion = 0.0005;      //!< motion below this counts as a still picture, [0, 1]
  std::chrono::milliseconds frozen_after{10'000};   //!< still this long = frozen, > 0
  double black_fraction = 0.95;       //!< share of near-black pixels that is `black`, (0, 1]
  double overexposed_fraction = 0.5;  //!< share of near-white pixels that is `overexposed`, (0, 1]
  double scene_change = 0.5;          //!< histogram distance between frames that is a scene change, (0, 1]
  std::chrono::milliseconds raise_after{500};    //!< black / overexposed must last this long, >= 0
  std::chrono::milliseconds clear_after{2'000};  //!< a flag clears once its condition is gone this long, >= 0
  bool operator==(const HealthSpec&) const = default;
};

//! Monitoring statistics and control loops of a pipeline (`control:`). Off unless enabled; the
//! statistics run whenever it is, the loops when each of theirs is. The control step of frame n
//! reads the statistics of frame n - delay_frames.
struct ControlSpec {
  bool enabled = false;
  //! >= 1. 2 by default: on a GPU the loops then run beside the next frame's pass instead of
  //! waiting inside each frame's launch for its own statistics (pipeline/control/fused_control.hpp).
  int32_t delay_frames = 2;
  AutoGainSpec auto_gain;
  RoiFollowSpec roi_follow;
  HealthSpec health;
  bool operator==(const ControlSpec&) const = default;
};

//! A batch group (`batching:`): pipelines on one device with the same outputs and colour whose
//! frames share fused launches, up to `max_batch` frames from any members per launch.
struct BatchGroupSpec {
  std::string name;
  int32_t max_batch = 8;                        //!< frames per launch, 1..kMaxBatch (fused_params.hpp)
  std::chrono::microseconds max_wait{4000};     //!< the oldest queued frame waits at most this for others
  std::optional<DeviceSpec> device;             //!< nullopt: the daemon's device
  int32_t queue_depth = 0;                      //!< frames waiting in the group; 0 = 2 * max_batch
  bool operator==(const BatchGroupSpec&) const = default;
};

struct PipelineSpec {
  std::string name;
  SourceSpec source;
  DecoderKind decoder = DecoderKind::Auto;
  ColorSpec color;
  std::vector<OutputSpec> outputs;
  SinkSpec sink;
  std::optional<DeviceSpec> device;    //!< per-pipeline override of the daemon's device
  int32_t queue_depth = 4;             //!< decoded frames waiting for processing
  int32_t pool_frames = 0;             //!< decode buffers (frame pool slots); 0 = default_pool_frames()
  ControlSpec control;
  std::string batch_group;             //!< the BatchGroupSpec it joins; empty = its own executor
  bool operator==(const PipelineSpec&) const = default;
};

}  // namespace framefuse
