#include "pipeline/runtime/preview_frame.hpp"

#include "pipeline/util/clock.hpp"

namespace framefuse {

std::optional<DecodedFrame> PreviewFrame::want(Clock::duration keep, Clock::duration wait) {
  const Clock::time_point now = Clock::now();
  const int64_t until = steady_ns(now + keep);
  int64_t current = wanted_until_ns_.load(std::memory_order_relaxed);
  while (current < until && !wanted_until_ns_.compare_exchange_weak(current, until, std::memory_order_relaxed)) {
  }
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, now + wait, [this] { return frame_.has_value() || ended_; });
  return frame_;
}

void PreviewFrame::offer(const DecodedFrame& frame, Clock::time_point now) {
  const bool wanted = steady_ns(now) < wanted_until_ns_.load(std::memory_order_relaxed);
  if (!wanted && !kept_.load(std::memory_order_relaxed)) return;
  {
    std::lock_guard lock(mu_);
    if (wanted) {
      frame_ = frame;
    } else {
      frame_.reset();
    }
    kept_.store(wanted, std::memory_order_relaxed);
  }
  if (wanted) cv_.notify_all();
}

void PreviewFrame::expire(Clock::time_point now) {
  if (!kept_.load(std::memory_order_relaxed) || steady_ns(now) < wanted_until_ns_.load(std::memory_order_relaxed))
    return;
  std::lock_guard lock(mu_);
  if (steady_ns(now) < wanted_until_ns_.load(std::memory_order_relaxed)) return;   // wanted again meanwhile
  frame_.reset();
  kept_.store(false, std::memory_order_relaxed);
}

void PreviewFrame::end() {
  {
    std::lock_guard lock(mu_);
    ended_ = true;
    frame_.reset();
    kept_.store(false, std::memory_order_relaxed);
  }
  cv_.notify_all();
}

}  // namespace framefuse
