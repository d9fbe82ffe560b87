#pragma once
//! steady_clock instants as int64 nanoseconds: the form that fits in a std::atomic shared between
//! threads (last-frame times, stall deadlines, rate windows).
#include <chrono>
#include <cstdint>

namespace framefuse {

inline int64_t steady_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

inline int64_t steady_now_ns() { return steady_ns(std::chrono::steady_clock::now()); }

}  // namespace framefuse
