#pragma once
//! Rate limiting for log lines that may repeat endlessly (a camera that stays down, or flaps): the
//! first occurrence of a message is shown, its repeats are counted and shown again, with their
//! count, at most once per interval. Messages are tracked each on their own, so messages that
//! alternate (fails, recovers, fails, ...) are limited too; past `max_messages` distinct ones, the
//! least recently shown is forgotten (its next occurrence is shown as new). Thread-safe; keep one
//! limiter per subject (e.g. per pipeline) so that one noisy source never silences another.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace framefuse {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  struct Verdict {
    bool show = false;      //!< log this occurrence
    uint64_t repeats = 0;   //!< when shown: occurrences since the message was last shown, this one
                            //!< included; 0 = first occurrence (show it plainly)
  };

  explicit LogLimiter(Clock::duration interval = std::chrono::seconds(30), size_t max_messages = 32)
      : interval_(interval), max_messages_(std::max<size_t>(max_messages, 1)) {}

  //! Records one occurrence of `message` (a stable key: leave out counters and durations that
  //! change between repeats) at `now`, and says whether to log it.
  Verdict admit(std::string_view message, Clock::time_point now = Clock::now()) {
    std::lock_guard lock(mu_);
    const auto it = std::find_if(seen_.begin(), seen_.end(), [&](const Seen& s) { return s.message == message; });
    if (it == seen_.end()) {
      if (seen_.size() == max_messages_)
        seen_.erase(std::min_element(seen_.begin(), seen_.end(),
                                     [](const Seen& a, const Seen& b) { return a.shown_at < b.shown_at; }));
      seen_.push_back({std::string(message), now, 0});
      return {true, 0};
    }
    ++it->pending;
    if (now - it->shown_at < interval_) return {false, 0};
    it->shown_at = now;
    return {true, std::exchange(it->pending, 0)};
  }

 private:
  struct Seen {
    std::string message;
    Clock::time_point shown_at;
    uint64_t pending;   //!< occurrences since last shown
  };
  const Clock::duration interval_;
  const size_t max_messages_;
  std::mutex mu_;
  std::vector<Seen> seen_;
};

}  // namespace framefuse
