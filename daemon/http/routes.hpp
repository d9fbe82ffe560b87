#pragma once
//! The HTTP routes, apart from any transport: a request line in, a complete response out. The
//! server (http_server.cpp) owns sockets, limits and keep-alive; HEAD is answered here as GET and
//! the server drops the body.
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/http/status_source.hpp"

namespace framefuse::daemon {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;   //!< extra headers (Allow, Retry-After)
};

//! Largest preview width in pixels; narrower frames keep their size.
inline constexpr int32_t kPreviewMaxWidth = 640;

class Router {
 public:
  explicit Router(StatusSource& source) : source_(source) {}

  //! GET/HEAD /, /metrics, /livez, /readyz, /status, /preview/<pipeline>.jpg (`?boxes=1`: the
  //! outputs' crop windows outlined), /preview/<pipeline>/<output>.jpg (what the output's tensor
  //! shows, de-normalized); 404 elsewhere, 405 for other methods, 500 (message redacted) when the
  //! daemon throws. Thread-safe.
  HttpResponse handle(std::string_view method, std::string_view target) const;

  //! True for targets whose answer costs milliseconds of CPU (JPEG previews): keep them off the
  //! thread that serves scrapes.
  static bool is_slow(std::string_view target);

 private:
  HttpResponse route(std::string_view path, bool boxes) const;
  HttpResponse readyz() const;
  //! The frame preview, or with `output` that output's view; 404 for an unknown pipeline or output.
  HttpResponse preview(const std::string& pipeline, bool boxes, const std::optional<std::string>& output = {}) const;

  StatusSource& source_;
};

}  // namespace framefuse::daemon
