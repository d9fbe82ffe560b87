#pragma once
//! A bounded pool of frame-sized buffers ("slots") that software decoders write into directly, so
//! that no host copy sits between the decoder and the upload: page-locked (pinned) host memory for
//! pipelines on a CUDA device (frames upload by DMA from where the decoder wrote them), 64-byte
//! aligned host memory otherwise. Slots are allocated on first use, up to the capacity, and kept.
//! A slot is leased while any reference to it lives (the decoder's reference frames, queued and
//! in-flight frames) and returns when the last one goes. Every member is thread-safe; FFmpeg types
//! stay in the .cpp.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "pipeline/memory/frame_memory.hpp"

struct AVCodecContext;
struct AVFrame;

namespace framefuse {

//! Decoded frames a pipeline holds beyond its queue: in the executor's ring, kept for previews.
inline constexpr int kFramesHeldBeyondQueue = kExecutorRing + 1;

//! Slots a pipeline needs so that decoding never waits on the pool by itself: 17 for the decoder
//! (H.264/HEVC keep at most 16 reference frames, plus the frame being decoded), one more per extra
//! frame thread, `queue_depth` queued frames and kFramesHeldBeyondQueue more. `decoder_threads` 0 =
//! FFmpeg's choice (cores + 1, at most 16); without `frame_threading` (slice threads, live sources)
//! threads hold no frames.
int default_pool_frames(int queue_depth, int decoder_threads, bool frame_threading);

class FramePool : public std::enable_shared_from_this<FramePool> {
 public:
  //! A leased slot: 64-byte aligned memory of the size asked for; the slot returns to the pool
  //! when the last copy of the lease is destroyed (on any thread).
  using Lease = std::shared_ptr<std::byte>;
  enum class Status : uint8_t { Ok, Cancelled, TimedOut };
  //! How an acquire waits while every slot is leased: at most `timeout`, and not once `*cancel` is
  //! set (whoever sets it then calls wake()).
  struct Wait {
    std::chrono::milliseconds timeout{10'000};
    const std::atomic<bool>* cancel = nullptr;
  };
  struct Acquired {
    Status status = Status::Ok;
    Lease lease;   //!< set when status is Ok
  };

  //! Up to `capacity` (>= 1) slots. `cuda_device` >= 0: pinned memory (cudaHostAlloc, portable),
  //! for pipelines on that device, already probed; -1, or a build without CUDA: host memory.
  static std::shared_ptr<FramePool> create(int capacity, int cuda_device = -1);
  ~FramePool();
  FramePool(const FramePool&) = delete;
  FramePool& operator=(const FramePool&) = delete;

  FrameMemory memory() const { return memory_; }
  int capacity() const { return capacity_; }
  //! Slots leased now.
  int in_use() const { return leased_.load(std::memory_order_relaxed); }

  //! The exhaustion policy; call before decoding starts. Unset (files): acquire blocks until a
  //! slot returns. Set (live sources): acquire first calls `drop_oldest` (drop the oldest queued
  //! frame; false when there is none) for as long as that frees no slot, and only then waits.
  void set_drop_oldest(std::function<bool()> drop_oldest);

  //! A slot of `bytes`, or why none came (cancelled, or still every slot leased after the
  //! timeout). All slots have the size of the latest request: when it changes, idle slots of the
  //! old size are freed at once, and leased ones by the first acquire() after they return (never
  //! by the thread returning them: freeing pinned memory waits for the device). Throws DeviceError (pinned) or
  //! std::bad_alloc when memory cannot be allocated.
  Acquired acquire(size_t bytes, const Wait& wait);
  //! Wakes waiting acquires so that they see their cancel flag.
  void wake();
  //! Whether `p` points into one of this pool's slots.
  bool owns(const void* p) const;

  //! AVCodecContext::get_buffer2 over the pool: formats the ops read in place (yuv420p, yuvj420p,
  //! nv12, p010le, rgb24, bgr24) get one slot holding every plane, rows padded to a multiple of
  //! 128 bytes (coalesced GPU reads) and dimensions aligned as the codec asks; other formats (and
  //! hardware frames) get avcodec_default_get_buffer2. Returns 0 or an AVERROR; `status` says why
  //! a pooled format got no slot. Throws as acquire().
  int get_buffer2(AVCodecContext* codec, AVFrame* frame, int flags, const Wait& wait, Status& status);
  //! av_frame_get_buffer over the pool for `frame` (format, width and height set; a pooled format).
  int get_frame_buffer(AVFrame* frame, const Wait& wait, Status& status);

 private:
  struct Slot {
    std::byte* data;
    size_t bytes;
    bool leased;
  };
  FramePool(int capacity, int cuda_device);
  //! Fills `frame`'s planes for a `width` x `height` allocation from one slot.
  int fill(AVFrame* frame, int width, int height, const Wait& wait, Status& status);
  std::byte* allocate(size_t bytes) const;
  void free_memory(std::byte* p) const;
  void release(std::byte* p);

  const int capacity_;
  const int cuda_device_;
  const FrameMemory memory_;
  std::function<bool()> drop_oldest_;
  mutable std::mutex mu_;
  std::condition_variable returned_;
  std::vector<Slot> slots_;     //!< every allocated slot, idle or leased
  int allocating_ = 0;          //!< slots being allocated outside the lock (count towards capacity)
  size_t slot_bytes_ = 0;       //!< size of the latest request
  int stale_returned_ = 0;      //!< returned slots of an earlier size, not freed yet (acquire() frees them)
  std::atomic<int> leased_{0};
};

}  // namespace framefuse
