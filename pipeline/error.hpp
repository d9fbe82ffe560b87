#pragma once
//! Error types crossing layer boundaries. Messages are one line and name what was wrong.
#include <stdexcept>
#include <string>

namespace framefuse {

//! A configuration value that cannot work (bad key, crop outside the frame, std = 0, ...).
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

//! A source that cannot be opened or decoded (missing file, not video, network failure).
struct MediaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

//! A CUDA or device failure.
struct DeviceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace framefuse
