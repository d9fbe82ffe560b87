#include "daemon/http/index_page.hpp"

namespace framefuse::daemon {
namespace {

// Names and messages reach the DOM through textContent only, never as markup.
constexpr std::string_view kPage = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>framefused</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; background: #f6f7f9; color: #1d2430; }
h1 { font-size: 1.3em; margin: 0 0 .3em; }
#daemon { color: #555; margin-bottom: 1em; }
#pipelines { display: flex; flex-wrap: wrap; gap: 1em; }
.card { background: #fff; border: 1px solid #d8dce3; border-radius: 6px; padding: .8em; width: 660px; }
.card h2 { font-size: 1.1em; margin: 0 0 .4em; }
.state { font-size: .8em; padding: .1em .5em; border-radius: 3px; background: #ccc; margin-left: .5em; }
.state.streaming, .state.finished { background: #bfe5c4; }
.state.connecting, .state.backoff, .state.stalled { background: #f5e0a6; }
.state.failed { background: #f2b8b5; }
table { border-collapse: collapse; margin-bottom: .5em; }
td { padding: .1em .8em .1em 0; }
td:first-child { color: #666; }
img { max-width: 640px; display: block; background: #222; }
.outputs { display: flex; flex-wrap: wrap; gap: .5em; margin-top: .5em; }
.outputs figure { margin: 0; }
.outputs img { max-width: 320px; max-height: 320px; }
.outputs figcaption { font-size: .8em; color: #666; }
.note, .error { font-size: .9em; color: #777; }
.error { color: #a33; }
</style>
</head>
<body>
<h1>framefused <span id="version"></span></h1>
<div id="daemon">loading&hellip;</div>
<div id="pipelines"></div>
<script>
"use strict";
const cards = new Map();
const num = (v, digits) => (v === null || v === undefined) ? "\u2013" : Number(v).toFixed(digits);

function el(tag, cls, parent) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (parent) parent.appendChild(e);
  return e;
}

function card(name) {
  if (cards.has(name)) return cards.get(name);
  const root = el("div", "card", document.getElementById("pipelines"));
  const h = el("h2", "", root);
  h.textContent = name;
  const c = { root, state: el("span", "state", h), table: el("table", "", root), error: el("div", "error", root),
              img: el("img", "", root), note: el("div", "note", root), outputs: el("div", "outputs", root),
              views: new Map() };
  c.img.alt = "preview of " + name;
  c.img.onload = () => { c.img.style.display = "block"; c.note.textContent = ""; };
  c.img.onerror = () => { c.img.style.display = "none"; c.note.textContent = "no preview available"; };
  cards.set(name, c);
  return c;
}

// One de-normalized tensor view per output, captioned with the output's name.
function views(c, p) {
  const seen = new Set(p.outputs);
  for (const [name, v] of c.views) {
    if (!seen.has(name)) { v.remove(); c.views.delete(name); }
  }
  for (const name of p.outputs) {
    if (!c.views.has(name)) {
      const f = el("figure", "", c.outputs);
      const img = el("img", "", f);
      img.alt = "output " + name;
      el("figcaption", "", f).textContent = name;
      c.views.set(name, f);
    }
    c.views.get(name).firstChild.src = "/preview/" + encodeURIComponent(p.name) + "/" + encodeURIComponent(name) +
      ".jpg?t=" + Date.now();
  }
}

function rows(table, pairs) {
  table.replaceChildren();
  for (const [k, v] of pairs) {
    const tr = el("tr", "", table);
    el("td", "", tr).textContent = k;
    el("td", "", tr).textContent = v;
  }
}

function render(s) {
  document.getElementById("version").textContent = s.version;
  document.getElementById("daemon").textContent =
    (s.ready ? "ready" : "not ready") + " \u00b7 device " + s.device + " \u00b7 up " + num(s.uptime_s, 0) +
    " s \u00b7 config " + s.config.path + " (reloads " + s.config.reloads_ok + " ok, " + s.config.reloads_failed +
    " failed)" + s.gpus.map(g => " \u00b7 " + g.device + " " + num(g.used_bytes / 2 ** 30, 1) + " / " +
    num(g.total_bytes / 2 ** 30, 1) + " GiB");
  const seen = new Set();
  for (const p of s.pipelines) {
    seen.add(p.name);
    const c = card(p.name);
    c.state.textContent = p.state;
    c.state.className = "state " + p.state;
    const dropped = Object.entries(p.dropped).map(([k, v]) => k + " " + v).join(", ");
    rows(c.table, [["source", p.source], ["device", p.device], ["codec", p.codec || "\u2013"],
                   ["frame", p.frame || "\u2013"],
                   ["fps", num(p.fps, 1)], ["decoded / processed", p.frames_decoded + " / " + p.frames_processed],
                   ["dropped", dropped], ["decode errors", String(p.decode_errors)],
                   ["reconnects", String(p.reconnects)], ["queue depth", String(p.queue_depth)],
                   ["decoder", (p.decoder || "\u2013") + (p.nvdec_fallbacks ? " (" + p.nvdec_fallbacks + " NVDEC fallbacks)" : "")],
                   ["frame pool", p.pool.in_use + " / " + p.pool.capacity],
                   ["last frame age", p.last_frame_age_s === null ? "\u2013" : num(p.last_frame_age_s, 2) + " s"],
                   ["mean latency", p.latency.mean_s === null ? "\u2013" : num(p.latency.mean_s * 1000, 2) + " ms"]]);
    c.error.textContent = p.last_error;
    c.img.src = "/preview/" + encodeURIComponent(p.name) + ".jpg?boxes=1&t=" + Date.now();
    views(c, p);
  }
  for (const [name, c] of cards) {
    if (!seen.has(name)) { c.root.remove(); cards.delete(name); }
  }
}

async function refresh() {
  try {
    const r = await fetch("/status", { cache: "no-store" });
    render(await r.json());
  } catch (e) {
    document.getElementById("daemon").textContent = "status unavailable: " + e;
  }
}
refresh();
setInterval(refresh, 2000);
</script>
</body>
</html>
)html";

}  // namespace

std::string_view index_page_html() { return kPage; }

}  // namespace framefuse::daemon
