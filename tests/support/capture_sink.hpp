#pragma once
//! A batch group member's sinks for tests: every frame written is kept (index and output bytes, in
//! order); a write can be made to fail or to wait until released.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "pipeline/runtime/batch_group.hpp"

namespace framefuse::test {

//! Records what a member's sinks got, in order; optionally fails at a given write, or blocks each
//! write until released.
struct CaptureSinks {
  struct Written {
    int64_t index;
    std::vector<std::vector<std::byte>> outputs;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Written> frames;
  std::vector<std::vector<std::vector<int64_t>>> sink_shapes;   //!< per sink made: its outputs' shapes
  int flushes = 0;
  int fail_at = -1;            //!< write number (0-based) that throws SinkError
  bool hold = false;           //!< writes wait for release()
  int entered = 0;             //!< writes begun
  //! Copies `n` bytes of an output (host memory: std::memcpy when empty; a GPU test's can read
  //! device memory). Called under `mu`.
  std::function<void(std::byte* dst, const std::byte* src, size_t n)> copy_out;

  void release() {
    std::lock_guard lock(mu);
    hold = false;
    cv.notify_all();
  }
  bool wait_entered(int n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(20), [&] { return entered >= n; });
  }

  BatchGroup::SinkFactory factory() {
    return [this](std::span<const OutputPlan> plans) {
      std::lock_guard lock(mu);
      sink_shapes.emplace_back();
      for (const auto& p : plans) sink_shapes.back().push_back(p.shape);
      return std::unique_ptr<Sink>(new CaptureSink(*this, plans));
    };
  }

  class CaptureSink : public Sink {
   public:
    CaptureSink(CaptureSinks& c, std::span<const OutputPlan> plans) : c_(c), plans_(plans.begin(), plans.end()) {}
    void write(int64_t index, std::span<const std::byte* const> outs) override {
      std::unique_lock lock(c_.mu);
      const int n = c_.entered++;
      c_.cv.notify_all();
      c_.cv.wait(lock, [&] { return !c_.hold; });
      if (n == c_.fail_at) throw SinkError("disk full (test)");
      Written w{index, {}};
      for (size_t k = 0; k < plans_.size(); ++k) {
        std::vector<std::byte>& bytes = w.outputs.emplace_back(plans_[k].bytes_per_frame);
        if (c_.copy_out) {
          c_.copy_out(bytes.data(), outs[k], bytes.size());
        } else {
          std::memcpy(bytes.data(), outs[k], bytes.size());
        }
      }
      c_.frames.push_back(std::move(w));
    }
    void flush() override {
      std::lock_guard lock(c_.mu);
      ++c_.flushes;
    }

   private:
    CaptureSinks& c_;
    std::vector<OutputPlan> plans_;
  };
};

}  // namespace framefuse::test
