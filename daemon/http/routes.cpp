#include "daemon/http/routes.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include "daemon/http/index_page.hpp"
#include "daemon/metrics/prometheus.hpp"
#include "daemon/metrics/status_json.hpp"
#include "pipeline/fused/plan.hpp"
#include "pipeline/preview/jpeg_encoder.hpp"
#include "pipeline/util/redact.hpp"

namespace framefuse::daemon {
namespace {

constexpr std::string_view kPreviewPrefix = "/preview/", kPreviewSuffix = ".jpg";

HttpResponse text(int status, std::string body) { return {status, "text/plain; charset=utf-8", std::move(body), {}}; }

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

//! `text` with its %XX escapes decoded; nullopt for a broken escape.
std::optional<std::string> percent_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    const int hi = hex_digit(text[i + 1]), lo = hex_digit(text[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

//! `target` without the scheme and authority of an absolute-form target (`http://host:port/x`,
//! which RFC 9112 section 3.2.2 says servers must accept): its origin form.
std::string_view origin_form(std::string_view target) {
  const size_t scheme = target.find("://");
  if (target.starts_with('/') || scheme == std::string_view::npos) return target;
  const size_t path = target.find_first_of("/?#", scheme + 3);
  return path == std::string_view::npos ? std::string_view("/") : target.substr(path);
}

//! Path of a request target, query dropped and %XX decoded; nullopt for a broken escape.
std::optional<std::string> decode_path(std::string_view target) {
  target = origin_form(target);
  const std::optional<std::string> path = percent_decode(target.substr(0, target.find_first_of("?#")));
  if (path && path->empty()) return "/";   // "http://host?x": the root
  return path;
}

//! Whether the query of `target` has `key=1` (either %XX-escaped or not).
bool query_flag(std::string_view target, std::string_view key) {
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return false;
  std::string_view query = target.substr(q + 1);
  query = query.substr(0, query.find('#'));
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::optional<std::string> param = percent_decode(query.substr(0, amp));
    if (param && param->size() == key.size() + 2 && param->starts_with(key) && param->substr(key.size()) == "=1")
      return true;
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
  }
  return false;
}

//! A rectangle of source pixels.
struct Window {
  int32_t x, y, w, h;
};

//! The source pixels an output shows: its crop window, less what a centre crop or `fill` cuts off
//! the resized image (a letterbox's pad shows no source).
Window shown_window(const ops::Chain::Params& p) {
  const ops::Resize::Params& r = p.resize;
  const auto axis = [](int32_t start, double scale, int32_t off, int32_t out, int32_t resized) {
    const int32_t begin = std::max(0, off), end = std::min(resized, off + out);
    const auto a = static_cast<int32_t>(std::lround(begin * scale)), b = static_cast<int32_t>(std::lround(end * scale));
    return std::pair{start + a, std::max(1, b - a)};
  };
  const auto [x, w] = axis(r.x0, r.scale_x, p.off_x, p.store.width, r.dst_w);
  const auto [y, h] = axis(r.y0, r.scale_y, p.off_y, p.store.height, r.dst_h);
  return {x, y, w, h};
}

//! Outline colours of the outputs' crop windows, by output index.
constexpr std::array<std::array<uint8_t, 3>, 4> kBoxColours = {{{255, 64, 64}, {64, 230, 64}, {64, 160, 255}, {255, 220, 0}}};

}  // namespace

bool Router::is_slow(std::string_view target) {
  const auto path = decode_path(target);   // as route() sees it: "/%70review/..." is a preview too
  return path && path->starts_with(kPreviewPrefix);
}

HttpResponse Router::handle(std::string_view method, std::string_view target) const {
  if (method != "GET" && method != "HEAD") {
    HttpResponse r = text(405, "only GET and HEAD are served\n");
    r.headers.emplace_back("Allow", "GET, HEAD");
    return r;
  }
  const auto path = decode_path(target);
  if (!path) return text(400, "bad percent-encoding in the request target\n");
  try {
    return route(*path, query_flag(target, "boxes"));
  } catch (const std::exception& e) {
    const std::string what = redact_uri(e.what());
    spdlog::warn("http: {} failed: {}", redact_uri(*path), what);
    return text(500, fmt::format("internal error: {}\n", what));
  }
}

HttpResponse Router::route(std::string_view path, bool boxes) const {
  if (path == "/metrics") {
    const DaemonSnapshot d = source_.daemon();
    const auto pipelines = source_.pipelines();
    return {200, kPrometheusContentType, render_metrics(d, pipelines), {}};
  }
  if (path == "/status") {
    const DaemonSnapshot d = source_.daemon();
    const auto pipelines = source_.pipelines();
    return {200, "application/json", render_status_json(d, pipelines), {}};
  }
  if (path == "/livez") return text(200, "ok\n");
  if (path == "/readyz") return readyz();
  if (path == "/") return {200, "text/html; charset=utf-8", std::string(index_page_html()), {}};
  if (path.starts_with(kPreviewPrefix) && path.ends_with(kPreviewSuffix) &&
      path.size() > kPreviewPrefix.size() + kPreviewSuffix.size()) {
    const std::string_view name =
        path.substr(kPreviewPrefix.size(), path.size() - kPreviewPrefix.size() - kPreviewSuffix.size());
    const size_t slash = name.find('/');   // pipeline names have none
    if (slash == std::string_view::npos) return preview(std::string(name), boxes);
    if (slash > 0 && slash + 1 < name.size())
      return preview(std::string(name.substr(0, slash)), boxes, std::string(name.substr(slash + 1)));
  }
  return text(404, "not found; try /, /metrics, /status, /livez, /readyz, /preview/<pipeline>.jpg or "
                   "/preview/<pipeline>/<output>.jpg\n");
}

HttpResponse Router::readyz() const {
  if (source_.daemon().ready) return text(200, "ready\n");
  std::string reason = "not ready";
  for (const auto& p : source_.pipelines()) {
    if (p.state != SourceState::Streaming && p.state != SourceState::Finished)
      reason += fmt::format("; pipeline '{}' is {}", p.name, kSourceStateNames[static_cast<size_t>(p.state)]);
  }
  HttpResponse r = text(503, reason + "\n");
  r.headers.emplace_back("Retry-After", "1");
  return r;
}

HttpResponse Router::preview(const std::string& pipeline, bool boxes, const std::optional<std::string>& output) const {
  const auto spec = source_.pipeline_spec(pipeline);
  if (!spec) return text(404, fmt::format("no pipeline named '{}'\n", pipeline));
  const OutputSpec* out = nullptr;
  if (output) {
    const auto it = std::find_if(spec->outputs.begin(), spec->outputs.end(), [&](const auto& o) { return o.name == *output; });
    if (it == spec->outputs.end())
      return text(404, fmt::format("pipeline '{}' has no output named '{}'\n", pipeline, *output));
    out = &*it;
  }
  if (!jpeg_encoder_available()) return text(501, "previews unavailable: this FFmpeg has no mjpeg encoder\n");
  const auto frame = source_.latest_frame(pipeline);
  if (!frame) {
    HttpResponse r = text(503, fmt::format("pipeline '{}' has no frame to show (its source is not streaming, or "
                                           "decoded no frame within {} ms)\n",
                                           pipeline, kPreviewWait.count()));
    r.headers.emplace_back("Retry-After", "1");
    return r;
  }
  RgbImage image;
  if (out) {
    image = output_preview_rgb(*frame, *out, spec->color);
  } else {
    image = preview_rgb(*frame, kPreviewMaxWidth);
    if (boxes) {
      const auto plans = make_output_plans(*spec, frame->info);
      for (size_t k = 0; k < plans.size(); ++k) {
        const Window w = shown_window(plans[k].params);
        draw_rect(image, frame->info.width, frame->info.height, w.x, w.y, w.w, w.h,
                  kBoxColours[k % kBoxColours.size()]);
      }
    }
  }
  const std::vector<uint8_t> jpeg = encode_jpeg(image);
  return {200, "image/jpeg", std::string(jpeg.begin(), jpeg.end()), {}};
}

}  // namespace framefuse::daemon
