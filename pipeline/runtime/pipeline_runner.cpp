#include "pipeline/runtime/pipeline_runner.hpp"

#include <spdlog/spdlog.h>

#include <condition_variable>
#include <random>
#include <vector>

#include "pipeline/decode/video_source.hpp"
#include "pipeline/error.hpp"
#include "pipeline/exec/device.hpp"
#include "pipeline/runtime/bounded_queue.hpp"
#include "pipeline/sinks/sink.hpp"
#include "pipeline/util/redact.hpp"

namespace framefuse {

namespace {
int64_t steady_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

struct PipelineRunner::Impl {
  explicit Impl(size_t depth) : queue(depth) {}
  BoundedQueue<DecodedFrame> queue;
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stop = false;
  std::mutex source_mu;
  VideoSource* source = nullptr;   //!< the open source, for interrupt(); guarded by source_mu
  std::jthread decode_thread, process_thread;
};

PipelineRunner::PipelineRunner(PipelineSpec spec, DeviceSpec device, int cpu_threads)
    : spec_(std::move(spec)), device_(device), cpu_threads_(cpu_threads),
      impl_(std::make_unique<Impl>(static_cast<size_t>(spec_.queue_depth))) {}

PipelineRunner::~PipelineRunner() {
  request_stop();
  join();
}

std::optional<DecodedFrame> PipelineRunner::latest_frame() const {
  std::lock_guard lock(latest_mu_);
  return latest_;
}

void PipelineRunner::request_stop() {
  {
    std::lock_guard lock(impl_->stop_mu);
    impl_->stop = true;
  }
  impl_->stop_cv.notify_all();
  std::lock_guard lock(impl_->source_mu);
  if (impl_->source) impl_->source->interrupt();
}

void PipelineRunner::join() {
  if (impl_->decode_thread.joinable()) impl_->decode_thread.join();
  if (impl_->process_thread.joinable()) impl_->process_thread.join();
}

void PipelineRunner::start() {
  const std::string uri = redact_uri(spec_.source.uri);
  const bool live = spec_.source.kind == SourceKind::Rtsp;

  // Decode: open (and for live sources reconnect with capped, jittered exponential backoff),
  // read frames, queue them. Files block when the queue is full; live sources drop the oldest.
  impl_->decode_thread = std::jthread([this, uri, live] {
    std::mt19937 rng(std::random_device{}());
    auto backoff = spec_.source.reconnect_initial;
    int attempts = 0;
    auto stopping = [this] {
      std::lock_guard lock(impl_->stop_mu);
      return impl_->stop;
    };
    while (!stopping()) {
      VideoSource source(spec_.source, spec_.name);
      {
        std::lock_guard lock(impl_->source_mu);
        impl_->source = &source;
      }
      bool ended = false;
      try {
        stats_.set_state(SourceState::Connecting);
        source.open();
        stats_.set_state(SourceState::Streaming);
        backoff = spec_.source.reconnect_initial;
        while (auto frame = source.read()) {
          stats_.frames_decoded.fetch_add(1, std::memory_order_relaxed);
          stats_.last_frame_ns.store(steady_ns(frame->decoded_at), std::memory_order_relaxed);
          {
            std::lock_guard lock(latest_mu_);
            latest_ = *frame;
          }
          if (live) {
            if (impl_->queue.push_drop_oldest(std::move(*frame))) stats_.drop(DropReason::QueueFull);
          } else if (!impl_->queue.push_wait(std::move(*frame))) {
            break;
          }
          stats_.queue_depth.store(static_cast<int64_t>(impl_->queue.size()), std::memory_order_relaxed);
        }
        ended = true;
      } catch (const std::exception& e) {
        if (!stopping()) {
          stats_.set_error(e.what());
          spdlog::error("{}", e.what());
        }
      }
      stats_.decode_errors.store(source.decode_errors(), std::memory_order_relaxed);
      {
        std::lock_guard lock(impl_->source_mu);
        impl_->source = nullptr;
      }
      if (stopping()) break;
      if (!live) {
        stats_.set_state(ended ? SourceState::Finished : SourceState::Failed);
        break;
      }
      if (spec_.source.max_reconnects >= 0 && attempts >= spec_.source.max_reconnects) {
        stats_.set_state(SourceState::Failed);
        spdlog::error("pipeline '{}': source {} gave up after {} reconnects", spec_.name, uri, attempts);
        break;
      }
      stats_.set_state(SourceState::Backoff);
      const auto wait = std::chrono::milliseconds(
          std::uniform_int_distribution<int64_t>(backoff.count() / 2, backoff.count())(rng));
      spdlog::warn("pipeline '{}': reconnecting to {} in {} ms", spec_.name, uri, wait.count());
      {
        std::unique_lock lock(impl_->stop_mu);
        impl_->stop_cv.wait_for(lock, wait, [this] { return impl_->stop; });
      }
      backoff = std::min(backoff * 2, spec_.source.reconnect_max);
      ++attempts;
      stats_.reconnects.fetch_add(1, std::memory_order_relaxed);
    }
    impl_->queue.close();
  });

  // Process: (re)plan on the first frame and on any change of frame shape/format, run the fused
  // chain, hand outputs to the sink. Frames already queued at stop are drained, then sinks flushed.
  impl_->process_thread = std::jthread([this] {
    std::unique_ptr<Executor> executor;
    std::unique_ptr<Sink> sink;
    std::vector<OutputPlan> plans;
    std::vector<std::vector<std::byte>> buffers;
    std::vector<std::byte*> outs;
    std::vector<const std::byte*> sink_outs;
    std::optional<FrameInfo> current;
    try {
      executor = make_executor(device_, cpu_threads_);
      while (auto frame = impl_->queue.pop()) {
        stats_.queue_depth.store(static_cast<int64_t>(impl_->queue.size()), std::memory_order_relaxed);
        if (!current || !(*current == frame->info)) {
          if (sink) sink->flush();
          plans = make_output_plans(spec_, frame->info);
          executor->setup(frame->info, make_color_params(spec_.color, frame->info), plans, 1);
          sink = make_sink(spec_.sink, plans, spec_.name);
          buffers.assign(plans.size(), {});
          outs.clear();
          for (size_t k = 0; k < plans.size(); ++k) {
            buffers[k].resize(plans[k].bytes_per_frame);
            outs.push_back(buffers[k].data());
          }
          sink_outs.assign(outs.begin(), outs.end());
          spdlog::info("pipeline '{}': {} frames on {}, {} output(s)", spec_.name, describe(frame->info),
                       executor->name(), plans.size());
          stats_.set_frame(describe(frame->info));
          current = frame->info;
        }
        executor->process({&frame->view, 1}, outs);
        sink->write(frame->index, sink_outs);
        stats_.frames_processed.fetch_add(1, std::memory_order_relaxed);
        stats_.observe_latency(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - frame->decoded_at).count());
      }
      if (sink) sink->flush();
    } catch (const std::exception& e) {
      // A plan, device or sink failure ends this pipeline only; the source stops too.
      stats_.set_error(e.what());
      stats_.set_state(SourceState::Failed);
      spdlog::error("pipeline '{}': {}", spec_.name, e.what());
      request_stop();
      impl_->queue.close();
      while (impl_->queue.pop()) stats_.drop(DropReason::ProcessError);
    }
    done_.store(true, std::memory_order_release);
  });
}

}  // namespace framefuse
