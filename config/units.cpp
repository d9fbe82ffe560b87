#include "config/units.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <spdlog/fmt/fmt.h>

#include "pipeline/error.hpp"

namespace framefuse::config {
namespace {

//! A non-negative decimal number followed by a unit: "1.25MiB" -> {1, 25, 2, "MiB"}.
struct Decimal {
  uint64_t whole = 0;
  uint64_t fraction = 0;     //!< digits after the point, as an integer
  int fraction_digits = 0;
  bool has_digits = false;
  std::string_view unit;
};

constexpr int kMaxFractionDigits = 9;
constexpr uint64_t kMaxWhole = 1'000'000'000'000'000ull;   // 1e18: keeps whole * 10 in range

bool is_digit(char c) { return c >= '0' && c <= '9'; }

//! Throws with `what` ("duration", "size") when the text is not number-then-unit.
Decimal split_decimal(std::string_view text, std::string_view what, std::string_view example) {
  if (!text.empty() && text[0] == '-') throw ConfigError(fmt::format("{} '{}' must not be negative", what, text));
  Decimal d;
  size_t i = 0;
  for (; i < text.size() && is_digit(text[i]); ++i) {
    if (d.whole > kMaxWhole) throw ConfigError(fmt::format("{} '{}' is too large", what, text));
    d.whole = d.whole * 10 + uint64_t(text[i] - '0');
    d.has_digits = true;
  }
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && is_digit(text[i]); ++i) {
      if (++d.fraction_digits > kMaxFractionDigits)
        throw ConfigError(fmt::format("{} '{}' has more than {} decimals", what, text, kMaxFractionDigits));
      d.fraction = d.fraction * 10 + uint64_t(text[i] - '0');
      d.has_digits = true;
    }
  }
  if (!d.has_digits) throw ConfigError(fmt::format("expected a {} like '{}', got '{}'", what, example, text));
  d.unit = text.substr(i);
  return d;
}

//! d * unit exactly, or throws when the result is fractional or overflows.
uint64_t scale_exact(const Decimal& d, uint64_t unit, std::string_view text, std::string_view what,
                     std::string_view finer_than) {
  if (d.whole > std::numeric_limits<int64_t>::max() / unit)
    throw ConfigError(fmt::format("{} '{}' is too large", what, text));
  uint64_t pow10 = 1;
  for (int k = 0; k < d.fraction_digits; ++k) pow10 *= 10;
  // fraction < 1e9 and unit <= 3.6e9 (1h in us): the product fits in 64 bits.
  const unsigned __int128 frac = static_cast<unsigned __int128>(d.fraction) * unit;
  if (frac % pow10 != 0) throw ConfigError(fmt::format("{} '{}' is finer than {}", what, text, finer_than));
  const uint64_t total = d.whole * unit + static_cast<uint64_t>(frac / pow10);
  if (total > uint64_t(std::numeric_limits<int64_t>::max()))
    throw ConfigError(fmt::format("{} '{}' is too large", what, text));
  return total;
}

struct Unit {
  std::string_view name;
  uint64_t factor;
};

constexpr std::array<Unit, 5> kDurationUnits{{{"h", 3'600'000'000ull}, {"m", 60'000'000ull},
                                              {"s", 1'000'000ull}, {"ms", 1'000ull}, {"us", 1ull}}};
constexpr std::array<Unit, 8> kSizeUnits{{{"B", 1ull},
                                          {"KiB", 1ull << 10},
                                          {"MiB", 1ull << 20},
                                          {"GiB", 1ull << 30},
                                          {"kB", 1'000ull},
                                          {"KB", 1'000ull},
                                          {"MB", 1'000'000ull},
                                          {"GB", 1'000'000'000ull}}};

}  // namespace

std::chrono::microseconds parse_duration(std::string_view text) {
  const Decimal d = split_decimal(text, "duration", "5s");
  if (d.unit.empty())
    throw ConfigError(fmt::format("duration '{}' needs a unit (us, ms, s, m or h), e.g. '{}s'", text, text));
  for (const Unit& u : kDurationUnits) {
    if (u.name == d.unit) return std::chrono::microseconds(scale_exact(d, u.factor, text, "duration", "1us"));
  }
  throw ConfigError(fmt::format("duration '{}' has unknown unit '{}' (expected us, ms, s, m or h)", text, d.unit));
}

uint64_t parse_size(std::string_view text) {
  const Decimal d = split_decimal(text, "size", "64MiB");
  if (d.unit.empty()) return scale_exact(d, 1, text, "size", "a byte");
  for (const Unit& u : kSizeUnits) {
    if (u.name == d.unit) return scale_exact(d, u.factor, text, "size", "a byte");
  }
  throw ConfigError(
      fmt::format("size '{}' has unknown unit '{}' (expected B, KiB, MiB, GiB, kB, MB or GB)", text, d.unit));
}

std::string format_duration(std::chrono::microseconds d) {
  const auto us = static_cast<uint64_t>(d.count() < 0 ? -d.count() : d.count());
  const std::string_view sign = d.count() < 0 ? "-" : "";
  if (us == 0) return "0s";
  // The largest unit that divides exactly; the search stops at 1us at the latest.
  const Unit& u = *std::find_if(kDurationUnits.begin(), kDurationUnits.end(),
                                [us](const Unit& unit) { return us % unit.factor == 0; });
  return fmt::format("{}{}{}", sign, us / u.factor, u.name);
}

}  // namespace framefuse::config
