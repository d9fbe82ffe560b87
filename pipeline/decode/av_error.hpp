#pragma once
//! FFmpeg error codes as text. For .cpp files that already use FFmpeg.
#include <string>

extern "C" {
#include <libavutil/error.h>
}

namespace framefuse {

inline std::string av_error(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(err, buf, sizeof buf);
  return buf;
}

}  // namespace framefuse
