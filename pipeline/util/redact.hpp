#pragma once
//! Credential redaction for anything shown to people or scrapers (logs, metrics, /status, errors).
#include <cctype>
#include <string>
#include <string_view>

namespace framefuse {

//! "rtsp://user:secret@host/path" -> "rtsp://user:***@host/path", and "user@" -> "user:***@" (a
//! user name alone may be a token); so is every further "scheme://" in it (a URI in a query can
//! carry credentials of its own). Strings without userinfo unchanged.
inline std::string redact_uri(std::string_view uri) {
  std::string out;
  size_t pos = 0;  // copied up to here
  size_t from = 0;  // next "://" search; an authority may end in the ':' of "host:rtsp://"
  for (auto scheme = uri.find("://"); scheme != std::string_view::npos; scheme = uri.find("://", from)) {
    const auto start = scheme + 3;
    from = start;
    const auto end = uri.find_first_of("/?#", start);
    const auto authority = uri.substr(start, end == std::string_view::npos ? uri.npos : end - start);
    out.append(uri.substr(pos, start - pos));
    pos = start + authority.size();
    const auto at = authority.rfind('@');
    if (at == std::string_view::npos) {
      out += authority;
      continue;
    }
    const auto colon = authority.substr(0, at).find(':');
    out += authority.substr(0, colon == std::string_view::npos ? at : colon);
    out += ":***";
    out += authority.substr(at);
  }
  out.append(uri.substr(pos));
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
