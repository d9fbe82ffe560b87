#include "pipeline/sinks/npy_sink.hpp"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <set>
#include <spdlog/fmt/fmt.h>
#include <spdlog/fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <system_error>

#include "pipeline/error.hpp"
#include "pipeline/util/text_escape.hpp"

namespace framefuse {
namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "npy payloads are written as host little-endian");

namespace {

const char* npy_descr(ops::DType t) {
  switch (t) {
    case ops::DType::F32: return "<f4";
    case ops::DType::F16: return "<f2";
    case ops::DType::U8: return "|u1";
  }
  return "";
}

//! The .npy 1.0 header (magic through '\n') for a C-order array, space-padded to a multiple of 64
//! bytes and to at least `min_size` bytes so a later rewrite with another shape fits in place.
std::string npy_header(const char* descr, const std::vector<int64_t>& shape, size_t min_size = 0) {
  std::string dims;
  for (const int64_t d : shape) dims += fmt::format("{}, ", d);
  if (shape.size() > 1) dims.resize(dims.size() - 2);   // "(5,)" keeps its comma, "(2, 3)" does not
  else if (!dims.empty()) dims.pop_back();
  const std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
  constexpr size_t kPrefix = 10;   // magic (6) + version (2) + header length (2)
  const size_t size = std::max((kPrefix + dict.size() + 1 + 63) / 64 * 64, min_size);
  const size_t len = size - kPrefix;
  std::string h = "\x93NUMPY";
  h += '\x01';
  h += '\x00';
  h += static_cast<char>(len & 0xff);
  h += static_cast<char>(len >> 8);
  h += dict;
  h.append(size - h.size() - 1, ' ');
  h += '\n';
  return h;
}

std::string errno_text() { return std::error_code(errno, std::generic_category()).message(); }

//! A file written under a temporary name and renamed to `path` when complete.
class AtomicFile {
 public:
  AtomicFile(fs::path path, std::string pipeline) : path_(std::move(path)), pipeline_(std::move(pipeline)) {
    tmp_ = path_;
    tmp_ += ".partial";
    f_ = std::fopen(tmp_.c_str(), "wb");
    if (!f_) fail("cannot create", tmp_);
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (!f_) return;
    std::fclose(f_);
    std::error_code ec;
    fs::remove(tmp_, ec);
  }

  void write(const void* data, size_t n) {
    if (std::fwrite(data, 1, n, f_) != n) fail("cannot write", tmp_);
  }
  void write_at_start(const std::string& bytes) {
    if (std::fseek(f_, 0, SEEK_SET) != 0) fail("cannot seek in", tmp_);
    write(bytes.data(), bytes.size());
  }
  //! Closes and renames; on failure (a full disk shows at the close) the temporary file goes too.
  void commit() {
    std::FILE* f = std::exchange(f_, nullptr);
    std::error_code ec;
    if (std::fclose(f) != 0) {
      const std::string error = errno_text();
      fs::remove(tmp_, ec);
      throw SinkError(fmt::format("pipeline '{}' sink: cannot write '{}': {}", pipeline_, tmp_.string(), error));
    }
    fs::rename(tmp_, path_, ec);
    if (ec) {
      std::error_code ignored;
      fs::remove(tmp_, ignored);
      throw SinkError(fmt::format("pipeline '{}' sink: cannot rename '{}' to '{}': {}", pipeline_, tmp_.string(),
                                  path_.string(), ec.message()));
    }
  }

 private:
  [[noreturn]] void fail(const char* what, const fs::path& p) const {
    throw SinkError(fmt::format("pipeline '{}' sink: {} '{}': {}", pipeline_, what, p.string(), errno_text()));
  }
  fs::path path_, tmp_;
  std::string pipeline_;
  std::FILE* f_ = nullptr;
};

}  // namespace

struct NpySink::Output {
  OutputPlan plan;
  fs::path dir;
  std::unique_ptr<AtomicFile> file;   //!< stacked file being filled
  int64_t frames_in_file = 0;
  size_t header_size = 0;             //!< stacked files: room for the header with n = frames_per_file

  std::vector<int64_t> stacked_shape(int64_t n) const {
    std::vector<int64_t> s{n};
    s.insert(s.end(), plan.shape.begin(), plan.shape.end());
    return s;
  }

  void write_metadata(const std::string& pipeline, int32_t frames_per_file) const {
    const auto& p = plan.params;
    const char* channels = p.channels == ops::Channels::Gray  ? "gray"
                           : p.channels == ops::Channels::Bgr ? "bgr"
                                                              : "rgb";
    const std::string json = fmt::format(
        "{{\n  \"pipeline\": {},\n  \"output\": {},\n  \"dtype\": \"{}\",\n  \"shape\": [{}],\n"
        "  \"layout\": \"{}\",\n  \"channels\": \"{}\",\n  \"frames_per_file\": {},\n"
        "  \"normalization\": {{\"formula\": \"pixel * mul + add, pixel in 0..255\", "
        "\"mul\": [{}], \"add\": [{}]}}\n}}\n",
        json_string(pipeline), json_string(plan.name), ops::dtype_name(p.store.dtype), fmt::join(plan.shape, ", "),
        p.store.layout == ops::Layout::Chw ? "chw" : "hwc", channels, frames_per_file,
        fmt::join(p.norm.mul, ", "), fmt::join(p.norm.add, ", "));
    AtomicFile f(dir / "metadata.json", pipeline);
    f.write(json.data(), json.size());
    f.commit();
  }

  void finish_file() {
    if (!file) return;
    file->write_at_start(npy_header(npy_descr(plan.params.store.dtype), stacked_shape(frames_in_file), header_size));
    file->commit();
    file.reset();
    frames_in_file = 0;
  }
};

NpySink::NpySink(std::string directory, std::vector<OutputPlan> plans, int32_t frames_per_file, std::string pipeline)
    : directory_(directory), frames_per_file_(frames_per_file), pipeline_(std::move(pipeline)) {
  const std::string ctx = fmt::format("pipeline '{}' sink", pipeline_);
  if (frames_per_file < 1) throw ConfigError(fmt::format("{}: frames_per_file must be >= 1, got {}", ctx, frames_per_file));
  if (directory.empty()) throw ConfigError(fmt::format("{}: npy sink needs a directory", ctx));
  std::set<std::string> names;
  for (auto& plan : plans) {
    const std::string& n = plan.name;
    if (n.empty() || n == "." || n == ".." || n.find_first_of("/\\") != std::string::npos)
      throw ConfigError(fmt::format("{}: output name '{}' cannot be a folder name", ctx, n));
    if (!names.insert(n).second) throw ConfigError(fmt::format("{}: two outputs are named '{}'", ctx, n));
    Output o;
    o.dir = fs::path(directory) / n;
    std::error_code ec;
    fs::create_directories(o.dir, ec);
    if (ec) throw SinkError(fmt::format("{}: cannot create folder '{}': {}", ctx, o.dir.string(), ec.message()));
    o.header_size = npy_header(npy_descr(plan.params.store.dtype), o.stacked_shape(frames_per_file)).size();
    o.plan = std::move(plan);
    o.write_metadata(pipeline_, frames_per_file);
    outputs_.push_back(std::move(o));
  }
}

NpySink::~NpySink() {
  try {
    flush();
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
  }
}

void NpySink::write(int64_t frame_index, std::span<const std::byte* const> outputs) {
  if (outputs.size() != outputs_.size())
    throw std::logic_error(fmt::format("pipeline '{}' sink: {} outputs given, {} planned", pipeline_,
                                       outputs.size(), outputs_.size()));
  const auto name = fmt::format("{:08d}.npy", frame_index);
  for (size_t k = 0; k < outputs_.size(); ++k) {
    Output& o = outputs_[k];
    if (frames_per_file_ == 1) {
      AtomicFile f(o.dir / name, pipeline_);
      const std::string header = npy_header(npy_descr(o.plan.params.store.dtype), o.plan.shape);
      f.write(header.data(), header.size());
      f.write(outputs[k], o.plan.bytes_per_frame);
      f.commit();
      continue;
    }
    if (!o.file) {
      o.file = std::make_unique<AtomicFile>(o.dir / name, pipeline_);
      o.file->write(std::string(o.header_size, ' ').data(), o.header_size);   // real header at finish
    }
    o.file->write(outputs[k], o.plan.bytes_per_frame);
    if (++o.frames_in_file == frames_per_file_) o.finish_file();
  }
}

void NpySink::write_control(int64_t frame_index, const control::ControlRecord& r) {
  if (!control_log_) {
    const auto path = fs::path(directory_) / "control.jsonl";
    control_log_.reset(std::fopen(path.c_str(), "a"));
    if (!control_log_) throw SinkError(fmt::format("pipeline '{}' sink: cannot open '{}'", pipeline_, path.string()));
  }
  std::string health;
  for (int c = 0; c < control::Health::kConditions; ++c)
    if (r.health_flags & (1u << c)) health += fmt::format("{}\"{}\"", health.empty() ? "" : ",", control::kHealthNames[c]);
  std::string outs;
  for (int k = 0; k < r.num_outputs && k < int(outputs_.size()); ++k) {
    const auto& o = r.out[k];
    outs += fmt::format("{}{}:{{\"gain\":{},\"luma\":{},\"roi\":[{},{},{},{}]}}", k ? "," : "",
                        json_string(outputs_[size_t(k)].plan.name), o.gain, o.mean_luma, o.x, o.y, o.w, o.h);
  }
  fmt::print(control_log_.get(),
             "{{\"frame\":{},\"measured_frame\":{},\"mean_luma\":{},\"variance\":{},\"motion\":{},"
             "\"black\":{},\"white\":{},\"health\":[{}],\"outputs\":{{{}}}}}\n",
             frame_index, r.iteration, r.mean_luma, r.variance, r.motion, r.black_fraction, r.white_fraction, health,
             outs);
}

void NpySink::flush() {
  for (auto& o : outputs_) o.finish_file();
  if (control_log_ && std::fflush(control_log_.get()) != 0)
    throw SinkError(fmt::format("pipeline '{}' sink: cannot write control.jsonl", pipeline_));
}

}  // namespace framefuse
