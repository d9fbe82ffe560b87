#pragma once
//! Credential redaction for anything shown to people or scrapers (logs, metrics, /status, errors).
#include <string>
#include <string_view>

namespace framefuse {

//! "rtsp://user:secret@host/path" -> "rtsp://user:***@host/path"; strings without userinfo unchanged.
inline std::string redact_uri(std::string_view uri) {
  const auto scheme = uri.find("://");
  if (scheme == std::string_view::npos) return std::string(uri);
  const auto start = scheme + 3;
  const auto end = uri.find_first_of("/?#", start);
  const auto authority = uri.substr(start, end == std::string_view::npos ? uri.npos : end - start);
  const auto at = authority.rfind('@');
  if (at == std::string_view::npos) return std::string(uri);
  const auto colon = authority.substr(0, at).find(':');
  std::string out(uri.substr(0, start));
  out += authority.substr(0, colon == std::string_view::npos ? at : colon);
  out += ":***";
  out += uri.substr(start + at);
  return out;
}

}  // namespace framefuse
