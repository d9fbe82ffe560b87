#include "pipeline/exec/cpu_executor.hpp"

#include <algorithm>
#include <spdlog/fmt/fmt.h>

#include "pipeline/error.hpp"
#include "pipeline/ops/dispatch.hpp"

namespace framefuse {

ParallelFor::ParallelFor(int threads) {
  const int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n; ++i) {
    workers_.emplace_back([this] {
      std::unique_lock lock(mu_);
      uint64_t seen = generation_;
      while (true) {
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        work(lock);
      }
    });
  }
}

ParallelFor::~ParallelFor() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

void ParallelFor::work(std::unique_lock<std::mutex>& lock) {
  ++busy_;
  while (next_ < end_) {
    const int64_t i = next_++;
    lock.unlock();
    (*fn_)(i);
    lock.lock();
  }
  if (--busy_ == 0) done_cv_.notify_all();
}

void ParallelFor::run(int64_t n, const std::function<void(int64_t)>& fn) {
  std::unique_lock lock(mu_);
  fn_ = &fn;
  next_ = 0;
  end_ = n;
  ++generation_;
  cv_.notify_all();
  work(lock);
  done_cv_.wait(lock, [&] { return busy_ == 0 && next_ >= end_; });
}

CpuExecutor::CpuExecutor(int threads) : pool_(threads) {}

std::string CpuExecutor::name() const { return fmt::format("cpu ({} threads)", pool_.threads()); }

void CpuExecutor::setup(const FrameInfo& frame, const ops::ColorParams& color, std::span<const OutputPlan> plans,
                        int /*max_batch*/) {
  frame_ = frame;
  color_ = color;
  params_.clear();
  row_begin_.assign(1, 0);
  for (const auto& p : plans) {
    params_.push_back(p.params);
    row_begin_.push_back(row_begin_.back() + p.height());
  }
}

void CpuExecutor::process(std::span<const ops::ImageView> frames, std::span<std::byte* const> outs) {
  if (outs.size() != params_.size()) throw ConfigError("cpu executor: output count differs from setup()");
  const int64_t rows = row_begin_.back();
  ops::dispatch_format(frame_.format, [&](auto tag) {
    using Reader = ops::FrameReader<decltype(tag)::value>;
    pool_.run(rows * static_cast<int64_t>(frames.size()), [&](int64_t item) {
      const int64_t b = item / rows, r = item % rows;
      const size_t k = static_cast<size_t>(std::upper_bound(row_begin_.begin(), row_begin_.end(), r) -
                                           row_begin_.begin() - 1);
      ops::Chain::Params p = params_[k];
      p.store.data = outs[k];
      const Reader src{frames[static_cast<size_t>(b)], color_};
      const int y = static_cast<int>(r - row_begin_[k]);
      for (int x = 0; x < p.store.width; ++x) ops::Chain::pixel(src, p, static_cast<int>(b), x, y);
    });
  });
}

std::unique_ptr<Executor> make_cpu_executor(int threads) { return std::make_unique<CpuExecutor>(threads); }

}  // namespace framefuse
