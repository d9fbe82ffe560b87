#pragma once
//! The fused chain on the CPU: rows of every output of every frame are spread over a thread pool;
//! each pixel goes through ops::Chain::pixel, the same definition the CUDA kernel runs.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "pipeline/exec/executor.hpp"

namespace framefuse {

//! A fixed pool that runs `fn(i)` for i in [0, n) and waits; the caller thread works too.
class ParallelFor {
 public:
  explicit ParallelFor(int threads);
  ~ParallelFor();
  ParallelFor(const ParallelFor&) = delete;
  ParallelFor& operator=(const ParallelFor&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  void run(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  void work(std::unique_lock<std::mutex>& lock);
  std::vector<std::jthread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t next_ = 0, end_ = 0, busy_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

class CpuExecutor final : public Executor {
 public:
  explicit CpuExecutor(int threads);
  std::string name() const override;
  void setup(const FrameInfo& frame, const ops::ColorParams& color, std::span<const OutputPlan> plans,
             int max_batch) override;
  void process(std::span<const ops::ImageView> frames, std::span<std::byte* const> outs) override;

 private:
  ParallelFor pool_;
  FrameInfo frame_{};
  ops::ColorParams color_{};
  std::vector<ops::Chain::Params> params_;
  std::vector<int64_t> row_begin_;   //!< prefix sum of output heights: work item -> (output, row)
};

}  // namespace framefuse
