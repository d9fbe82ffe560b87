#include "pipeline/runtime/batch_group.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "pipeline/error.hpp"
#include "pipeline/exec/device.hpp"
#include "pipeline/fused/fused_params.hpp"
#include "pipeline/memory/frame_memory.hpp"

namespace framefuse {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

struct BatchGroup::Member::State {
  State(const PipelineSpec& s, PipelineStats& st, SinkFactory f)
      : spec(s), stats(st), make_sink(std::move(f)), live(s.source.kind == SourceKind::Rtsp) {}
  const PipelineSpec spec;
  PipelineStats& stats;
  const SinkFactory make_sink;
  const bool live;
  // Guarded by Shared::mu.
  int64_t pending = 0;      //!< frames pushed and neither delivered nor dropped
  bool closed = false;      //!< finish() or detach: no more frames
  bool failed = false;      //!< its frames are dropped
  bool refused = false;     //!< a frame came after the group stopped
  std::string error;        //!< why it failed or was refused
  // The process thread's while the member has frames pending; the member's once closed and none are.
  std::unique_ptr<Sink> sink;
  std::optional<FrameInfo> sink_frame;   //!< the frames `sink` was made for
};

struct BatchGroup::Shared {
  Shared(const BatchGroupSpec& s, const DeviceSpec& d, int threads)
      : spec(s), device(d), cpu_threads(threads),
        capacity(static_cast<size_t>(s.queue_depth > 0 ? s.queue_depth : 2 * s.max_batch)) {}

  using MemberPtr = std::shared_ptr<Member::State>;
  struct Waiting {
    MemberPtr member;
    DecodedFrame frame;
    Clock::time_point queued_at;
  };
  //! A frame of a batch in flight: whose it is, and what its stats need.
  struct Slot {
    MemberPtr member;
    int64_t index;
    Clock::time_point decoded_at;
  };
  struct Batch {
    std::vector<Slot> slots;
    SubmitCall call;   //!< its cpu_s: the call's host CPU per frame of the batch
  };
  //! What the executor was set up for.
  struct Setup {
    FrameInfo frame;
    std::vector<OutputSpec> outputs;
    ColorSpec color;
    bool host_outputs;   //!< a member's sink reads host memory: the executor downloads the outputs
  };

  const BatchGroupSpec spec;
  const DeviceSpec device;
  const int cpu_threads;
  const size_t capacity;

  mutable std::mutex mu;
  std::condition_variable work;   //!< process thread: a frame was queued, or stop
  std::condition_variable room;   //!< members: room in the queue, a frame done, a failure, or stop
  std::deque<Waiting> queue;      //!< guarded by mu
  std::vector<Member::State*> attached;   //!< guarded by mu
  //! Attached members whose sinks read host memory (reads_host_outputs()); guarded by mu. A member
  //! stays attached until its frames are done, so every frame of a batch counts here.
  int host_readers = 0;
  bool stopping = false;          //!< guarded by mu
  std::atomic<uint64_t> batches{0}, frames{0}, wait_timeouts{0};
  std::thread thread;

  // Process thread only.
  std::unique_ptr<Executor> executor;
  bool executor_host_outputs = false;   //!< whether `executor` downloads its outputs (make_executor)
  std::optional<Setup> current;
  std::vector<OutputPlan> plans;
  std::vector<std::vector<std::byte>> buffers;   //!< per output: max_batch frames, unless the executor keeps_outputs()
  std::vector<std::byte*> outs;
  std::vector<const std::byte*> sink_outs;
  std::deque<Batch> in_flight;
  std::vector<ops::ImageView> views;             //!< the batch being submitted
  std::vector<FrameMemory> memory;
  std::vector<std::shared_ptr<const void>> owners;

  void run();
  //! Under `lock`: the waiting frames the next batch takes, oldest first: up to max_batch of the
  //! oldest frame's FrameInfo, none of a member behind a frame of that member it skips.
  std::vector<size_t> pick() const;
  //! Under `lock`: whether every attached member is live and has a frame among `picked` (a live
  //! member's next frame is a frame period away: waiting longer only adds latency).
  bool every_live_member_in(const std::vector<size_t>& picked) const;
  void launch(std::vector<Waiting> batch);
  void complete_oldest();
  //! Counts one frame of `m` as done (delivered or dropped) and wakes its finish().
  void done_one(Member::State& m);
  //! Marks `m` failed with `error` (the first reason stays) and drops its waiting frames. Takes mu.
  void fail(Member::State& m, const std::string& error);
  //! Frames of batches in flight that cannot complete (the executor failed): dropped, members failed.
  void drop_in_flight(const std::string& error);
};

// ---- the process thread ----

std::vector<size_t> BatchGroup::Shared::pick() const {
  std::vector<size_t> picked;
  const FrameInfo& key = queue.front().frame.info;
  std::vector<const Member::State*> skipped;
  for (size_t i = 0; i < queue.size() && picked.size() < size_t(spec.max_batch); ++i) {
    const Member::State* m = queue[i].member.get();
    if (std::find(skipped.begin(), skipped.end(), m) != skipped.end()) continue;
    if (queue[i].frame.info == key) {
      picked.push_back(i);
    } else {
      skipped.push_back(m);
    }
  }
  return picked;
}

bool BatchGroup::Shared::every_live_member_in(const std::vector<size_t>& picked) const {
  for (const Member::State* m : attached) {
    if (!m->live) return false;
    if (m->closed || m->failed) continue;
    if (std::none_of(picked.begin(), picked.end(), [&](size_t i) { return queue[i].member.get() == m; })) return false;
  }
  return true;
}

void BatchGroup::Shared::run() {
  std::unique_lock lock(mu);
  while (true) {
    if (!queue.empty()) {
      const std::vector<size_t> picked = pick();
      const bool full = picked.size() == size_t(spec.max_batch) || every_live_member_in(picked);
      const Clock::time_point deadline = queue.front().queued_at + spec.max_wait;
      if (full || stopping || Clock::now() >= deadline) {
        if (!full && !stopping) wait_timeouts.fetch_add(1, std::memory_order_relaxed);
        std::vector<Waiting> batch;
        for (const size_t i : picked) batch.push_back(std::move(queue[i]));
        for (auto i = picked.rbegin(); i != picked.rend(); ++i) queue.erase(queue.begin() + std::ptrdiff_t(*i));
        room.notify_all();
        lock.unlock();
        launch(std::move(batch));
        lock.lock();
        continue;
      }
      if (in_flight.empty()) {
        work.wait_until(lock, deadline);
        continue;
      }
    } else if (in_flight.empty()) {
      if (stopping) break;
      work.wait(lock);
      continue;
    }
    // Nothing to submit yet: the oldest batch completes at once, so an idle group holds no outputs back.
    lock.unlock();
    complete_oldest();
    lock.lock();
  }
  lock.unlock();
  executor.reset();
}

void BatchGroup::Shared::launch(std::vector<Waiting> batch) {
  const FrameInfo info = batch.front().frame.info;
  const PipelineSpec& first = batch.front().member->spec;
  // The outputs stay in device memory unless a member's sink reads host memory.
  const bool host_outputs = [this] {
    std::lock_guard lock(mu);
    return host_readers > 0;
  }();
  try {
    if (!current || !(current->frame == info) || current->outputs != first.outputs || !(current->color == first.color) ||
        current->host_outputs != host_outputs) {
      while (!in_flight.empty()) complete_oldest();
      // By the executor's own mode: `current` is gone after a failed set-up, the executor is not.
      if (executor && executor_host_outputs != host_outputs) executor.reset();
      current.reset();
      if (!executor) {
        executor = make_executor(device, cpu_threads, host_outputs);
        executor_host_outputs = host_outputs;
      }
      plans = make_output_plans(first, info);
      executor->setup(info, make_color_params(first.color, info), plans, spec.max_batch);
      buffers.clear();
      outs.clear();
      if (!executor->keeps_outputs()) {
        for (const OutputPlan& p : plans)
          outs.push_back(buffers.emplace_back(p.bytes_per_frame * size_t(spec.max_batch)).data());
      }
      sink_outs.resize(plans.size());
      current = Setup{info, first.outputs, first.color, host_outputs};
      spdlog::info("batch group '{}': {} frames on {}, {} output(s), batches of up to {}", spec.name, describe(info),
                   executor->name(), plans.size(), spec.max_batch);
    }
  } catch (const std::exception& e) {
    // A plan the frames cannot take (or a device that cannot be set up) fails the members whose
    // frames these are, as it would fail each of them alone.
    const std::string error = fmt::format("batch group '{}': {}", spec.name, e.what());
    for (Waiting& w : batch) {
      fail(*w.member, error);
      w.member->stats.drop(DropReason::ProcessError);
      w.frame = {};
      done_one(*w.member);
    }
    return;
  }
  if (static_cast<int>(in_flight.size()) == executor->max_in_flight()) complete_oldest();
  if (!executor) return launch(std::move(batch));   // that completion failed the executor: start over
  Batch b;
  views.clear();
  memory.clear();
  owners.clear();
  for (const Waiting& w : batch) {
    views.push_back(w.frame.view);
    memory.push_back(w.frame.memory);
    owners.push_back(w.frame.owner);
    b.slots.push_back({w.member, w.frame.index, w.frame.decoded_at});
  }
  batch.clear();   // the executor holds the frames now
  try {
    b.call = SubmitCall::time([&] { executor->submit(views, memory, owners); });
    b.call.cpu_s /= double(b.slots.size());
  } catch (const std::exception& e) {
    owners.clear();
    in_flight.push_back(std::move(b));
    drop_in_flight(fmt::format("batch group '{}': {}", spec.name, e.what()));
    return;
  }
  owners.clear();
  batches.fetch_add(1, std::memory_order_relaxed);
  frames.fetch_add(b.slots.size(), std::memory_order_relaxed);
  in_flight.push_back(std::move(b));
}

void BatchGroup::Shared::complete_oldest() {
  Completion done;
  try {
    done = executor->complete(outs);
  } catch (const std::exception& e) {
    drop_in_flight(fmt::format("batch group '{}': {}", spec.name, e.what()));
    return;
  }
  const Batch b = std::move(in_flight.front());
  in_flight.pop_front();
  for (size_t i = 0; i < b.slots.size(); ++i) {
    const Slot& s = b.slots[i];
    Member::State& m = *s.member;
    bool failed = false;
    {
      std::lock_guard lock(mu);
      failed = m.failed;
    }
    if (failed) {
      m.stats.drop(DropReason::ProcessError);
      done_one(m);
      continue;
    }
    try {
      if (!m.sink_frame || !(*m.sink_frame == current->frame)) {
        if (m.sink) m.sink->flush();
        m.sink.reset();
        m.sink = m.make_sink ? m.make_sink(plans) : make_sink(m.spec.sink, plans, m.spec.name, device);
        m.sink_frame = current->frame;
        m.stats.set_frame(describe(current->frame));
        spdlog::info("pipeline '{}': {} frames in batch group '{}', {} output(s)", m.spec.name,
                     describe(current->frame), spec.name, plans.size());
      }
      for (size_t k = 0; k < plans.size(); ++k) sink_outs[k] = done.outputs[k] + i * plans[k].bytes_per_frame;
      m.sink->write(s.index, sink_outs);
      m.stats.frames_processed.fetch_add(1, std::memory_order_relaxed);
      m.stats.observe_frame(s.decoded_at, b.call, done.device_seconds);
    } catch (const std::exception& e) {
      fail(m, e.what());
      m.stats.drop(DropReason::ProcessError);
    }
    done_one(m);
  }
}

void BatchGroup::Shared::done_one(Member::State& m) {
  std::lock_guard lock(mu);
  --m.pending;
  room.notify_all();
}

void BatchGroup::Shared::fail(Member::State& m, const std::string& error) {
  std::vector<Waiting> dropped;   // destroyed (frames released) outside the lock
  {
    std::lock_guard lock(mu);
    if (!m.failed) {
      m.failed = true;
      if (!m.refused) m.error = error;
    }
    for (auto it = queue.begin(); it != queue.end();) {
      if (it->member.get() != &m) {
        ++it;
        continue;
      }
      dropped.push_back(std::move(*it));
      it = queue.erase(it);
      m.stats.drop(DropReason::ProcessError);
      --m.pending;
    }
    room.notify_all();
  }
}

void BatchGroup::Shared::drop_in_flight(const std::string& error) {
  spdlog::error("{}", error);
  executor.reset();   // waits for what the device still does with the frames, then drops them
  current.reset();
  for (Batch& b : in_flight) {
    for (Slot& s : b.slots) {
      fail(*s.member, error);
      s.member->stats.drop(DropReason::ProcessError);
      done_one(*s.member);
    }
  }
  in_flight.clear();
}

// ---- the group ----

BatchGroup::BatchGroup(BatchGroupSpec spec, DeviceSpec device, int cpu_threads)
    : spec_(std::move(spec)), device_(device) {
  if (spec_.max_batch < 1 || spec_.max_batch > kMaxBatch)
    throw ConfigError(fmt::format("batch group '{}': max_batch must be 1..{}, got {}", spec_.name, kMaxBatch,
                                  spec_.max_batch));
  if (spec_.queue_depth != 0 && spec_.queue_depth < spec_.max_batch)
    throw ConfigError(fmt::format("batch group '{}': queue_depth {} holds fewer frames than max_batch {}", spec_.name,
                                  spec_.queue_depth, spec_.max_batch));
  if (spec_.max_wait.count() < 0)
    throw ConfigError(fmt::format("batch group '{}': max_wait must not be negative", spec_.name));
  shared_ = std::make_shared<Shared>(spec_, device_, cpu_threads);
  shared_->thread = std::thread([s = shared_.get()] {
    try {
      s->run();
    } catch (const std::exception& e) {   // nothing above throws out of run(); a last resort
      spdlog::critical("batch group '{}': process thread ended: {}", s->spec.name, e.what());
      std::terminate();
    }
  });
}

BatchGroup::~BatchGroup() {
  stop();
  shared_->thread.join();
}

void BatchGroup::stop() {
  {
    std::lock_guard lock(shared_->mu);
    shared_->stopping = true;
  }
  shared_->work.notify_all();
  shared_->room.notify_all();
}

std::unique_ptr<BatchGroup::Member> BatchGroup::attach(const PipelineSpec& spec, PipelineStats& stats,
                                                       SinkFactory make_sink) {
  const auto refuse = [&](std::string_view why) {
    throw ConfigError(fmt::format("pipeline '{}' cannot join batch group '{}': {}", spec.name, spec_.name, why));
  };
  if (spec.control.enabled) refuse("it has control enabled, and a batched launch carries no per-pipeline control");
  auto state = std::make_shared<Member::State>(spec, stats, std::move(make_sink));
  std::lock_guard lock(shared_->mu);
  if (shared_->stopping) refuse("the group is stopping");
  if (!shared_->attached.empty()) {
    const PipelineSpec& other = shared_->attached.front()->spec;
    if (other.outputs != spec.outputs) refuse(fmt::format("its outputs differ from pipeline '{}''s", other.name));
    if (!(other.color == spec.color)) refuse(fmt::format("its color differs from pipeline '{}''s", other.name));
  }
  shared_->attached.push_back(state.get());
  if (reads_host_outputs(spec.sink)) ++shared_->host_readers;
  return std::unique_ptr<Member>(new Member(shared_, std::move(state)));
}

int BatchGroup::frames_held_per_member() const {
  return static_cast<int>(shared_->capacity) + kExecutorRing * spec_.max_batch;
}

BatchGroupSnapshot BatchGroup::snapshot() const {
  BatchGroupSnapshot s;
  s.name = spec_.name;
  s.device = to_string(device_);
  s.max_batch = spec_.max_batch;
  s.batches = shared_->batches.load(std::memory_order_relaxed);
  s.frames = shared_->frames.load(std::memory_order_relaxed);
  s.wait_timeouts = shared_->wait_timeouts.load(std::memory_order_relaxed);
  std::lock_guard lock(shared_->mu);
  s.queue_depth = static_cast<int64_t>(shared_->queue.size());
  s.members = static_cast<int64_t>(shared_->attached.size());
  return s;
}

// ---- a member ----

BatchGroup::Member::Member(std::shared_ptr<Shared> group, std::shared_ptr<State> state)
    : group_(std::move(group)), state_(std::move(state)) {}

BatchGroup::Member::~Member() {
  Shared& g = *group_;
  State& m = *state_;
  std::vector<Shared::Waiting> dropped;   // released outside the lock
  {
    std::unique_lock lock(g.mu);
    m.closed = true;
    for (auto it = g.queue.begin(); it != g.queue.end();) {
      if (it->member.get() != &m) {
        ++it;
        continue;
      }
      dropped.push_back(std::move(*it));
      it = g.queue.erase(it);
      m.stats.drop(DropReason::ProcessError);
      --m.pending;
    }
    g.room.notify_all();
    g.room.wait(lock, [&] { return m.pending == 0; });
    g.attached.erase(std::find(g.attached.begin(), g.attached.end(), &m));
    if (reads_host_outputs(m.spec.sink)) --g.host_readers;
  }
  m.sink.reset();
}

bool BatchGroup::Member::push(DecodedFrame frame) {
  Shared& g = *group_;
  State& m = *state_;
  std::optional<DecodedFrame> dropped;   // released outside the lock
  {
    std::unique_lock lock(g.mu);
    if (!m.live) g.room.wait(lock, [&] { return g.stopping || m.failed || g.queue.size() < g.capacity; });
    if (g.stopping && !m.failed && !m.refused) {   // its frames already taken are still delivered
      m.refused = true;
      m.error = fmt::format("batch group '{}' stopped", g.spec.name);
    }
    if (m.failed || m.refused || m.closed) {
      m.stats.drop(DropReason::ProcessError);
      return false;
    }
    if (g.queue.size() >= g.capacity) {   // live: never wait
      m.stats.drop(DropReason::GroupFull);
      const auto own = std::find_if(g.queue.begin(), g.queue.end(), [&](const Shared::Waiting& w) {
        return w.member.get() == &m;
      });
      if (own == g.queue.end()) return true;   // none of its own waiting: the new frame goes
      dropped.emplace(std::move(own->frame));
      g.queue.erase(own);
      --m.pending;
    }
    g.queue.push_back({state_, std::move(frame), Clock::now()});
    ++m.pending;
  }
  g.work.notify_one();
  return true;
}

void BatchGroup::Member::finish() {
  Shared& g = *group_;
  State& m = *state_;
  bool failed = false, refused = false;
  std::string error;
  {
    std::unique_lock lock(g.mu);
    m.closed = true;
    g.room.wait(lock, [&] { return m.pending == 0; });
    failed = m.failed;
    refused = m.refused;
    error = m.error;
  }
  const std::unique_ptr<Sink> sink = std::move(m.sink);
  if (failed) throw std::runtime_error(error);
  if (sink) sink->flush();   // what was delivered before a refusal is complete
  if (refused) throw std::runtime_error(error);
}

}  // namespace framefuse
