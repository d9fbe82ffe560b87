#include "daemon/metrics/status_json.hpp"

#include <spdlog/fmt/fmt.h>

#include <initializer_list>
#include <utility>

#include "pipeline/util/text_escape.hpp"
#include "pipeline/util/redact.hpp"

namespace framefuse::daemon {
namespace {

//! `"control":{...}` for a pipeline with control, `"control":null` otherwise.
void append_control(std::string& out, const std::optional<ControlSnapshot>& c) {
  if (!c) {
    out += R"("control":null)";
    return;
  }
  const auto o = std::back_inserter(out);
  fmt::format_to(o, R"("control":{{"frames":{},"mean_luma":{},"luma_variance":{},"motion":{},)", c->frames,
                 json_number(c->mean_luma), json_number(c->luma_variance), json_number(c->motion));
  fmt::format_to(o, R"("black_fraction":{},"white_fraction":{},"scene_distance":{},"health":{{)",
                 json_number(c->black_fraction), json_number(c->white_fraction), json_number(c->scene_distance));
  for (size_t i = 0; i < c->health.size(); ++i)
    fmt::format_to(o, "{}{}:{}", i ? "," : "", json_string(control::kHealthNames[i]), c->health[i]);
  out += R"(},"health_events":{)";
  for (size_t i = 0; i < c->health.size(); ++i)
    fmt::format_to(o, "{}{}:{}", i ? "," : "", json_string(control::kHealthNames[i]), c->health_events[i]);
  out += R"(},"outputs":[)";
  for (size_t k = 0; k < c->outputs.size(); ++k) {
    const auto& x = c->outputs[k];
    fmt::format_to(o, R"({}{{"name":{},"gain":{},"mean_luma":{},"motion":{},"roi":{{"x":{},"y":{},"w":{},"h":{}}}}})",
                   k ? "," : "", json_string(x.name), json_number(x.gain), json_number(x.mean_luma),
                   json_number(x.motion), x.x, x.y, x.w, x.h);
  }
  out += "]}";
}

void append_pipeline(std::string& out, const PipelineSnapshot& p) {
  const auto o = std::back_inserter(out);
  fmt::format_to(o, R"({{"name":{},"device":{},"source":{},"state":{},)", json_string(p.name),
                 json_string(p.device), json_string(redact_uri(p.source)),
                 json_string(kSourceStateNames[static_cast<size_t>(p.state)]));
  fmt::format_to(o, R"("frames_decoded":{},"frames_processed":{},"decode_errors":{},"reconnects":{},)",
                 p.frames_decoded, p.frames_processed, p.decode_errors, p.reconnects);
  out += R"("dropped":{)";
  for (size_t r = 0; r < kDropReasonNames.size(); ++r)
    fmt::format_to(o, "{}{}:{}", r ? "," : "", json_string(kDropReasonNames[r]), p.dropped[r]);
  fmt::format_to(o, R"(}},"queue_depth":{},"last_frame_age_s":{},"fps":{},"active_s":{},)", p.queue_depth,
                 p.last_frame_age_s < 0 ? "null" : json_number(p.last_frame_age_s), json_number(p.fps),
                 json_number(p.active_s));
  const auto number_or_null = [](std::optional<double> v) { return v ? json_number(*v) : std::string("null"); };
  for (const auto& [key, h] : {std::pair{"latency", &p.latency}, std::pair{"queue_wait", &p.queue_wait},
                               std::pair{"submit", &p.submit}}) {
    fmt::format_to(o, R"("{}":{{"count":{},"sum_s":{},"mean_s":{}}},)", key, h->count(), json_number(h->sum_s),
                   number_or_null(h->mean_s()));
  }
  fmt::format_to(o, R"("submit_cpu":{{"sum_s":{},"mean_s":{}}},)", json_number(p.submit_cpu_s),
                 number_or_null(p.submit.per_observation(p.submit_cpu_s)));
  fmt::format_to(o, R"("pool":{{"in_use":{},"capacity":{}}},"decoder":{},"nvdec_fallbacks":{},"codec":{},)",
                 p.pool_in_use, p.pool_capacity, p.decoder.empty() ? "null" : json_string(p.decoder), p.nvdec_fallbacks,
                 p.codec.empty() ? "null" : json_string(p.codec));
  out += R"("outputs":[)";
  for (size_t k = 0; k < p.outputs.size(); ++k) fmt::format_to(o, "{}{}", k ? "," : "", json_string(p.outputs[k]));
  out += "],";
  fmt::format_to(o, R"("sink":{{"type":{},"target":{}}},)", json_string(p.sink_type),
                 p.sink_target.empty() ? "null" : json_string(p.sink_target));
  fmt::format_to(o, R"("frame":{},"last_error":{},)", json_string(p.frame), json_string(redact_uri(p.last_error)));
  append_control(out, p.control);
  out += '}';
}

}  // namespace

std::string render_status_json(const DaemonSnapshot& d, std::span<const PipelineSnapshot> pipelines) {
  std::string out;
  const auto o = std::back_inserter(out);
  fmt::format_to(o, R"({{"version":{},"uptime_s":{},"ready":{},"device":{},)", json_string(d.version),
                 json_number(d.uptime_s), d.ready, json_string(d.device));
  fmt::format_to(o, R"("config":{{"path":{},"reloads_ok":{},"reloads_failed":{},"last_reload_unix_s":{},)",
                 json_string(d.config_path), d.reloads_ok, d.reloads_failed, json_number(d.last_reload_unix_s));
  fmt::format_to(o, R"("last_reload_ok":{}}},"gpus":[)", d.last_reload_ok);
  for (size_t i = 0; i < d.gpus.size(); ++i)
    fmt::format_to(o, R"({}{{"device":"cuda:{}","used_bytes":{},"total_bytes":{}}})", i ? "," : "", d.gpus[i].device,
                   d.gpus[i].used_bytes, d.gpus[i].total_bytes);
  fmt::format_to(o, R"(],"nvdec_sessions":{},"decode":[)", nvdec_sessions(pipelines));
  for (size_t i = 0; i < d.decode.size(); ++i) {
    const DecodeLoad& l = d.decode[i];
    fmt::format_to(o, R"({}{{"decoder":{},"device":{},"capacity_fps":{},"paced_fps":{},"unpaced_streams":{}}})",
                   i ? "," : "", json_string(l.decoder), json_string(l.device), json_number(l.capacity_fps),
                   json_number(l.paced_fps), l.unpaced_streams);
  }
  out += R"(],"batch_groups":[)";
  for (size_t i = 0; i < d.batch_groups.size(); ++i) {
    const BatchGroupSnapshot& g = d.batch_groups[i];
    fmt::format_to(o, R"({}{{"name":{},"device":{},"max_batch":{},"batches":{},"frames":{},"mean_fill":{},)",
                   i ? "," : "", json_string(g.name), json_string(g.device), g.max_batch, g.batches, g.frames,
                   json_number(g.mean_fill()));
    fmt::format_to(o, R"("wait_timeouts":{},"queue_depth":{},"members":{}}})", g.wait_timeouts, g.queue_depth,
                   g.members);
  }
  out += R"(],"pipelines":[)";
  for (size_t i = 0; i < pipelines.size(); ++i) {
    if (i) out += ',';
    append_pipeline(out, pipelines[i]);
  }
  out += "]}\n";
  return out;
}

}  // namespace framefuse::daemon
