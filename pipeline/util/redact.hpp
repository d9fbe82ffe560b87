#pragma once
//! Credential redaction for anything shown to people or scrapers (logs, metrics, /status, errors).
#include <cctype>
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

//! Redacts every "scheme://user:secret@" inside free text (log lines from libraries, error strings).
inline std::string redact_text(std::string_view text) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const auto scheme = text.find("://", pos);
    if (scheme == std::string_view::npos) break;
    const auto end = text.find_first_of(" \t\r\n\"'<>", scheme);
    size_t start = scheme;
    while (start > pos && std::isalnum(static_cast<unsigned char>(text[start - 1]))) --start;
    out.append(text.substr(pos, start - pos));
    const auto token = text.substr(start, end == std::string_view::npos ? text.npos : end - start);
    out += redact_uri(token);
    pos = start + token.size();
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace framefuse
