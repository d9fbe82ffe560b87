#pragma once
//! The frame a pipeline keeps for previews, kept only while previews are wanted. The preview side
//! asks (want()); the decode thread offers each decoded frame (offer()), and the frame is kept only
//! while a want is recent. A pipeline nobody previews holds no frame for it: with NVDEC a kept frame
//! is a 1080p copy in GPU memory (~3-4 MiB a stream), in software decoding a slot of the pinned pool.
//! Shared (std::shared_ptr) by the runner and a waiting preview, so a wait never holds the daemon's
//! lock on its pipelines and a runner may go while one waits.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "pipeline/decode/decoded_frame.hpp"

namespace framefuse {

class PreviewFrame {
 public:
  using Clock = std::chrono::steady_clock;

  //! Frames are wanted until `keep` from now (a later deadline than any earlier want's; never
  //! shortened). Returns the kept frame, else waits up to `wait` for the next one offered. std::nullopt
  //! when none comes in time, or none is kept and no more will come (end()). Any thread.
  std::optional<DecodedFrame> want(Clock::duration keep, Clock::duration wait);

  //! The decode thread, for each frame it decodes at `now`: `frame` is kept while wanted, and the
  //! kept one is released once frames are no longer wanted. Lock-free when nothing is wanted or kept.
  void offer(const DecodedFrame& frame, Clock::time_point now);

  //! Releases the kept frame once frames are no longer wanted (`now` past the latest want's
  //! deadline), for a source that offers none meanwhile (a stalled camera). Any thread.
  void expire(Clock::time_point now);

  //! No frame will be offered any more (the decode thread ended): the kept frame is released, and
  //! want()s, waiting or later, return std::nullopt. Any thread.
  void end();

 private:
  std::atomic<int64_t> wanted_until_ns_{0};   //!< steady_ns() deadline of the latest want
  std::atomic<bool> kept_{false};             //!< frame_ holds a frame (read without the lock)
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<DecodedFrame> frame_;   //!< guarded by mu_
  bool ended_ = false;                  //!< guarded by mu_
};

}  // namespace framefuse
