#pragma once
//! Summaries of a benchmark's timed samples, shared by the benches in tests/bench.
#include <algorithm>
#include <vector>

namespace framefuse::bench {

//! The median sample (the upper one of an even count); 0 without samples.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace framefuse::bench
