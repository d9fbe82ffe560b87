#include "config/load.hpp"

#include <arpa/inet.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <spdlog/fmt/fmt.h>
#include <sstream>

#include "config/units.hpp"
#include "pipeline/control/delay_ring.hpp"
#include "pipeline/decode/codec_cost.hpp"
#include "pipeline/error.hpp"
#include "pipeline/exec/device.hpp"
#include "pipeline/memory/frame_memory.hpp"
#include "pipeline/fused/fused_params.hpp"
#include "pipeline/sinks/shm_sink.hpp"
#include "pipeline/util/redact.hpp"
#include "pipeline/util/text_escape.hpp"

namespace framefuse::config {
namespace fs = std::filesystem;
using std::chrono::microseconds;
using std::chrono::milliseconds;

namespace {

constexpr int32_t kMaxImageSide = 16384;   // resize / centre-crop sides; catches typos like 22400
constexpr size_t kMaxNameLength = 64;

//! Where the text came from: the name errors start with, the folder relative paths start from.
struct Doc {
  std::string name;
  fs::path base_dir;
};

std::string join(std::span<const std::string_view> words, std::string_view sep = ", ") {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += sep;
    out += words[i];
  }
  return out;
}

//! Optimal-string-alignment distance: insertions, deletions, substitutions, adjacent swaps.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::string unknown_key_message(std::string_view key, std::span<const std::string_view> known) {
  const auto best = std::min_element(known.begin(), known.end(), [&](std::string_view x, std::string_view y) {
    return edit_distance(key, x) < edit_distance(key, y);
  });
  if (best != known.end() && edit_distance(key, *best) <= (best->size() >= 6 ? 2u : 1u))
    return fmt::format("unknown key '{}' (did you mean '{}'?)", key, *best);
  return fmt::format("unknown key '{}' (expected {})", key, join(known));
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

//! `${VAR}` and `${VAR:-default}` (default also when VAR is empty); `$${` is a literal `${`.
std::string substitute_env(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.substr(i, 3) == "$${") {
      out += "${";
      i += 3;
      continue;
    }
    if (s.substr(i, 2) != "${") {
      out += s[i++];
      continue;
    }
    const size_t close = s.find('}', i);
    if (close == std::string_view::npos) throw ConfigError(fmt::format("unterminated '${{' in '{}'", s));
    const std::string_view inner = s.substr(i + 2, close - i - 2);
    const size_t dflt = inner.find(":-");
    const std::string var(inner.substr(0, dflt));
    if (var.empty() || !std::all_of(var.begin(), var.end(), is_name_char) || (var[0] >= '0' && var[0] <= '9'))
      throw ConfigError(fmt::format("'${{{}}}' is not a valid environment variable reference", inner));
    const char* value = std::getenv(var.c_str());
    if (value != nullptr && (dflt == std::string_view::npos || *value != '\0')) {
      out += value;
    } else if (dflt != std::string_view::npos) {
      out += inner.substr(dflt + 2);
    } else {
      throw ConfigError(fmt::format("environment variable '{}' is not set (write ${{{}:-default}} to give a default)",
                                    var, var));
    }
    i = close + 1;
  }
  return out;
}

template <class T>
struct Named {
  std::string_view name;
  T value;
};

class Map;

//! One YAML node with the key path that reached it and where it sits in the text.
class Value {
 public:
  Value(const Doc& doc, YAML::Node node, std::string path, YAML::Mark mark)
      : doc_(&doc), node_(std::move(node)), path_(std::move(path)), mark_(mark) {}

  //! Throws the one-line ConfigError `<file>:<line>:<col>: <path>: msg` (input it quotes made printable).
  [[noreturn]] void fail(std::string_view msg) const {
    const std::string where = fmt::format("{}:{}:{}", doc_->name, mark_.line + 1, mark_.column + 1);
    throw ConfigError(
        printable_line(path_.empty() ? fmt::format("{}: {}", where, msg) : fmt::format("{}: {}: {}", where, path_, msg)));
  }

  const Doc& doc() const { return *doc_; }
  const YAML::Node& node() const { return node_; }
  const YAML::Mark& mark() const { return mark_; }
  const std::string& path() const { return path_; }
  int line() const { return mark_.line + 1; }
  bool is_null() const { return node_.IsNull(); }
  bool is_sequence() const { return node_.IsSequence(); }

  std::string_view kind() const {
    if (node_.IsMap()) return "a mapping";
    if (node_.IsSequence()) return "a list";
    if (node_.IsNull()) return "an empty value";
    return "a single value";
  }

  //! Path of a key below this mapping / an element of this list.
  std::string key_path(std::string_view key) const {
    return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
  }

  //! The scalar, with environment references substituted.
  std::string text() const {
    if (node_.IsNull()) fail("value is missing");
    if (!node_.IsScalar()) fail(fmt::format("expected a single value, got {}", kind()));
    try {
      return substitute_env(node_.Scalar());
    } catch (const ConfigError& e) {
      fail(e.what());
    }
  }

  //! f(text) with its ConfigError located here.
  template <class F>
  auto parse(F&& f) const {
    const std::string s = text();
    try {
      return f(std::string_view(s));
    } catch (const ConfigError& e) {
      fail(e.what());
    }
  }

  int64_t integer(int64_t lo, int64_t hi) const {
    const std::string s = text();
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty())
      fail(fmt::format("expected a whole number, got '{}'", s));
    if (v < lo || v > hi) {
      if (hi == std::numeric_limits<int64_t>::max()) fail(fmt::format("must be at least {}, got {}", lo, v));
      fail(fmt::format("must be between {} and {}, got {}", lo, hi, v));
    }
    return v;
  }

  double number() const {
    return parse([](std::string_view s) { return parse_number(s); });
  }

  //! A finite number in [lo, hi].
  double number(double lo, double hi) const {
    const double v = number();
    if (v < lo || v > hi) fail(fmt::format("must be between {} and {}, got {}", lo, hi, v));
    return v;
  }

  bool boolean() const {
    static constexpr Named<bool> kBools[] = {{"true", true},  {"false", false}, {"yes", true},
                                             {"no", false},   {"on", true},     {"off", false},
                                             {"True", true},  {"False", false}};
    const std::string s = text();
    for (const auto& b : kBools) {
      if (b.name == s) return b.value;
    }
    fail(fmt::format("expected true or false, got '{}'", s));
  }

  template <class T, size_t N>
  T choice(const Named<T> (&names)[N]) const {
    const std::string s = text();
    std::array<std::string_view, N> expected;
    for (size_t i = 0; i < N; ++i) {
      if (names[i].name == s) return names[i].value;
      expected[i] = names[i].name;
    }
    fail(fmt::format("unknown value '{}' (expected {})", s, join(expected)));
  }

  microseconds duration(bool allow_zero) const {
    const microseconds d = parse(parse_duration);
    if (!allow_zero && d.count() == 0) fail("must be longer than 0s");
    return d;
  }

  milliseconds duration_ms(bool allow_zero) const {
    const microseconds d = duration(allow_zero);
    if (d.count() % 1000 != 0) fail(fmt::format("'{}' is not a whole number of milliseconds", format_duration(d)));
    return std::chrono::duration_cast<milliseconds>(d);
  }

  std::vector<Value> items() const {
    if (!node_.IsSequence()) fail(fmt::format("expected a list, got {}", kind()));
    std::vector<Value> out;
    for (size_t i = 0; i < node_.size(); ++i) {
      const YAML::Node item = node_[i];
      out.emplace_back(*doc_, item, fmt::format("{}[{}]", path_, i), item.IsNull() ? mark_ : item.Mark());
    }
    return out;
  }

  Map map(std::initializer_list<std::string_view> keys) const;

 private:
  //! A finite decimal number or a fraction "a/b" (the form `scale: 1/255` takes).
  static double parse_number(std::string_view s) {
    const auto one = [s](std::string_view part) {
      double v = 0;
      const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
      if (ec != std::errc() || end != part.data() + part.size() || part.empty() || !std::isfinite(v))
        throw ConfigError(fmt::format("expected a number, got '{}'", s));
      return v;
    };
    const size_t slash = s.find('/');
    if (slash == std::string_view::npos) return one(s);
    const double den = one(s.substr(slash + 1));
    if (den == 0) throw ConfigError(fmt::format("'{}' divides by zero", s));
    return one(s.substr(0, slash)) / den;
  }

  const Doc* doc_;
  YAML::Node node_;
  std::string path_;
  YAML::Mark mark_;
};

//! A mapping whose keys were checked against the schema: no unknown keys, no duplicates.
//! An empty value (`http:` with nothing after it) is an empty mapping: all defaults.
class Map {
 public:
  struct Entry {
    std::string key;
    int key_line;
    Value value;
  };
  //! Why `key` may not appear in this mapping; empty when it may.
  using KeyCheck = std::function<std::string(std::string_view key)>;

  Map(const Value& self, std::initializer_list<std::string_view> known)
      : Map(self, [known_keys = std::vector<std::string_view>(known)](std::string_view key) {
          const bool ok = std::find(known_keys.begin(), known_keys.end(), key) != known_keys.end();
          return ok ? std::string() : unknown_key_message(key, known_keys);
        }) {}

  //! A mapping whose keys are names `reject` accepts (e.g. a table keyed by codec).
  Map(const Value& self, const KeyCheck& reject) : self_(self) {
    if (self.is_null()) return;
    if (!self.node().IsMap()) self.fail(fmt::format("expected a mapping, got {}", self.kind()));
    for (const auto& kv : self.node()) {
      const YAML::Node k = kv.first, v = kv.second;
      if (!k.IsScalar()) Value(self.doc(), k, self.path(), k.Mark()).fail("keys must be plain names");
      const std::string key = k.Scalar();
      const Value at_key(self.doc(), k, self.key_path(key), k.Mark());
      if (const std::string why = reject(key); !why.empty()) at_key.fail(why);
      if (const auto dup = find(key)) at_key.fail(fmt::format("duplicate key (first at line {})", dup->key_line));
      entries_.push_back(
          {key, k.Mark().line + 1, Value(self.doc(), v, self.key_path(key), v.IsNull() ? k.Mark() : v.Mark())});
    }
  }

  //! The keys and values in the order the document gives them.
  const std::vector<Entry>& entries() const { return entries_; }

  std::optional<Value> get(std::string_view key) const {
    const auto e = find(key);
    return e ? std::optional<Value>(e->value) : std::nullopt;
  }

  Value need(std::string_view key) const {
    if (auto v = get(key)) return *v;
    missing(key).fail("required key is missing");
  }

  //! A stand-in for an absent key, located at this mapping, for errors about its absence.
  Value missing(std::string_view key) const {
    return Value(self_.doc(), YAML::Node(), self_.key_path(key), self_.mark());
  }

  const Value& self() const { return self_; }

 private:
  std::optional<Entry> find(std::string_view key) const {
    for (const Entry& e : entries_) {
      if (e.key == key) return e;
    }
    return std::nullopt;
  }

  Value self_;
  std::vector<Entry> entries_;
};

Map Value::map(std::initializer_list<std::string_view> keys) const { return Map(*this, keys); }

// ---- enumerations as YAML spells them ----

constexpr Named<std::string_view> kLogLevels[] = {
    {"trace", "trace"}, {"debug", "debug"}, {"info", "info"}, {"warn", "warn"}, {"error", "error"}};
constexpr Named<LogConfig::Format> kLogFormats[] = {{"text", LogConfig::Format::Text},
                                                    {"json", LogConfig::Format::Json}};
constexpr Named<ReadinessPolicy> kReadiness[] = {{"all", ReadinessPolicy::All}, {"any", ReadinessPolicy::Any}};
constexpr Named<RtspTransport> kTransports[] = {{"tcp", RtspTransport::Tcp}, {"udp", RtspTransport::Udp}};
constexpr Named<DecoderKind> kDecoders[] = {
    {"auto", DecoderKind::Auto}, {"nvdec", DecoderKind::Nvdec}, {"cpu", DecoderKind::Cpu}};
constexpr Named<std::optional<ops::ColorMatrix>> kMatrices[] = {
    {"auto", std::nullopt}, {"bt601", ops::ColorMatrix::Bt601}, {"bt709", ops::ColorMatrix::Bt709}};
constexpr Named<std::optional<ops::ColorRange>> kRanges[] = {
    {"auto", std::nullopt}, {"limited", ops::ColorRange::Limited}, {"full", ops::ColorRange::Full}};
constexpr Named<ops::ChromaUpsample> kUpsamples[] = {{"nearest", ops::ChromaUpsample::Nearest},
                                                     {"linear", ops::ChromaUpsample::Linear}};
constexpr Named<bool> kCropUnits[] = {{"pixels", false}, {"fraction", true}};
constexpr Named<ops::Interp> kInterps[] = {
    {"nearest", ops::Interp::Nearest}, {"linear", ops::Interp::Linear}, {"area", ops::Interp::Area}};
constexpr Named<AspectMode> kAspects[] = {
    {"stretch", AspectMode::Stretch}, {"letterbox", AspectMode::Letterbox}, {"fill", AspectMode::CenterCropFill}};
constexpr Named<ChannelOrder> kChannels[] = {
    {"rgb", ChannelOrder::Rgb}, {"bgr", ChannelOrder::Bgr}, {"gray", ChannelOrder::Gray}};
constexpr Named<ops::Layout> kLayouts[] = {{"chw", ops::Layout::Chw}, {"hwc", ops::Layout::Hwc}};
constexpr Named<ops::DType> kDTypes[] = {
    {"float32", ops::DType::F32}, {"float16", ops::DType::F16}, {"uint8", ops::DType::U8}};
constexpr Named<SinkKind> kSinks[] = {
    {"npy", SinkKind::Npy}, {"null", SinkKind::Null}, {"shm", SinkKind::Shm}, {"cuda_ipc", SinkKind::CudaIpc}};

// ---- sections ----

//! Absolute and normal, without a trailing separator ("out/" and "./out" name one folder).
std::string resolve_path(const Doc& doc, const std::string& p) {
  const fs::path path(p);
  fs::path full = (path.is_absolute() ? path : doc.base_dir / path).lexically_normal();
  if (!full.has_filename() && full.has_relative_path()) full = full.parent_path();
  return full.string();
}

//! Pipeline and output names label metrics and name folders.
std::string read_name(const Value& v) {
  std::string name = v.text();
  if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return is_name_char(c) || c == '-'; }))
    v.fail(fmt::format("invalid name '{}' (use letters, digits, '_' and '-')", name));
  if (name.size() > kMaxNameLength) v.fail(fmt::format("name is longer than {} characters", kMaxNameLength));
  return name;
}

//! read_name, and no other `what` (pipeline, output) of the same scope took it. `seen`: name -> line.
std::string read_unique_name(const Value& v, std::string_view what, std::map<std::string, int>& seen) {
  std::string name = read_name(v);
  if (const auto [it, fresh] = seen.emplace(name, v.line()); !fresh)
    v.fail(fmt::format("duplicate {} name '{}' (first at line {})", what, name, it->second));
  return name;
}

LogConfig read_log(const Value& v) {
  const Map m = v.map({"level", "format"});
  LogConfig c;
  if (const auto x = m.get("level")) c.level = std::string(x->choice(kLogLevels));
  if (const auto x = m.get("format")) c.format = x->choice(kLogFormats);
  return c;
}

HttpConfig read_http(const Value& v) {
  const Map m = v.map({"enabled", "bind", "port", "max_connections", "idle_timeout", "max_header_bytes"});
  HttpConfig c;
  if (const auto x = m.get("enabled")) c.enabled = x->boolean();
  if (const auto x = m.get("bind")) {
    c.bind = x->text();
    if (!is_ip_address(c.bind)) x->fail(fmt::format("'{}' is not an IPv4 or IPv6 address", c.bind));
  }
  if (const auto x = m.get("port")) c.port = static_cast<uint16_t>(x->integer(1, 65535));
  if (const auto x = m.get("max_connections")) c.max_connections = static_cast<int>(x->integer(1, 100000));
  if (const auto x = m.get("idle_timeout")) c.idle_timeout = x->duration_ms(false);
  if (const auto x = m.get("max_header_bytes")) {
    c.max_header_bytes = x->parse(parse_size);
    if (c.max_header_bytes < 1024 || c.max_header_bytes > (1u << 20))
      x->fail(fmt::format("must be between 1KiB and 1MiB, got {} bytes", c.max_header_bytes));
  }
  return c;
}

//! `decode.codec_costs`: entries over the measured table; a field left out keeps the key's measured
//! cost (1 where none was measured).
void read_codec_costs(const Value& v, CodecCosts& costs) {
  const Map m(v, [](std::string_view key) {
    return is_codec_cost_key(key) ? std::string()
                                  : fmt::format("unknown codec '{}' (expected an FFmpeg video codec name such as "
                                                "h264, hevc, av1, vp9, mjpeg; + _10bit for deeper streams)",
                                                key);
  });
  for (const Map::Entry& e : m.entries()) {
    const Map fields = e.value.map({"nvdec", "cpu"});
    CodecCost& cost = costs[e.key];   // a new key starts at the unit
    if (const auto x = fields.get("nvdec")) cost.nvdec = x->number(0.01, 100);
    if (const auto x = fields.get("cpu")) cost.cpu = x->number(0.01, 100);
  }
}

DecodeConfig read_decode(const Value& v) {
  const Map m = v.map({"nvdec_fps", "cpu_fps", "codec_costs"});
  DecodeConfig c;
  if (const auto x = m.get("nvdec_fps")) c.nvdec_fps = x->number(1, 1e6);
  if (const auto x = m.get("cpu_fps"); x && x->text() != "auto") c.cpu_fps = x->number(1, 1e6);
  if (const auto x = m.get("codec_costs")) read_codec_costs(*x, c.codec_costs);
  return c;
}

//! `scheme://...` -> the scheme; plain paths -> empty.
std::string_view uri_scheme(std::string_view uri) {
  const size_t sep = uri.find("://");
  if (sep == std::string_view::npos || sep == 0) return {};
  const std::string_view scheme = uri.substr(0, sep);
  const bool ok = std::all_of(scheme.begin(), scheme.end(), [](char c) {
    return is_name_char(c) || c == '+' || c == '.' || c == '-';
  });
  return ok ? scheme : std::string_view{};
}

void read_uri(const Value& v, SourceSpec& s) {
  s.uri = v.text();
  if (s.uri.empty()) v.fail("must not be empty");
  const std::string_view scheme = uri_scheme(s.uri);
  if (scheme == "rtsp" || scheme == "rtsps") {
    s.kind = SourceKind::Rtsp;
    const std::string_view rest = std::string_view(s.uri).substr(scheme.size() + 3);
    const std::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
    if (authority.substr(authority.rfind('@') + 1).empty()) v.fail(fmt::format("'{}' has no host", redact_uri(s.uri)));
    return;
  }
  if (!scheme.empty())
    v.fail(fmt::format("unsupported URI scheme '{}' (expected rtsp://, rtsps:// or a file path)", scheme));
  s.kind = SourceKind::File;
  s.uri = resolve_path(v.doc(), s.uri);
  std::error_code ec;
  const fs::file_status st = fs::status(s.uri, ec);
  if (!fs::exists(st)) v.fail(fmt::format("file '{}' does not exist", s.uri));
  if (fs::is_directory(st)) v.fail(fmt::format("'{}' is a directory, not a video file", s.uri));
}

void read_reconnect(const Value& v, SourceSpec& s) {
  const Map m = v.map({"initial", "max", "attempts"});
  if (const auto x = m.get("initial")) s.reconnect_initial = x->duration_ms(false);
  if (const auto x = m.get("max")) s.reconnect_max = x->duration_ms(false);
  if (const auto x = m.get("attempts")) {
    s.max_reconnects = x->text() == "unlimited" ? -1 : static_cast<int32_t>(x->integer(0, 1'000'000'000));
  }
  if (s.reconnect_initial > s.reconnect_max) {
    const Value at = m.get("initial") ? *m.get("initial") : *m.get("max");
    at.fail(fmt::format("initial delay {} is longer than max {}", format_duration(s.reconnect_initial),
                        format_duration(s.reconnect_max)));
  }
}

SourceSpec read_source(const Value& v) {
  const Map m =
      v.map({"uri", "loop", "realtime", "transport", "timeout", "stall_timeout", "reconnect", "max_frames"});
  SourceSpec s;
  read_uri(m.need("uri"), s);
  const bool rtsp = s.kind == SourceKind::Rtsp;
  if (const auto x = m.get("loop")) {
    s.loop = x->boolean();
    if (s.loop && rtsp) x->fail("loop applies to file sources only");
  }
  if (const auto x = m.get("realtime")) {
    s.realtime = x->boolean();
    if (s.realtime && rtsp) x->fail("realtime applies to file sources only (cameras are real time)");
  }
  if (const auto x = m.get("transport")) {
    s.transport = x->choice(kTransports);
    if (s.transport == RtspTransport::Udp && !rtsp) x->fail("transport udp applies to rtsp sources only");
  }
  if (const auto x = m.get("timeout")) s.socket_timeout = x->duration(false);
  if (const auto x = m.get("stall_timeout")) s.stall_timeout = x->duration_ms(false);
  if (const auto x = m.get("reconnect")) read_reconnect(*x, s);
  if (const auto x = m.get("max_frames")) {
    s.max_frames = x->integer(-1, std::numeric_limits<int64_t>::max());
    if (s.max_frames == 0) x->fail("must be -1 (all frames) or at least 1");
  }
  return s;
}

ColorSpec read_color(const Value& v) {
  const Map m = v.map({"matrix", "range", "chroma_upsample"});
  ColorSpec c;
  if (const auto x = m.get("matrix")) c.matrix = x->choice(kMatrices);
  if (const auto x = m.get("range")) c.range = x->choice(kRanges);
  if (const auto x = m.get("chroma_upsample")) c.chroma_upsample = x->choice(kUpsamples);
  return c;
}

RectSpec read_crop(const Value& v) {
  const Map m = v.map({"x", "y", "w", "h", "units"});
  RectSpec r;
  r.fractional = false;
  if (const auto x = m.get("units")) r.fractional = x->choice(kCropUnits);
  const auto at = [&](std::string_view key, double& out, bool extent) {
    const std::optional<Value> x = extent ? std::optional<Value>(m.need(key)) : m.get(key);
    if (!x) return;
    if (r.fractional) {
      out = x->number(0, 1);
      if (extent && out == 0) x->fail("must be greater than 0");
    } else {
      out = static_cast<double>(x->integer(extent ? 1 : 0, kMaxImageSide * 4));
    }
  };
  at("x", r.x, false);
  at("y", r.y, false);
  at("w", r.w, true);
  at("h", r.h, true);
  if (r.fractional) {
    constexpr double kSlack = 1e-9;   // 0.7 + 0.3 is not exactly 1 in binary
    if (r.x + r.w > 1 + kSlack)
      m.need("w").fail(fmt::format("crop ends past the right edge (x + w = {} > 1)", r.x + r.w));
    if (r.y + r.h > 1 + kSlack)
      m.need("h").fail(fmt::format("crop ends past the bottom edge (y + h = {} > 1)", r.y + r.h));
  }
  return r;
}

ResizeSpec read_resize(const Value& v) {
  const Map m = v.map({"shorter_side", "width", "height"});
  const auto side = m.get("shorter_side"), width = m.get("width"), height = m.get("height");
  if (side && (width || height)) side->fail("give either shorter_side or width and height, not both");
  if (!side && !width && !height) v.fail("give shorter_side, or width and height");
  ResizeSpec r;
  if (side) {
    r.shorter_side = static_cast<int32_t>(side->integer(1, kMaxImageSide));
    return r;
  }
  if (!width || !height)
    m.missing(width ? "height" : "width").fail("required key is missing (width and height go together)");
  r.width = static_cast<int32_t>(width->integer(1, kMaxImageSide));
  r.height = static_cast<int32_t>(height->integer(1, kMaxImageSide));
  return r;
}

std::array<int32_t, 2> read_center_crop(const Value& v) {
  if (!v.is_sequence()) {
    const auto n = static_cast<int32_t>(v.integer(1, kMaxImageSide));
    return {n, n};
  }
  const std::vector<Value> items = v.items();
  if (items.size() != 2) v.fail(fmt::format("expected [width, height] or one size, got {} values", items.size()));
  return {static_cast<int32_t>(items[0].integer(1, kMaxImageSide)),
          static_cast<int32_t>(items[1].integer(1, kMaxImageSide))};
}

//! A per-channel value: one number for all channels, or [r, g, b]. Returns how many were given.
struct Triple {
  std::array<float, 3> values;
  size_t given;
};

template <class Check>
Triple read_triple(const Value& v, Check&& check) {
  const auto one = [&](const Value& x) {
    const double d = x.number();
    check(x, d);
    return static_cast<float>(d);
  };
  if (!v.is_sequence()) {
    const float f = one(v);
    return {{f, f, f}, 1};
  }
  const std::vector<Value> items = v.items();
  if (items.size() == 1) {
    const float f = one(items[0]);
    return {{f, f, f}, 1};
  }
  if (items.size() != 3) v.fail(fmt::format("expected one value or 3 (r, g, b), got {}", items.size()));
  return {{one(items[0]), one(items[1]), one(items[2])}, 3};
}

//! `d`, read at `v`, as the float the ops use: finite, and not 0 when `nonzero`.
float as_float(const Value& v, double d, bool nonzero) {
  if (nonzero && d == 0) v.fail("must not be 0");
  const float f = static_cast<float>(d);
  if (!std::isfinite(f) || (nonzero && f == 0)) v.fail(fmt::format("{} is outside float's range", d));
  return f;
}

OutputSpec read_output(const Value& v, std::map<std::string, int>& names) {
  const Map m = v.map({"name", "crop", "resize", "interp", "aspect", "center_crop", "pad_value", "channels", "scale",
                       "mean", "std", "layout", "dtype"});
  OutputSpec o;
  o.name = read_unique_name(m.need("name"), "output", names);
  if (const auto x = m.get("crop")) o.crop = read_crop(*x);
  if (const auto x = m.get("resize")) o.resize = read_resize(*x);
  if (const auto x = m.get("interp")) o.interp = x->choice(kInterps);
  if (const auto x = m.get("aspect")) {
    o.aspect = x->choice(kAspects);
    if (o.aspect != AspectMode::Stretch && o.resize.width == 0)
      x->fail(fmt::format("aspect '{}' needs resize {{width, height}}", x->text()));
  }
  if (const auto x = m.get("center_crop"); x && !x->is_null()) o.center_crop = read_center_crop(*x);
  if (const auto x = m.get("pad_value")) {
    o.pad_value = read_triple(*x, [](const Value& e, double d) {
                    if (d < 0 || d > 255) e.fail(fmt::format("must be between 0 and 255, got {}", d));
                  }).values;
  }
  if (const auto x = m.get("channels")) o.channels = x->choice(kChannels);
  if (const auto x = m.get("layout")) o.layout = x->choice(kLayouts);
  if (const auto x = m.get("dtype")) o.dtype = x->choice(kDTypes);
  // uint8 outputs keep pixel values unless told otherwise; float outputs default to 0..1.
  o.scale = o.dtype == ops::DType::U8 ? 1.f : o.scale;
  if (const auto x = m.get("scale")) o.scale = as_float(*x, x->number(), true);
  const bool gray = o.channels == ChannelOrder::Gray;
  const auto per_channel = [&](const Value& x, auto&& check) {
    const Triple t = read_triple(x, check);
    if (gray && t.given == 3) x.fail("channels gray takes one value, not 3");
    return t.values;
  };
  if (const auto x = m.get("mean")) o.mean = per_channel(*x, [](const Value& e, double d) { as_float(e, d, false); });
  if (const auto x = m.get("std")) o.std = per_channel(*x, [](const Value& e, double d) { as_float(e, d, true); });
  // The normalize op computes x * (scale / std) - mean / std in float: each finite, and not 0.
  for (int c = 0; c < 3; ++c) {
    const float mul = o.scale / o.std[c], add = -o.mean[c] / o.std[c];
    if (!std::isfinite(mul) || mul == 0 || !std::isfinite(add))
      v.fail(fmt::format("normalizes channel {} by x * {} + {} in float: scale / std must be finite and not 0, "
                         "mean / std finite",
                         c, mul, add));
  }
  return o;
}

//! `used` maps what sinks write to (an npy sink's absolute folder, "shm:" + a ring's name) to the
//! pipeline that does, so no two pipelines write to one. `device`: the pipeline's, as configured.
SinkSpec read_sink(const Value& v, const std::string& pipeline, std::map<std::string, std::string>& used,
                   const DeviceSpec& device) {
  const Map m = v.map({"type", "directory", "frames_per_file", "name", "slots"});
  SinkSpec s;
  const Value type = m.need("type");
  s.kind = type.is_null() ? SinkKind::Null : type.choice(kSinks);   // `type: null` is YAML's null
  for (const std::string_view key : {"directory", "frames_per_file"}) {
    if (const auto x = m.get(key); x && s.kind != SinkKind::Npy) x->fail("applies to npy sinks only");
  }
  const bool ring = s.kind == SinkKind::Shm || s.kind == SinkKind::CudaIpc;
  for (const std::string_view key : {"name", "slots"}) {
    if (const auto x = m.get(key); x && !ring) x->fail("applies to shm and cuda_ipc sinks only");
  }
  if (s.kind == SinkKind::CudaIpc && device.kind == DeviceKind::Cpu)
    type.fail("cuda_ipc needs a cuda device, but this pipeline's device is cpu");
  if (s.kind == SinkKind::Null) return s;
  if (ring) {
    const std::optional<Value> name = m.get("name");
    s.shm_name = name ? name->text() : pipeline;
    if (name && !valid_shm_name(s.shm_name))
      name->fail(fmt::format("'{}' is not a shared-memory name (1-200 letters, digits, '.', '_', '-'; not starting "
                             "with '.')",
                             s.shm_name));
    // A device ring holds the frames in flight too: they are made in their slots.
    if (const auto x = m.get("slots"))
      s.slots = static_cast<int32_t>(x->integer(s.kind == SinkKind::CudaIpc ? kMinDeviceRingSlots : 1, 1024));
    if (const auto [it, fresh] = used.emplace("shm:" + s.shm_name, pipeline); !fresh)
      (name ? *name : type).fail(
          fmt::format("shared-memory ring '{}' is already written by pipeline '{}'", s.shm_name, it->second));
    return s;
  }
  const Value dir = m.need("directory");
  s.directory = dir.text();
  if (s.directory.empty()) dir.fail("must not be empty");
  s.directory = resolve_path(v.doc(), s.directory);
  if (const auto [it, fresh] = used.emplace(s.directory, pipeline); !fresh)
    dir.fail(fmt::format("directory '{}' is already used by pipeline '{}'", s.directory, it->second));
  if (const auto x = m.get("frames_per_file")) s.frames_per_file = static_cast<int32_t>(x->integer(1, 1'000'000));
  return s;
}

// ---- control (pipeline/control/) ----

//! A number in (0, hi].
double positive(const Value& v, double hi) {
  const double d = v.number();
  if (d <= 0) v.fail(fmt::format("must be greater than 0, got {}", d));
  if (d > hi) v.fail(fmt::format("must be at most {}, got {}", hi, d));
  return d;
}

//! `enabled`: a section that is given is on unless it says `enabled: false`.
bool section_enabled(const Map& m) {
  const auto x = m.get("enabled");
  return x ? x->boolean() : true;
}

//! An output name of this pipeline.
std::string read_output_ref(const Value& v, const std::vector<OutputSpec>& outputs) {
  std::string name = v.text();
  std::vector<std::string_view> known;
  for (const auto& o : outputs) {
    if (o.name == name) return name;
    known.push_back(o.name);
  }
  v.fail(fmt::format("unknown output '{}' (expected {})", name, join(known)));
}

AutoGainSpec read_auto_gain(const Value& v, const std::vector<OutputSpec>& outputs) {
  const Map m = v.map({"enabled", "outputs", "target", "kp", "ki", "min_gain", "max_gain", "max_step"});
  AutoGainSpec a;
  a.enabled = section_enabled(m);
  if (const auto x = m.get("outputs")) {
    for (const Value& item : x->items()) a.outputs.push_back(read_output_ref(item, outputs));
  }
  if (const auto x = m.get("target")) a.target = positive(*x, 1);
  if (const auto x = m.get("kp")) a.kp = x->number(0, 10);
  if (const auto x = m.get("ki")) a.ki = x->number(0, 10);
  if (a.kp == 0 && a.ki == 0) {
    const Value at = m.get("ki") ? *m.get("ki") : *m.get("kp");
    at.fail("kp and ki cannot both be 0");
  }
  if (const auto x = m.get("min_gain")) a.min_gain = x->number(0.001, 1);
  if (const auto x = m.get("max_gain")) a.max_gain = x->number(1, 1000);
  if (const auto x = m.get("max_step")) a.max_step = positive(*x, 1000);
  return a;
}

RoiFollowSpec read_roi_follow(const Value& v, const std::vector<OutputSpec>& outputs) {
  const Map m = v.map({"enabled", "output", "smoothing", "dead_band", "min_motion", "bounds"});
  RoiFollowSpec r;
  r.enabled = section_enabled(m);
  if (const auto x = r.enabled ? std::optional<Value>(m.need("output")) : m.get("output"))
    r.output = read_output_ref(*x, outputs);
  if (const auto x = m.get("smoothing")) r.smoothing = positive(*x, 1);
  if (const auto x = m.get("dead_band")) r.dead_band = x->number(0, 0.5);
  if (const auto x = m.get("min_motion")) r.min_motion = x->number(0, 1);
  if (const auto x = m.get("bounds")) r.bounds = read_crop(*x);
  return r;
}

HealthSpec read_health(const Value& v) {
  const Map m = v.map({"enabled", "frozen_motion", "frozen_after", "black_fraction", "overexposed_fraction",
                       "scene_change", "raise_after", "clear_after"});
  HealthSpec h;
  h.enabled = section_enabled(m);
  if (const auto x = m.get("frozen_motion")) h.frozen_motion = x->number(0, 1);
  if (const auto x = m.get("frozen_after")) h.frozen_after = x->duration_ms(false);
  if (const auto x = m.get("black_fraction")) h.black_fraction = positive(*x, 1);
  if (const auto x = m.get("overexposed_fraction")) h.overexposed_fraction = positive(*x, 1);
  if (const auto x = m.get("scene_change")) h.scene_change = positive(*x, 1);
  if (const auto x = m.get("raise_after")) h.raise_after = x->duration_ms(true);
  if (const auto x = m.get("clear_after")) h.clear_after = x->duration_ms(true);
  return h;
}

ControlSpec read_control(const Value& v, const std::vector<OutputSpec>& outputs) {
  const Map m = v.map({"enabled", "delay_frames", "auto_gain", "roi_follow", "health"});
  ControlSpec c;
  c.enabled = section_enabled(m);
  if (const auto x = m.get("delay_frames")) c.delay_frames = static_cast<int32_t>(x->integer(1, control::kMaxDelay));
  if (const auto x = m.get("auto_gain")) c.auto_gain = read_auto_gain(*x, outputs);
  if (const auto x = m.get("roi_follow")) c.roi_follow = read_roi_follow(*x, outputs);
  if (const auto x = m.get("health")) c.health = read_health(*x);
  return c;
}

// ---- batching ----

constexpr int64_t kMaxGroupQueue = 4096;
constexpr microseconds kMaxBatchWait{1'000'000};

BatchGroupSpec read_batch_group(const Value& v, std::map<std::string, int>& names) {
  const Map m = v.map({"name", "max_batch", "max_wait", "device", "queue_depth"});
  BatchGroupSpec g;
  g.name = read_unique_name(m.need("name"), "batch group", names);
  if (const auto x = m.get("max_batch")) g.max_batch = static_cast<int32_t>(x->integer(1, kMaxBatch));
  if (const auto x = m.get("max_wait")) {
    g.max_wait = x->duration(true);
    if (g.max_wait > kMaxBatchWait) x->fail(fmt::format("must be at most {}", format_duration(kMaxBatchWait)));
  }
  if (const auto x = m.get("device"); x && !x->is_null()) g.device = x->parse(parse_device);
  if (const auto x = m.get("queue_depth"); x && x->text() != "auto") {
    g.queue_depth = static_cast<int32_t>(x->integer(1, kMaxGroupQueue));
    if (g.queue_depth < g.max_batch)
      x->fail(fmt::format("must be at least max_batch ({}), got {}", g.max_batch, g.queue_depth));
  }
  return g;
}

//! The first field in which two outputs differ, as the YAML names it; empty when they are equal.
std::string_view output_difference(const OutputSpec& a, const OutputSpec& b) {
  if (a.name != b.name) return "name";
  if (a.crop != b.crop) return "crop";
  if (a.resize != b.resize) return "resize";
  if (a.interp != b.interp) return "interp";
  if (a.aspect != b.aspect) return "aspect";
  if (a.center_crop != b.center_crop) return "center_crop";
  if (a.pad_value != b.pad_value) return "pad_value";
  if (a.channels != b.channels) return "channels";
  if (a.scale != b.scale) return "scale";
  if (a.mean != b.mean) return "mean";
  if (a.std != b.std) return "std";
  if (a.layout != b.layout) return "layout";
  if (a.dtype != b.dtype) return "dtype";
  return {};
}

//! A `batching` group as the pipelines joining it are checked against it.
struct GroupContext {
  BatchGroupSpec spec;
  Value at;   //!< its list item, for a group nobody joins
  //! The first member, whose outputs and colour the others must have.
  std::optional<PipelineSpec> first;
  int first_line = 0;
};

//! Daemon-wide state the pipelines are checked against.
struct PipelineContext {
  DeviceSpec device;
  std::map<std::string, int> names;               //!< pipeline name -> line
  std::map<std::string, std::string> sink_targets;   //!< what sinks write to -> pipeline name (read_sink)
  std::map<std::string, GroupContext> groups;     //!< `batching` by name
};

//! `p` joins the group `v` names: same device, no control, and the first member's outputs and colour.
void join_batch_group(const Value& v, const Map& m, const std::vector<Value>& outputs, PipelineSpec& p,
                      PipelineContext& ctx) {
  p.batch_group = v.text();
  const auto it = ctx.groups.find(p.batch_group);
  if (it == ctx.groups.end()) {
    std::vector<std::string_view> known;
    for (const auto& [name, g] : ctx.groups) known.push_back(name);
    v.fail(known.empty() ? fmt::format("unknown batch group '{}' (no `batching` groups are defined)", p.batch_group)
                         : fmt::format("unknown batch group '{}' (expected {})", p.batch_group, join(known)));
  }
  GroupContext& g = it->second;
  const DeviceSpec mine = p.device.value_or(ctx.device), theirs = g.spec.device.value_or(ctx.device);
  if (!(mine == theirs))
    v.fail(fmt::format("this pipeline's device is {} but batch group '{}' runs on {}", to_string(mine), g.spec.name,
                       to_string(theirs)));
  if (p.control.enabled)
    m.need("control").fail(fmt::format("control cannot be enabled in batch group '{}': a batched launch carries no "
                                       "per-pipeline control",
                                       g.spec.name));
  if (!g.first) {
    g.first = p;
    g.first_line = m.self().line();
    return;
  }
  const PipelineSpec& first = *g.first;
  const std::string peer = fmt::format("pipeline '{}' (line {})", first.name, g.first_line);
  if (p.outputs.size() != first.outputs.size())
    m.need("outputs").fail(fmt::format("{} outputs, but {} in batch group '{}' has {}: members need the same outputs",
                                       p.outputs.size(), peer, g.spec.name, first.outputs.size()));
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    if (const std::string_view field = output_difference(p.outputs[k], first.outputs[k]); !field.empty())
      outputs[k].fail(fmt::format("{} differs from {} in batch group '{}': members need the same outputs", field,
                                  peer, g.spec.name));
  }
  if (!(p.color == first.color))
    v.fail(fmt::format("color differs from {} in batch group '{}': members need the same color", peer, g.spec.name));
}

PipelineSpec read_pipeline(const Value& v, PipelineContext& ctx) {
  const Map m =
      v.map({"name", "source", "decoder", "device", "queue_depth", "pool_frames", "color", "outputs", "sink",
             "control", "batch_group"});
  PipelineSpec p;
  p.name = read_unique_name(m.need("name"), "pipeline", ctx.names);
  p.source = read_source(m.need("source"));
  if (const auto x = m.get("device"); x && !x->is_null()) p.device = x->parse(parse_device);
  if (const auto x = m.get("decoder")) {
    p.decoder = x->choice(kDecoders);
    if (p.decoder == DecoderKind::Nvdec && p.device.value_or(ctx.device).kind == DeviceKind::Cpu)
      x->fail("nvdec needs a cuda device, but this pipeline's device is cpu");
  }
  if (const auto x = m.get("queue_depth")) p.queue_depth = static_cast<int32_t>(x->integer(1, 1024));
  if (const auto x = m.get("pool_frames"))
    p.pool_frames = x->text() == "auto" ? 0 : static_cast<int32_t>(x->integer(2, 4096));
  if (const auto x = m.get("color")) p.color = read_color(*x);

  const Value outputs = m.need("outputs");
  const std::vector<Value> items = outputs.items();
  if (items.empty()) outputs.fail("at least one output is required");
  if (items.size() > size_t(kMaxOutputs))
    items[kMaxOutputs].fail(fmt::format("at most {} outputs per pipeline, got {}", kMaxOutputs, items.size()));
  std::map<std::string, int> names;
  for (const Value& item : items) p.outputs.push_back(read_output(item, names));
  p.sink = read_sink(m.need("sink"), p.name, ctx.sink_targets, p.device.value_or(ctx.device));
  if (const auto x = m.get("control")) p.control = read_control(*x, p.outputs);
  if (const auto x = m.get("batch_group"); x && !x->is_null()) join_batch_group(*x, m, items, p, ctx);
  return p;
}

DaemonConfig read_daemon(const Value& root) {
  const Map m =
      root.map({"log", "http", "decode", "device", "readiness", "drain_timeout", "cpu_threads", "batching", "pipelines"});
  DaemonConfig c;
  if (const auto x = m.get("log")) c.log = read_log(*x);
  if (const auto x = m.get("http")) c.http = read_http(*x);
  if (const auto x = m.get("decode")) c.decode = read_decode(*x);
  if (const auto x = m.get("device")) c.device = x->parse(parse_device);
  if (const auto x = m.get("readiness")) c.readiness = x->choice(kReadiness);
  if (const auto x = m.get("drain_timeout")) c.drain_timeout = x->duration_ms(true);
  if (const auto x = m.get("cpu_threads")) c.cpu_threads = static_cast<int>(x->integer(0, 1024));

  const Value pipelines = m.need("pipelines");
  const std::vector<Value> items = pipelines.items();
  if (items.empty()) pipelines.fail("at least one pipeline is required");
  PipelineContext ctx{c.device, {}, {}, {}};
  if (const auto x = m.get("batching"); x && !x->is_null()) {
    std::map<std::string, int> names;
    for (const Value& item : x->items()) {
      BatchGroupSpec g = read_batch_group(item, names);
      ctx.groups.emplace(g.name, GroupContext{g, item, std::nullopt, 0});
      c.batching.push_back(std::move(g));
    }
  }
  for (const Value& item : items) c.pipelines.push_back(read_pipeline(item, ctx));
  for (const BatchGroupSpec& g : c.batching) {
    const GroupContext& gc = ctx.groups.at(g.name);
    if (!gc.first)
      gc.at.fail(fmt::format("batch group '{}' has no member pipelines (give some `batch_group: {}`)", g.name, g.name));
  }
  return c;
}

}  // namespace

bool is_ip_address(const std::string& s) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

DeviceSpec parse_device(std::string_view s) {
  if (s == "auto") return {DeviceKind::Auto, 0};
  if (s == "cpu") return {DeviceKind::Cpu, 0};
  if (s == "cuda") return {DeviceKind::Cuda, 0};
  if (s.starts_with("cuda:")) {
    const std::string_view n = s.substr(5);
    int32_t index = -1;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), index);
    if (ec == std::errc() && end == n.data() + n.size() && !n.empty() && index >= 0 && index < 1024)
      return {DeviceKind::Cuda, index};
  }
  throw ConfigError(fmt::format("unknown device '{}' (expected auto, cpu, cuda or cuda:N)", s));
}

DaemonConfig load_string(std::string_view yaml, const std::string& name, const fs::path& base_dir) {
  const Doc doc{name, fs::absolute(base_dir).lexically_normal()};
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    throw ConfigError(
        printable_line(fmt::format("{}:{}:{}: YAML syntax error: {}", name, e.mark.line + 1, e.mark.column + 1, e.msg)));
  }
  DaemonConfig c = read_daemon(Value(doc, root, "", YAML::Mark()));
  c.path = name;
  return c;
}

DaemonConfig load_file(const fs::path& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) throw ConfigError(fmt::format("config file '{}' not found", path.string()));
  if (fs::is_directory(st)) throw ConfigError(fmt::format("config file '{}' is a directory", path.string()));
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (!(in && text << in.rdbuf()))
    throw ConfigError(fmt::format("cannot read config file '{}': {}", path.string(), std::strerror(errno)));
  const fs::path absolute = fs::absolute(path).lexically_normal();
  DaemonConfig c = load_string(text.str(), path.string(), absolute.parent_path());
  c.path = absolute.string();
  return c;
}

}  // namespace framefuse::config
