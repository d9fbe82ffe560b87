#include "pipeline/util/log_limiter.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace framefuse {
namespace {

using namespace std::chrono_literals;
using Clock = LogLimiter::Clock;

struct Step {
  std::chrono::milliseconds at;   //!< since the start of the case
  std::string message;
  bool show;
  uint64_t repeats;
};

struct Case {
  const char* name;
  std::vector<Step> steps;
};

class LogLimiterSequence : public ::testing::TestWithParam<Case> {};

TEST_P(LogLimiterSequence, ShowsFirstThenSummarisesAtMostOncePerInterval) {
  LogLimiter limiter(30s);
  const Clock::time_point t0 = Clock::now();
  for (size_t i = 0; i < GetParam().steps.size(); ++i) {
    const Step& s = GetParam().steps[i];
    const auto v = limiter.admit(s.message, t0 + s.at);
    EXPECT_EQ(v.show, s.show) << "step " << i << " at " << s.at.count() << " ms: " << s.message;
    EXPECT_EQ(v.repeats, s.repeats) << "step " << i << " at " << s.at.count() << " ms: " << s.message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LogLimiterSequence,
    ::testing::Values(
        Case{"first_occurrence_shown_plainly", {{0ms, "refused", true, 0}}},
        Case{"repeats_within_interval_are_counted_silently",
             {{0ms, "refused", true, 0},
              {1000ms, "refused", false, 0},
              {29999ms, "refused", false, 0},
              {30000ms, "refused", true, 3},   // 2 suppressed + this one
              {30001ms, "refused", false, 0},
              {59999ms, "refused", false, 0},
              {60000ms, "refused", true, 3}}},
        Case{"alternating_messages_are_limited_each_on_its_own",
             {{0ms, "refused", true, 0},
              {10ms, "streaming again", true, 0},
              {20ms, "refused", false, 0},
              {30ms, "streaming again", false, 0},
              {40ms, "timed out", true, 0},   // a new message: shown at once
              {50ms, "refused", false, 0},
              {30000ms, "refused", true, 3},
              {30005ms, "timed out", false, 0},
              {30010ms, "streaming again", true, 2}}},
        Case{"steady_repeats_summarised_every_interval",
             [] {
               std::vector<Step> steps;   // one occurrence a second for 100 s
               for (int t = 0; t <= 100; ++t) {
                 const bool show = t % 30 == 0;
                 steps.push_back({std::chrono::seconds(t), "stalled", show, show && t > 0 ? 30u : 0u});
               }
               return steps;
             }()},
        Case{"a_late_repeat_after_a_quiet_spell_is_shown_with_its_count",
             {{0ms, "refused", true, 0}, {600000ms, "refused", true, 1}}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(LogLimiter, BeyondItsCapacityTheLeastRecentlyShownMessageIsForgotten) {
  LogLimiter limiter(30s, 2);
  const Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(limiter.admit("a", t0).show);
  EXPECT_TRUE(limiter.admit("b", t0 + 1s).show);
  EXPECT_FALSE(limiter.admit("a", t0 + 2s).show);
  EXPECT_FALSE(limiter.admit("b", t0 + 2s).show);
  EXPECT_TRUE(limiter.admit("c", t0 + 3s).show);   // evicts "a", shown longest ago
  EXPECT_FALSE(limiter.admit("b", t0 + 4s).show) << "b is still tracked";
  const auto v = limiter.admit("a", t0 + 5s);
  EXPECT_TRUE(v.show) << "a was forgotten: shown as new";
  EXPECT_EQ(v.repeats, 0u);
}

TEST(LogLimiter, ZeroIntervalShowsEveryOccurrenceWithItsCount) {
  LogLimiter limiter(0s);
  const Clock::time_point t0 = Clock::now();
  EXPECT_EQ(limiter.admit("x", t0).repeats, 0u);
  for (int i = 1; i < 5; ++i) {
    const auto v = limiter.admit("x", t0 + std::chrono::milliseconds(i));
    EXPECT_TRUE(v.show);
    EXPECT_EQ(v.repeats, 1u);
  }
}

//! Concurrent callers: every occurrence is accounted for exactly once, either shown or in the
//! count of a later summary (a final occurrence far in the future flushes the last count).
TEST(LogLimiter, ConcurrentCallersLoseNoOccurrence) {
  constexpr uint64_t kThreads = 4, kEach = 20000;
  for (const auto interval : {Clock::duration(0s), Clock::duration(1h)}) {
    LogLimiter limiter(interval);
    std::atomic<uint64_t> shown{0}, counted{0};
    auto tally = [&](LogLimiter::Verdict v) {
      if (!v.show) return;
      shown.fetch_add(1);
      counted.fetch_add(v.repeats == 0 ? 1 : v.repeats);
    };
    std::vector<std::thread> threads;
    for (uint64_t t = 0; t < kThreads; ++t)
      threads.emplace_back([&] {
        for (uint64_t i = 0; i < kEach; ++i) tally(limiter.admit("same"));
      });
    for (auto& th : threads) th.join();
    if (interval == Clock::duration(1h)) EXPECT_EQ(shown.load(), 1u) << "only the first is shown within the hour";
    const auto flush = limiter.admit("same", Clock::now() + 2h);
    ASSERT_TRUE(flush.show);
    EXPECT_EQ(counted.load() + flush.repeats - 1, kThreads * kEach);
  }
}

}  // namespace
}  // namespace framefuse
