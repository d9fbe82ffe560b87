// Fuzz target: a file source end to end on the CPU path, from any bytes a file (or a broken
// recording) can hold: FFmpeg's probing and decoding through VideoSource (software, one thread),
// then the fused CPU executor with three outputs (a pixel crop resized to 24x24 f32 CHW, a 32x32
// letterbox f16, an 8x8 gray u8 HWC thumbnail), set up again whenever the frame's size or format
// changes. At most 12 frames per input. Properties: the only errors are MediaError and ConfigError
// (a frame the outputs cannot be planned for), nothing crashes, and every f32 value written is
// finite (outputs are poisoned with NaN before each frame).
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <system_error>
#include <vector>

#include "pipeline/decode/video_source.hpp"
#include "pipeline/error.hpp"
#include "pipeline/exec/cpu_executor.hpp"
#include "pipeline/fused/plan.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

using framefuse::fuzz::check;
namespace fs = std::filesystem;

//! The file each input is written to (in memory where /dev/shm exists), removed when the process exits.
struct InputFile {
  fs::path path = (fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path()) /
                  ("framefuse-decode-fuzz-" + std::to_string(getpid()));
  ~InputFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

const fs::path& input_path() {
  static const InputFile file;
  return file.path;
}

std::vector<framefuse::OutputSpec> output_specs() {
  framefuse::OutputSpec crop;
  crop.name = "crop";
  crop.crop = {2, 2, 20, 14, false};
  crop.resize = {24, 24, 0};
  crop.mean = {0.485f, 0.456f, 0.406f};
  crop.std = {0.229f, 0.224f, 0.225f};
  framefuse::OutputSpec letterbox;
  letterbox.name = "letterbox";
  letterbox.resize = {32, 32, 0};
  letterbox.aspect = framefuse::AspectMode::Letterbox;
  letterbox.dtype = framefuse::ops::DType::F16;
  framefuse::OutputSpec thumb;
  thumb.name = "thumb";
  thumb.resize = {8, 8, 0};
  thumb.channels = framefuse::ChannelOrder::Gray;
  thumb.layout = framefuse::ops::Layout::Hwc;
  thumb.dtype = framefuse::ops::DType::U8;
  thumb.interp = framefuse::ops::Interp::Area;
  return {crop, letterbox, thumb};
}

//! The executor and output buffers for one frame shape; `plans` empty when the frame cannot have
//! these outputs (ConfigError from the planner, e.g. a frame smaller than the crop).
struct Outputs {
  framefuse::FrameInfo frame{};
  std::vector<framefuse::OutputPlan> plans;
  std::vector<std::vector<std::byte>> buffers;
  framefuse::CpuExecutor executor{1};

  void setup(const framefuse::FrameInfo& info) {
    frame = info;
    plans.clear();
    buffers.clear();
    try {
      for (const auto& spec : output_specs()) plans.push_back(framefuse::make_output_plan(spec, info, "fuzz"));
    } catch (const framefuse::ConfigError&) {
      plans.clear();
      return;
    }
    for (const auto& p : plans) buffers.emplace_back(p.bytes_per_frame);
    executor.setup(info, framefuse::make_color_params({}, info), plans, 1);
  }

  void process(const framefuse::DecodedFrame& f) {
    if (plans.empty()) return;
    std::vector<std::byte*> outs;
    for (auto& b : buffers) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      for (size_t i = 0; i + sizeof nan <= b.size(); i += sizeof nan) std::memcpy(b.data() + i, &nan, sizeof nan);
      outs.push_back(b.data());
    }
    const framefuse::FrameMemory memory[1] = {f.memory};
    executor.process_frames({&f.view, 1}, memory, outs);
    const auto& crop = buffers[0];
    for (size_t i = 0; i < crop.size(); i += sizeof(float)) {
      float v;
      std::memcpy(&v, crop.data() + i, sizeof v);
      check(std::isfinite(v), "a crop output value is not finite (unwritten or broken)");
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::ofstream(input_path(), std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), size);
  framefuse::SourceSpec spec;
  spec.uri = input_path().string();
  spec.max_frames = 12;
  framefuse::DecodeOptions options;
  options.decoder = framefuse::DecoderKind::Cpu;
  options.threads = 1;
  framefuse::VideoSource source(spec, "fuzz", options);
  Outputs outputs;
  bool set_up = false;
  try {
    source.open();
    while (const auto f = source.read()) {
      if (!set_up || outputs.frame != f->info) {
        outputs.setup(f->info);
        set_up = true;
      }
      outputs.process(*f);
    }
  } catch (const framefuse::MediaError&) {
    // A file FFmpeg cannot open or decode: reported, as a pipeline would.
  }
  return 0;
}
