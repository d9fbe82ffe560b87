#pragma once
//! Escaping for the texts framefuse writes (metrics, JSON status, sink metadata, JSON logs). Input bytes that are not valid UTF-8 become U+FFFD, so
//! a stray Latin-1 file name or FFmpeg message never makes a scrape or a JSON document invalid.
#include <string>
#include <string_view>

namespace framefuse {

//! `s` with every invalid UTF-8 sequence replaced by U+FFFD.
std::string valid_utf8(std::string_view s);

//! `s` as one printable line, for messages that quote input: control characters written as \n, \r,
//! \t or \xHH, invalid UTF-8 as U+FFFD.
std::string printable_line(std::string_view s);

//! Prometheus label value (text format 0.0.4): backslash, double quote and newline escaped.
std::string prometheus_label_value(std::string_view s);

//! JSON string literal, quotes included: ", \ and control characters escaped.
std::string json_string(std::string_view s);

//! JSON number; NaN and infinities (not representable in JSON) become null.
std::string json_number(double v);

}  // namespace framefuse
