#pragma once
//! systemd service notifications (Type=notify): READY=1, STATUS=..., WATCHDOG=1, RELOADING=1,
//! STOPPING=1. Uses libsystemd's sd_notify when built with it, else speaks the datagram protocol
//! to $NOTIFY_SOCKET directly. Without $NOTIFY_SOCKET every call is a no-op.
#include <chrono>
#include <optional>
#include <string>

namespace framefuse::daemon {

class Notifier {
 public:
  Notifier();
  bool enabled() const { return enabled_; }
  //! Sends one state string, e.g. "READY=1\nSTATUS=3 pipelines streaming". Never throws.
  void send(const std::string& state) const;
  //! Half of $WATCHDOG_USEC when the watchdog is armed for this process, else nullopt.
  std::optional<std::chrono::microseconds> watchdog_interval() const { return watchdog_; }

 private:
  bool enabled_ = false;
  std::optional<std::chrono::microseconds> watchdog_;
};

}  // namespace framefuse::daemon
