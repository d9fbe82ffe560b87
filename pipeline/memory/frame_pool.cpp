#include "pipeline/memory/frame_pool.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <optional>
#include <thread>
#include <spdlog/fmt/fmt.h>

#include "pipeline/decode/av_util.hpp"

#if FRAMEFUSE_HAVE_CUDA
#include "pipeline/cuda/cuda_raii.hpp"
constexpr bool kCudaBuild = true;
#else
constexpr bool kCudaBuild = false;
#endif

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/imgutils.h>
}

namespace framefuse {
namespace {

constexpr int kRowAlign = 128;          //!< row pitch multiple: one GPU cache line, >= any CPU SIMD width
constexpr size_t kTailPadding = 128;    //!< SIMD over-read past the last plane (FFmpeg pads 16 + STRIDE_ALIGN)
constexpr size_t kHostAlign = 64;

//! Every plane of a `width` x `height` frame of `f` in one buffer: rows padded to kRowAlign (by
//! widening, as FFmpeg does, so that plane pitches keep their ratios), planes back to back.
struct Layout {
  int linesize[4];
  size_t offset[4];
  size_t bytes;
};

std::optional<Layout> plane_layout(AVPixelFormat f, int width, int height) {
  Layout l{};
  for (int w = width;; w += w & ~(w - 1)) {   // add w's lowest set bit: alignment grows each try
    if (w <= 0 || av_image_fill_linesizes(l.linesize, f, w) < 0) return std::nullopt;
    if (std::all_of(l.linesize, l.linesize + 4, [](int s) { return s % kRowAlign == 0; })) break;
  }
  const ptrdiff_t pitches[4] = {l.linesize[0], l.linesize[1], l.linesize[2], l.linesize[3]};
  size_t sizes[4] = {};
  if (av_image_fill_plane_sizes(sizes, f, height, pitches) < 0) return std::nullopt;
  size_t offset = 0;
  for (int i = 0; i < 4; ++i) {
    l.offset[i] = offset;
    offset += sizes[i];
  }
  l.bytes = offset + kTailPadding;
  return l;
}

//! av_buffer_create's free callback: drops the lease it owns, so the slot returns.
void unlease(void* opaque, uint8_t*) { delete static_cast<FramePool::Lease*>(opaque); }

}  // namespace

int default_pool_frames(int queue_depth, int decoder_threads, bool frame_threading) {
  constexpr int kDecoderFrames = 17;
  int extra = 0;
  if (frame_threading) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int threads = decoder_threads > 0 ? decoder_threads : (cores > 1 ? std::min(cores + 1, 16) : 1);
    extra = threads - 1;
  }
  return kDecoderFrames + extra + queue_depth + kFramesHeldBeyondQueue;
}

std::shared_ptr<FramePool> FramePool::create(int capacity, int cuda_device) {
  return std::shared_ptr<FramePool>(new FramePool(capacity, cuda_device));
}

FramePool::FramePool(int capacity, int cuda_device)
    : capacity_(std::max(1, capacity)), cuda_device_(cuda_device),
      memory_(kCudaBuild && cuda_device >= 0 ? FrameMemory::Pinned : FrameMemory::Host) {}

FramePool::~FramePool() {
  for (const Slot& s : slots_) free_memory(s.data);   // every lease holds the pool: all are idle
}

std::byte* FramePool::allocate(size_t bytes) const {
#if FRAMEFUSE_HAVE_CUDA
  if (memory_ == FrameMemory::Pinned) {
    void* p = nullptr;
    cuda::check(cudaSetDevice(cuda_device_), "frame pool: cudaSetDevice");
    cuda::check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "frame pool: cudaHostAlloc");
    return static_cast<std::byte*>(p);
  }
#endif
  void* p = std::aligned_alloc(kHostAlign, (bytes + kHostAlign - 1) / kHostAlign * kHostAlign);
  if (!p) throw std::bad_alloc();
  return static_cast<std::byte*>(p);
}

void FramePool::free_memory(std::byte* p) const {
#if FRAMEFUSE_HAVE_CUDA
  if (memory_ == FrameMemory::Pinned) {
    cudaFreeHost(p);
    return;
  }
#endif
  std::free(p);
}

void FramePool::set_drop_oldest(std::function<bool()> drop_oldest) {
  std::lock_guard lock(mu_);
  drop_oldest_ = std::move(drop_oldest);
}

FramePool::Acquired FramePool::acquire(size_t bytes, const Wait& wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait.timeout;
  auto cancelled = [&] { return wait.cancel && wait.cancel->load(std::memory_order_relaxed); };
  std::unique_lock lock(mu_);
  auto idle = [&] {
    return std::find_if(slots_.begin(), slots_.end(), [&](const Slot& s) { return !s.leased && s.bytes == bytes; });
  };
  auto room = [&] { return slots_.size() + size_t(allocating_) < size_t(capacity_); };
  for (;;) {
    if (cancelled()) return {Status::Cancelled, {}};
    if (bytes != slot_bytes_ || stale_returned_ > 0) {   // idle slots of an earlier frame size go now
      slot_bytes_ = bytes;
      stale_returned_ = 0;
      std::vector<std::byte*> stale;
      std::erase_if(slots_, [&](const Slot& s) {
        if (s.leased || s.bytes == bytes) return false;
        stale.push_back(s.data);
        return true;
      });
      lock.unlock();
      for (std::byte* p : stale) free_memory(p);
      lock.lock();
      continue;
    }
    std::byte* data = nullptr;
    if (const auto it = idle(); it != slots_.end()) {
      it->leased = true;
      data = it->data;
    } else if (room()) {
      ++allocating_;
      lock.unlock();
      try {
        data = allocate(bytes);
      } catch (...) {
        lock.lock();
        --allocating_;
        returned_.notify_all();
        throw;
      }
      lock.lock();
      --allocating_;
      slots_.push_back({data, bytes, true});
    }
    if (data) {
      leased_.fetch_add(1, std::memory_order_relaxed);
      return {Status::Ok, Lease(data, [self = shared_from_this()](std::byte* p) { self->release(p); })};
    }
    if (drop_oldest_) {   // live: make room by dropping the oldest queued frame, never wait for one
      const auto drop = drop_oldest_;
      lock.unlock();
      const bool dropped = drop();   // its slot may come back inside this call
      lock.lock();
      if (dropped) continue;
    }
    if (!returned_.wait_until(lock, deadline,
                              [&] { return cancelled() || idle() != slots_.end() || room() || stale_returned_ > 0; }))
      return {Status::TimedOut, {}};
  }
}

void FramePool::release(std::byte* p) {
  std::unique_lock lock(mu_);
  const auto it = std::find_if(slots_.begin(), slots_.end(), [&](const Slot& s) { return s.data == p; });
  leased_.fetch_sub(1, std::memory_order_relaxed);
  it->leased = false;
  // A slot of an earlier frame size is freed by the next acquire(), on the decoding thread: freeing
  // pinned memory waits for the whole device, which an executor releasing frames must not.
  if (it->bytes != slot_bytes_) ++stale_returned_;
  returned_.notify_all();
}

void FramePool::wake() {
  { std::lock_guard lock(mu_); }   // a waiter between its check and its wait sees the flag after this
  returned_.notify_all();
}

bool FramePool::owns(const void* p) const {
  const auto* b = static_cast<const std::byte*>(p);
  std::lock_guard lock(mu_);
  return std::any_of(slots_.begin(), slots_.end(), [&](const Slot& s) { return b >= s.data && b < s.data + s.bytes; });
}

int FramePool::fill(AVFrame* frame, int width, int height, const Wait& wait, Status& status) {
  status = Status::Ok;
  const auto layout = plane_layout(static_cast<AVPixelFormat>(frame->format), width, height);
  if (!layout) return AVERROR(EINVAL);
  Acquired got = acquire(layout->bytes, wait);
  status = got.status;
  if (got.status == Status::Cancelled) return AVERROR_EXIT;
  if (got.status == Status::TimedOut) return AVERROR(ENOMEM);
  auto* holder = new Lease(std::move(got.lease));
  frame->buf[0] = av_buffer_create(reinterpret_cast<uint8_t*>(holder->get()), layout->bytes, &unlease, holder, 0);
  if (!frame->buf[0]) {
    delete holder;
    return AVERROR(ENOMEM);
  }
  for (int i = 0; i < 4; ++i) {
    frame->linesize[i] = layout->linesize[i];
    frame->data[i] = layout->linesize[i] ? frame->buf[0]->data + layout->offset[i] : nullptr;
  }
  frame->extended_data = frame->data;
  return 0;
}

int FramePool::get_buffer2(AVCodecContext* codec, AVFrame* frame, int flags, const Wait& wait, Status& status) {
  status = Status::Ok;
  if (!ops_format(static_cast<AVPixelFormat>(frame->format))) return avcodec_default_get_buffer2(codec, frame, flags);
  int width = frame->width, height = frame->height;
  int linesize_align[AV_NUM_DATA_POINTERS];   // <= 64 bytes: kRowAlign satisfies every plane
  avcodec_align_dimensions2(codec, &width, &height, linesize_align);
  return fill(frame, width, height, wait, status);
}

int FramePool::get_frame_buffer(AVFrame* frame, const Wait& wait, Status& status) {
  return fill(frame, frame->width, (frame->height + 31) & ~31, wait, status);   // as av_frame_get_buffer
}

}  // namespace framefuse
