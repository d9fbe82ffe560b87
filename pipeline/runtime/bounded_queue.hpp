#pragma once
//! A bounded multi-producer/multi-consumer queue with the two backpressure policies the pipeline
//! uses: block the producer (files) or drop the oldest item (live sources). close() wakes everyone.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>

namespace framefuse {

template <class T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity ? capacity : 1) {}

  //! Waits for room; returns false (item not queued) once the queue is closed.
  bool push_wait(T item) {
    std::unique_lock lock(mu_);
    not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) return false;
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }

  enum class Pushed : uint8_t { Queued, QueuedDroppingOldest, Closed };
  //! Never waits: when full, the oldest item is discarded to make room. Closed: `item` is not queued.
  Pushed push_drop_oldest(T item) {
    std::lock_guard lock(mu_);
    if (closed_) return Pushed::Closed;
    const bool full = items_.size() >= capacity_;
    if (full) items_.pop_front();
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return full ? Pushed::QueuedDroppingOldest : Pushed::Queued;
  }

  //! Never waits: discards the oldest item, if any (destroyed outside the lock). True if one was.
  bool drop_oldest() {
    std::optional<T> oldest;
    {
      std::lock_guard lock(mu_);
      if (items_.empty()) return false;
      oldest.emplace(std::move(items_.front()));
      items_.pop_front();
      not_full_.notify_one();
    }
    return true;
  }

  //! Waits for an item; std::nullopt once closed and drained.
  std::optional<T> pop() {
    std::unique_lock lock(mu_);
    not_empty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }

  //! Never waits: the oldest item, or std::nullopt when there is none right now.
  std::optional<T> try_pop() {
    std::lock_guard lock(mu_);
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }

  void close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

  size_t size() const {
    std::lock_guard lock(mu_);
    return items_.size();
  }

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::deque<T> items_;
  bool closed_ = false;
};

}  // namespace framefuse
