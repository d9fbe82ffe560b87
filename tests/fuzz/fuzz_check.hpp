#pragma once
//! What the fuzz targets share: a failed property aborts with a message (a finding for libFuzzer, a
//! failure for the replay driver), and input bytes split into the parts a target needs.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>

namespace framefuse::fuzz {

//! Aborts with `what` when `ok` is false: the property the target checks did not hold.
inline void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz property failed: %s\n", what);
  std::abort();
}

//! Reads an input front to back: single bytes as choices, then the rest as text or bytes.
class InputReader {
 public:
  InputReader(const uint8_t* data, size_t size) : data_(data, size) {}
  //! The next byte (0 once the input is used up).
  uint8_t byte() { return pos_ < data_.size() ? data_[pos_++] : 0; }
  //! Text up to the next `sep` byte (not included; the separator is consumed), or to the end.
  std::string_view text_until(char sep) {
    const auto rest = this->rest_text();
    const size_t n = rest.find(sep);
    const std::string_view out = rest.substr(0, n);
    pos_ += n == std::string_view::npos ? rest.size() : n + 1;
    return out;
  }
  //! Everything not yet read.
  std::span<const uint8_t> rest() const { return data_.subspan(pos_); }
  std::string_view rest_text() const {
    const auto r = rest();
    return {reinterpret_cast<const char*>(r.data()), r.size()};
  }

 private:
  std::span<const uint8_t> data_;
  size_t pos_ = 0;
};

}  // namespace framefuse::fuzz
