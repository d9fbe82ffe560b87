#pragma once
//! The small status page served at `/`: self-contained HTML (no external assets) that polls
//! /status every 2 s and shows each pipeline's numbers and its /preview/<name>.jpg.
#include <string_view>

namespace framefuse::daemon {

std::string_view index_page_html();

}  // namespace framefuse::daemon
