// Fuzz target: the texts framefuse writes from strings it does not control (pipeline names, camera
// URIs, FFmpeg's error messages): pipeline/util/text_escape, pipeline/util/redact.hpp and the
// /metrics and /status renderers. Input: the whole input as one string, then six strings separated
// by 0x1F bytes (pipeline name, source, last error, frame, output name, config path). Properties:
// valid_utf8 / printable_line / json_string / prometheus_label_value produce what their formats
// allow; redact_uri and redact_text leave no userinfo but "user:***" after any "scheme://"; the
// metrics page parses as Prometheus text format 0.0.4 line by line; the status page is one JSON value.
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/metrics/prometheus.hpp"
#include "daemon/metrics/status_json.hpp"
#include "pipeline/util/redact.hpp"
#include "pipeline/util/text_escape.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

using framefuse::fuzz::check;

//! Length of the UTF-8 sequence at s[i] (RFC 3629: no overlongs, surrogates or code points past
//! U+10FFFF), 0 if it is not valid there.
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return i + k < s.size() ? static_cast<uint8_t>(s[i + k]) : 0x100u; };
  const unsigned c = b(0);
  const auto cont = [&](size_t k) { return (b(k) & 0xC0u) == 0x80u; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return b(1) >= lo && b(1) <= hi && cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return b(1) >= lo && b(1) <= hi && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

//! A strict JSON reader (RFC 8259) that only says whether `s` is exactly one value.
class JsonChecker {
 public:
  explicit JsonChecker(std::string_view s) : s_(s) {}
  bool one_value() {
    ws();
    if (!value(0)) return false;
    ws();
    return i_ == s_.size();
  }

 private:
  bool value(int depth) {
    if (depth > 64 || i_ >= s_.size()) return false;
    switch (s_[i_]) {
      case '{': return container(depth, '}', true);
      case '[': return container(depth, ']', false);
      case '"': return string();
      case 't': return word("true");
      case 'f': return word("false");
      case 'n': return word("null");
      default: return number();
    }
  }
  bool container(int depth, char close, bool object) {
    ++i_;
    ws();
    if (peek() == close) return ++i_, true;
    while (true) {
      if (object) {
        if (peek() != '"' || !string()) return false;
        ws();
        if (peek() != ':') return false;
        ++i_;
        ws();
      }
      if (!value(depth + 1)) return false;
      ws();
      if (peek() == close) return ++i_, true;
      if (peek() != ',') return false;
      ++i_;
      ws();
    }
  }
  bool string() {
    ++i_;
    while (i_ < s_.size()) {
      const auto c = static_cast<uint8_t>(s_[i_]);
      if (c == '"') return ++i_, true;
      if (c < 0x20) return false;
      if (c == '\\') {
        const char e = i_ + 1 < s_.size() ? s_[i_ + 1] : 0;
        if (e == 'u') {
          for (size_t k = 2; k < 6; ++k)
            if (i_ + k >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_ + k]))) return false;
          i_ += 6;
        } else if (std::string_view("\"\\/bfnrt").find(e) != std::string_view::npos && e != 0) {
          i_ += 2;
        } else {
          return false;
        }
        continue;
      }
      const size_t n = utf8_length(s_, i_);
      if (n == 0) return false;
      i_ += n;
    }
    return false;
  }
  bool number() {
    const size_t start = i_;
    if (peek() == '-') ++i_;
    if (peek() == '0') {
      ++i_;
    } else if (!digits()) {
      return false;
    }
    if (peek() == '.' && (++i_, !digits())) return false;
    if (peek() == 'e' || peek() == 'E') {
      ++i_;
      if (peek() == '+' || peek() == '-') ++i_;
      if (!digits()) return false;
    }
    return i_ > start;
  }
  bool digits() {
    const size_t start = i_;
    while (std::isdigit(static_cast<unsigned char>(peek()))) ++i_;
    return i_ > start;
  }
  bool word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  void ws() {
    while (peek() == ' ' || peek() == '\n' || peek() == '\t' || peek() == '\r') ++i_;
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }

  std::string_view s_;
  size_t i_ = 0;
};

//! Prometheus text format 0.0.4: a label value's body (up to its closing quote), advancing `i`.
bool label_value(std::string_view line, size_t& i) {
  while (i < line.size()) {
    const char c = line[i];
    if (c == '"') return ++i, true;
    if (c == '\\') {
      if (i + 1 >= line.size() || std::string_view("\\\"n").find(line[i + 1]) == std::string_view::npos) return false;
      i += 2;
      continue;
    }
    const size_t n = utf8_length(line, i);
    if (n == 0) return false;
    i += n;
  }
  return false;
}

bool metric_name(std::string_view line, size_t& i) {
  const auto first = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; };
  if (i >= line.size() || !first(line[i])) return false;
  while (i < line.size() && (first(line[i]) || std::isdigit(static_cast<unsigned char>(line[i])))) ++i;
  return true;
}

//! One line of a Prometheus text page: a comment (# HELP / # TYPE), or a sample with labels.
bool prometheus_line(std::string_view line) {
  if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
    size_t i = 7;
    return metric_name(line, i) && is_valid_utf8(line);
  }
  size_t i = 0;
  if (!metric_name(line, i)) return false;
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      const size_t name_start = i;
      while (i < line.size() && (std::isalnum(static_cast<unsigned char>(line[i])) || line[i] == '_')) ++i;
      if (i == name_start || line.substr(i, 2) != "=\"") return false;
      i += 2;
      if (!label_value(line, i)) return false;
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) return false;
    ++i;
  }
  if (i >= line.size() || line[i] != ' ') return false;
  const std::string_view value = line.substr(i + 1);
  if (value == "NaN" || value == "+Inf" || value == "-Inf") return true;
  char* end = nullptr;
  const std::string v(value);
  std::strtod(v.c_str(), &end);
  return !v.empty() && end == v.c_str() + v.size();
}

//! After any "scheme://", a userinfo ("user:password@host", "user@host") reads "user:***". `stops`:
//! the characters that end the authority besides / ? #.
bool passwords_hidden(std::string_view s, std::string_view stops) {
  for (size_t at = s.find("://"); at != std::string_view::npos; at = s.find("://", at + 1)) {
    const size_t start = at + 3;
    size_t end = start;
    while (end < s.size() && std::string_view("/?#").find(s[end]) == std::string_view::npos &&
           stops.find(s[end]) == std::string_view::npos)
      ++end;
    const std::string_view authority = s.substr(start, end - start);
    const size_t user_end = authority.rfind('@');
    if (user_end == std::string_view::npos) continue;
    const std::string_view userinfo = authority.substr(0, user_end);
    const size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos || userinfo.substr(colon + 1) != "***") return false;
  }
  return true;
}

void check_escapes(std::string_view s) {
  const std::string valid = framefuse::valid_utf8(s);
  check(is_valid_utf8(valid), "valid_utf8 returned invalid UTF-8");
  check(!is_valid_utf8(s) || valid == s, "valid_utf8 changed valid UTF-8");
  const std::string line = framefuse::printable_line(s);
  check(is_valid_utf8(line), "printable_line returned invalid UTF-8");
  for (const char c : line) check(static_cast<uint8_t>(c) >= 0x20 && c != 0x7F, "printable_line kept a control character");
  check(JsonChecker(framefuse::json_string(s)).one_value(), "json_string is not a JSON string");
  const std::string label = "x{l=\"" + framefuse::prometheus_label_value(s) + "\"} 1";
  check(prometheus_line(label), "prometheus_label_value broke a sample line");
  check(passwords_hidden(framefuse::redact_uri(s), ""), "redact_uri left a password");
  check(passwords_hidden(framefuse::redact_text(s), " \t\r\n\"'<>"), "redact_text left a password");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  framefuse::fuzz::InputReader in(data, size);
  check_escapes(in.rest_text());
  std::vector<std::string> parts;
  for (int k = 0; k < 6; ++k) parts.emplace_back(in.text_until('\x1f'));
  for (const auto& p : parts) check_escapes(p);

  framefuse::daemon::DaemonSnapshot d;
  d.version = parts[5];
  d.device = "cpu";
  d.config_path = parts[5];
  framefuse::PipelineSnapshot p;
  p.name = parts[0];
  p.device = "cpu";
  p.source = parts[1];
  p.last_error = parts[2];
  p.frame = parts[3];
  p.decoder = "cpu";
  p.outputs = {parts[4]};
  p.sink_type = "npy";
  p.sink_target = parts[1];
  p.fps = static_cast<double>(size) / 7.0;
  const std::vector<framefuse::PipelineSnapshot> pipelines{p};

  const std::string metrics = framefuse::daemon::render_metrics(d, pipelines);
  size_t start = 0;
  while (start < metrics.size()) {
    const size_t nl = metrics.find('\n', start);
    check(nl != std::string::npos, "the metrics page does not end with a newline");
    const std::string_view line(metrics.data() + start, nl - start);
    if (!line.empty() && !prometheus_line(line)) {
      std::fprintf(stderr, "bad metrics line: %.*s\n", static_cast<int>(line.size()), line.data());
      check(false, "a metrics line that is not Prometheus text format");
    }
    start = nl + 1;
  }
  check(JsonChecker(framefuse::daemon::render_status_json(d, pipelines)).one_value(), "/status is not one JSON value");
  return 0;
}
