#include "pipeline/runtime/pipeline_runner.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <random>
#include <vector>

#include "pipeline/control/control_engine.hpp"
#include "pipeline/decode/video_source.hpp"
#include "pipeline/error.hpp"
#include "pipeline/exec/device.hpp"
#include "pipeline/runtime/bounded_queue.hpp"
#include "pipeline/sinks/sink.hpp"
#include "pipeline/util/clock.hpp"
#include "pipeline/util/log_limiter.hpp"
#include "pipeline/util/redact.hpp"

namespace framefuse {

namespace {
using Clock = std::chrono::steady_clock;

//! The stall watchdog looks at a live source at least this often.
constexpr auto kWatchdogTick = std::chrono::milliseconds(250);

//! Logs `line` unless `limiter` holds back this repeat of `key`; a summary says how many there were.
void log_limited(LogLimiter& limiter, spdlog::level::level_enum level, std::string_view key, std::string_view line) {
  if (const auto v = limiter.admit(key); v.show) {
    if (v.repeats > 1) {
      spdlog::log(level, "{} (repeated {} times)", line, v.repeats);
    } else {
      spdlog::log(level, "{}", line);
    }
  }
}

//! Frame rate control durations (seconds -> frames) assume when the stream does not state one.
constexpr double kAssumedFrameRate = 25;
}  // namespace

struct PipelineRunner::Impl {
  explicit Impl(size_t depth) : queue(depth) {}
  BoundedQueue<DecodedFrame> queue;
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stop = false;
  std::mutex source_mu;
  VideoSource* source = nullptr;   //!< the open source, for interrupt(); guarded by source_mu
  std::atomic<double> frame_rate{0};   //!< the open source's frame rate (0 = unknown), for control
  //! Live sources: steady_ns() of the last frame, or of the open if none came since. Published
  //! before the state becomes Streaming (release fence), read after it (acquire fence).
  std::atomic<int64_t> activity_ns{0};
  bool decoding = true;   //!< false once the decode thread ended; guarded by stop_mu
  LogLimiter log;         //!< supervision lines: repeats at most every 30 s
  std::jthread decode_thread, process_thread, watchdog_thread;
};

PipelineRunner::PipelineRunner(PipelineSpec spec, DeviceSpec device, int cpu_threads, BatchGroup* group,
                               DecoderShare* share, DecodeBalancer* balancer)
    : spec_(std::move(spec)), device_(device), cpu_threads_(cpu_threads), group_(group),
      impl_(std::make_unique<Impl>(static_cast<size_t>(spec_.queue_depth))),
      share_(share && decodes_file_in_software(spec_, device_) ? share : nullptr),
      balancer_(balancer) {
  if (share_) share_->join();
}

PipelineRunner::~PipelineRunner() {
  request_stop();
  join();
  if (share_) share_->leave();
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

uint64_t PipelineRunner::drop_queued(DropReason reason) {
  uint64_t n = 0;
  for (; impl_->queue.try_pop(); ++n) stats_.drop(reason);
  return n;
}

void PipelineRunner::join() {
  if (impl_->decode_thread.joinable()) impl_->decode_thread.join();
  if (impl_->process_thread.joinable()) impl_->process_thread.join();
  if (impl_->watchdog_thread.joinable()) impl_->watchdog_thread.join();
}

void PipelineRunner::setup_control(Executor& executor, const FrameInfo& frame, std::span<const OutputPlan> plans) {
  std::vector<std::string> names;
  if (spec_.control.enabled) {
    double fps = impl_->frame_rate.load(std::memory_order_relaxed);
    if (!(fps > 0)) {
      fps = kAssumedFrameRate;
      spdlog::warn("pipeline '{}': the stream states no frame rate; control durations assume {} fps", spec_.name, fps);
    }
    executor.setup_control(
        control::make_control_params(spec_.control, frame, plans, fps, fmt::format("pipeline '{}'", spec_.name)));
    for (const auto& p : plans) names.push_back(p.name);
  }
  stats_.set_control_outputs(std::move(names));
}

void PipelineRunner::start() {
  const std::string uri = redact_uri(spec_.source.uri);
  const bool live = spec_.source.kind == SourceKind::Rtsp;

  // Decode buffers, shared by every (re)connection: software frames decode into the pool's slots
  // (pinned on CUDA devices). When it runs dry, files wait and live sources drop the oldest frame.
  // A group member's frames also wait in the group and ride in its batches.
  DecodeOptions decode = decode_options(spec_, device_, 1, group_ ? group_->frames_held_per_member() : 0);
  decode.balancer = balancer_;
  if (live) {
    decode.pool->set_drop_oldest([this] {
      if (!impl_->queue.drop_oldest()) return false;
      stats_.drop(DropReason::PoolExhausted);
      return true;
    });
  }
  stats_.pool_capacity.store(decode.pool->capacity(), std::memory_order_relaxed);
  // The pool is sized for FFmpeg's thread count (an upper bound: slots are made on first use); each
  // (re)opened decoder takes the share of the cores among the runners alive by then, so that
  // pipelines started one after another (the daemon's) all count each other.
  if (share_) decode.threads_at_open = [share = share_] { return share->threads(); };
  decode.on_fallback = [this, warned = std::make_shared<std::atomic<bool>>(false)](const std::string& why) {
    stats_.nvdec_fallbacks.fetch_add(1, std::memory_order_relaxed);
    stats_.set_decoder("cpu");
    if (!warned->exchange(true)) spdlog::warn("pipeline '{}': {}; decoding in software", spec_.name, why);
  };

  // Decode: open, read frames, queue them. Files block when the queue is full; live sources drop
  // the oldest and are supervised: any failure (a stalled session given up, the server gone or
  // refusing) reconnects after a capped, jittered, exponential backoff, until max_reconnects
  // reconnects in a row brought no frame. Repeated failures are logged at most every 30 s.
  impl_->decode_thread = std::jthread([this, uri, live, decode] {
    std::mt19937 rng(std::random_device{}());
    auto backoff = spec_.source.reconnect_initial;
    int failed = 0;                                // reconnects since the last frame
    std::optional<Clock::time_point> down_since;   // live: when the current outage began
    uint64_t earlier_errors = 0;                   // decode errors of the sessions before this one
    // Frames of the sessions before this one: frame indices (npy file names, ring slots) and
    // max_frames run on across reconnects instead of starting again at 0.
    int64_t earlier_frames = 0;
    auto stopping = [this] {
      std::lock_guard lock(impl_->stop_mu);
      return impl_->stop;
    };
    while (!stopping()) {
      SourceSpec session = spec_.source;
      if (session.max_frames >= 0) session.max_frames -= earlier_frames;   // > 0: reaching it ends the pipeline
      VideoSource source(session, spec_.name, decode);
      const int64_t session_base = earlier_frames;
      {
        std::lock_guard lock(impl_->source_mu);
        impl_->source = &source;
      }
      if (stopping()) source.interrupt();   // stop came before the source could be interrupted
      bool ended = false;
      std::string error;
      try {
        stats_.set_state(SourceState::Connecting);
        source.open();
        stats_.set_decoder(decoder_name(source.decoder()));
        stats_.set_codec(source.codec());
        if (balancer_ && spec_.decoder == DecoderKind::Auto && device_.kind == DeviceKind::Cuda) {
          const DecodeBalancer::Load nv = balancer_->nvdec(device_.index), cpu = balancer_->cpu();
          spdlog::info("pipeline '{}': hybrid decode: {} (NVDEC of {}: {:.0f} % paced, {} unpaced; cores: {:.0f} % "
                       "paced, {} unpaced)",
                       spec_.name, source.decoder() == DecoderKind::Nvdec ? "nvdec" : "software", to_string(device_),
                       100 * nv.paced / nv.capacity, nv.unpaced, 100 * cpu.paced / cpu.capacity, cpu.unpaced);
        }
        impl_->frame_rate.store(source.frame_rate(), std::memory_order_relaxed);   // published by the queue push
        impl_->activity_ns.store(steady_now_ns(), std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_release);
        stats_.set_state(SourceState::Streaming);
        while (auto frame = source.read()) {
          frame->index += session_base;
          earlier_frames = frame->index + 1;
          impl_->activity_ns.store(steady_ns(frame->decoded_at), std::memory_order_relaxed);
          if (live) {
            auto stalled = static_cast<uint8_t>(SourceState::Stalled);
            if (stats_.state.compare_exchange_strong(stalled, static_cast<uint8_t>(SourceState::Streaming)))
              log_limited(impl_->log, spdlog::level::info, "resumed",
                          fmt::format("pipeline '{}': source '{}': frames again after a stall", spec_.name, uri));
            if (down_since) {
              const double down_s = std::chrono::duration<double>(Clock::now() - *down_since).count();
              log_limited(impl_->log, spdlog::level::info, "recovered",
                          fmt::format("pipeline '{}': source '{}': streaming again after {:.1f} s and {} reconnect(s)",
                                      spec_.name, uri, down_s, failed));
              down_since.reset();
              failed = 0;
              backoff = spec_.source.reconnect_initial;
            }
          }
          if (stats_.frames_decoded.fetch_add(1, std::memory_order_relaxed) == 0)
            stats_.first_frame_ns.store(steady_ns(frame->decoded_at), std::memory_order_relaxed);
          stats_.decode_errors.store(earlier_errors + source.decode_errors(), std::memory_order_relaxed);
          stats_.last_frame_ns.store(steady_ns(frame->decoded_at), std::memory_order_relaxed);
          preview_->offer(*frame, frame->decoded_at);
          // The queue closes early only when processing failed: the frame is dropped for that.
          using Pushed = BoundedQueue<DecodedFrame>::Pushed;
          const Pushed pushed = live ? impl_->queue.push_drop_oldest(std::move(*frame))
                                     : impl_->queue.push_wait(std::move(*frame)) ? Pushed::Queued : Pushed::Closed;
          if (pushed == Pushed::QueuedDroppingOldest) stats_.drop(DropReason::QueueFull);
          if (pushed == Pushed::Closed) {
            stats_.drop(DropReason::ProcessError);
            break;
          }
          stats_.queue_depth.store(static_cast<int64_t>(impl_->queue.size()), std::memory_order_relaxed);
          stats_.pool_in_use.store(decode.pool->in_use(), std::memory_order_relaxed);
        }
        ended = true;   // end of file, max_frames, or stop
      } catch (const std::exception& e) {
        error = e.what();   // one line, URI redacted
        if (!stopping()) stats_.set_error(error);
      }
      earlier_errors += source.decode_errors();
      stats_.decode_errors.store(earlier_errors, std::memory_order_relaxed);
      {
        std::lock_guard lock(impl_->source_mu);
        impl_->source = nullptr;
      }
      if (stopping()) break;
      if (ended || !live) {
        if (!ended) spdlog::error("{}", error);
        stats_.set_state(ended ? SourceState::Finished : SourceState::Failed);
        break;
      }
      if (!down_since) down_since = Clock::now();
      if (spec_.source.max_reconnects >= 0 && failed >= spec_.source.max_reconnects) {
        stats_.set_state(SourceState::Failed);
        spdlog::error("{}; giving up after {} reconnect(s) without a frame", error, failed);
        break;
      }
      stats_.set_state(SourceState::Backoff);
      const auto wait = std::chrono::milliseconds(
          std::uniform_int_distribution<int64_t>(backoff.count() / 2, backoff.count())(rng));
      log_limited(impl_->log, spdlog::level::warn, error,
                  fmt::format("{}; reconnecting in {} ms", error, wait.count()));
      {
        std::unique_lock lock(impl_->stop_mu);
        if (impl_->stop_cv.wait_for(lock, wait, [this] { return impl_->stop; })) break;
      }
      backoff = std::min(backoff * 2, spec_.source.reconnect_max);
      ++failed;
      stats_.reconnects.fetch_add(1, std::memory_order_relaxed);
    }
    {
      std::lock_guard lock(impl_->stop_mu);
      impl_->decoding = false;
    }
    impl_->stop_cv.notify_all();
    preview_->end();
    impl_->queue.close();
  });

  // Stall watchdog (live sources): no frame for stall_timeout while streaming flips the state to
  // Stalled while the read still waits; the decode thread flips it back on the next frame, or
  // reconnects once the source gives the stalled session up. It also releases a kept preview frame
  // nobody wants any more, which no frame offered by a stalled source would.
  if (live) {
    impl_->watchdog_thread = std::jthread([this, uri] {
      const int64_t stall_ns = std::chrono::nanoseconds(spec_.source.stall_timeout).count();
      const std::string line = fmt::format("pipeline '{}': source '{}': no frame for {} ms: stalled", spec_.name,
                                           uri, spec_.source.stall_timeout.count());
      std::unique_lock lock(impl_->stop_mu);
      while (!impl_->stop_cv.wait_for(lock, std::min<Clock::duration>(kWatchdogTick, spec_.source.stall_timeout),
                                      [this] { return impl_->stop || !impl_->decoding; })) {
        preview_->expire(Clock::now());   // a stalled camera nobody previews keeps no frame
        auto streaming = static_cast<uint8_t>(SourceState::Streaming);
        if (stats_.state.load(std::memory_order_relaxed) != streaming) continue;
        std::atomic_thread_fence(std::memory_order_acquire);
        if (steady_now_ns() - impl_->activity_ns.load(std::memory_order_relaxed) < stall_ns) continue;
        if (!stats_.state.compare_exchange_strong(streaming, static_cast<uint8_t>(SourceState::Stalled))) continue;
        lock.unlock();
        log_limited(impl_->log, spdlog::level::warn, line, line);
        lock.lock();
      }
    });
  }

  if (group_) {
    impl_->process_thread = std::jthread([this, decode_pool = decode.pool] { forward_to_group(*decode_pool); });
    return;
  }

  // Process: (re)plan on the first frame and on any change of frame shape/format, submit frames
  // to the executor and hand completed outputs to the sink, in frame order. Up to the executor's
  // max_in_flight() frames are in flight while more are queued; when the queue is empty the oldest
  // completes at once, so an idle pipeline holds no outputs back. A re-setup drains first. Frames
  // already queued at stop are drained, then sinks flushed.
  impl_->process_thread = std::jthread([this, decode_pool = decode.pool] {
    struct Submitted {
      int64_t index;
      Clock::time_point decoded_at;
      SubmitCall call;
    };
    std::unique_ptr<Executor> executor;
    std::unique_ptr<Sink> sink;
    std::vector<OutputPlan> plans;
    std::vector<std::vector<std::byte>> buffers;   //!< outputs, unless the executor keeps_outputs()
    std::vector<std::byte*> outs;
    std::vector<const std::byte*> sink_outs;
    std::optional<FrameInfo> current;
    std::deque<Submitted> in_flight;
    uint64_t taken = 0;   //!< frames popped from the queue and not processed yet: dropped if this thread fails
    const auto complete_oldest = [&] {
      const Completion done = executor->complete(outs);
      const Submitted f = in_flight.front();
      in_flight.pop_front();
      std::copy(done.outputs.begin(), done.outputs.end(), sink_outs.begin());
      if (const auto record = executor->control_record()) {   // before the tensors: see Sink::write_control
        stats_.set_control(*record);
        sink->write_control(f.index, *record);
      }
      sink->write(f.index, sink_outs);
      stats_.frames_processed.fetch_add(1, std::memory_order_relaxed);
      --taken;
      stats_.observe_frame(f.decoded_at, f.call, done.device_seconds);
    };
    try {
      executor = make_executor(device_, cpu_threads_, reads_host_outputs(spec_.sink));
      while (true) {
        std::optional<DecodedFrame> frame = in_flight.empty() ? impl_->queue.pop() : impl_->queue.try_pop();
        if (!frame) {
          if (in_flight.empty()) break;   // closed and drained
          complete_oldest();
          continue;
        }
        ++taken;
        stats_.queue_depth.store(static_cast<int64_t>(impl_->queue.size()), std::memory_order_relaxed);
        stats_.pool_in_use.store(decode_pool->in_use(), std::memory_order_relaxed);
        if (!current || !(*current == frame->info)) {
          while (!in_flight.empty()) complete_oldest();
          if (sink) sink->flush();
          sink.reset();   // before its successor exists: a shm sink's name passes on to the new one
          plans = make_output_plans(spec_, frame->info);
          executor->setup(frame->info, make_color_params(spec_.color, frame->info), plans, 1);
          setup_control(*executor, frame->info, plans);
          sink = make_sink(spec_.sink, plans, spec_.name, device_);
          buffers.clear();
          outs.clear();
          if (!executor->keeps_outputs()) {
            for (const OutputPlan& p : plans) outs.push_back(buffers.emplace_back(p.bytes_per_frame).data());
          }
          sink_outs.resize(plans.size());
          spdlog::info("pipeline '{}': {} frames on {}, {} output(s)", spec_.name, describe(frame->info),
                       executor->name(), plans.size());
          stats_.set_frame(describe(frame->info));
          current = frame->info;
        }
        if (static_cast<int>(in_flight.size()) == executor->max_in_flight()) complete_oldest();
        // The queue wait ends where the call begins, as in BatchGroup.
        // A sink that publishes frames in place (cuda_ipc) has the executor write into its slot.
        const std::span<std::byte* const> placed = sink->place_outputs(frame->index);
        const SubmitCall call = SubmitCall::time(
            [&] { executor->submit({&frame->view, 1}, {&frame->memory, 1}, {&frame->owner, 1}, placed); });
        in_flight.push_back({frame->index, frame->decoded_at, call});
      }
      // Final counts: the decode thread has ended (it closes the queue last) and nothing is in
      // flight, so the only slot still leased is a frame kept for previews, if they were wanted.
      stats_.queue_depth.store(0, std::memory_order_relaxed);
      stats_.pool_in_use.store(decode_pool->in_use(), std::memory_order_relaxed);
      if (sink) sink->flush();
    } catch (const std::exception& e) {
      // A plan, device or sink failure ends this pipeline only; the source stops too. Frames in
      // flight, and the one being set up or written, are dropped once the executor is done with
      // them (its destructor waits).
      for (uint64_t i = 0; i < taken; ++i) stats_.drop(DropReason::ProcessError);
      executor.reset();
      fail_processing(e.what());
    }
    done_.store(true, std::memory_order_release);
  });
}

void PipelineRunner::fail_processing(const std::string& error) {
  stats_.set_error(error);
  stats_.set_state(SourceState::Failed);
  // Sink and plan errors name the pipeline already.
  const std::string name = fmt::format("pipeline '{}'", spec_.name);
  spdlog::error("{}", error.starts_with(name) ? error : fmt::format("{}: {}", name, error));
  request_stop();
  impl_->queue.close();   // nothing is queued after this
  drop_queued(DropReason::ProcessError);
}

void PipelineRunner::forward_to_group(const FramePool& pool) {
  // The group plans, runs and writes the sink; this thread keeps the pipeline's order and its
  // queue's policy (the decode thread's), and on its end waits for the group to deliver the rest.
  try {
    const std::unique_ptr<BatchGroup::Member> member = group_->attach(spec_, stats_);
    while (std::optional<DecodedFrame> frame = impl_->queue.pop()) {
      stats_.queue_depth.store(static_cast<int64_t>(impl_->queue.size()), std::memory_order_relaxed);
      stats_.pool_in_use.store(pool.in_use(), std::memory_order_relaxed);
      if (!member->push(std::move(*frame))) break;   // finish() says why
    }
    member->finish();
    stats_.queue_depth.store(0, std::memory_order_relaxed);
    stats_.pool_in_use.store(pool.in_use(), std::memory_order_relaxed);
  } catch (const std::exception& e) {
    fail_processing(e.what());
  }
  done_.store(true, std::memory_order_release);
}

}  // namespace framefuse
