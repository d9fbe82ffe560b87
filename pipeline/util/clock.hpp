#pragma once
//! steady_clock instants as int64 nanoseconds: the form that fits in a std::atomic shared between
//! threads (last-frame times, stall deadlines, rate windows); the calling thread's CPU time.
#include <time.h>

#include <chrono>
#include <cstdint>

namespace framefuse {

inline int64_t steady_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

inline int64_t steady_now_ns() { return steady_ns(std::chrono::steady_clock::now()); }

//! CPU time the calling thread has used, microseconds (CLOCK_THREAD_CPUTIME_ID): what a host-side
//! cost per call is measured in by the benchmarks.
inline double thread_cpu_us() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return 1e6 * double(t.tv_sec) + 1e-3 * double(t.tv_nsec);
}

}  // namespace framefuse
