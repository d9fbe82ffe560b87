#include "daemon/notify.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#if FRAMEFUSE_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace framefuse::daemon {

Notifier::Notifier() {
  const char* sock = std::getenv("NOTIFY_SOCKET");
  enabled_ = sock && *sock;
  const char* usec = std::getenv("WATCHDOG_USEC");
  const char* pid = std::getenv("WATCHDOG_PID");
  if (enabled_ && usec && (!pid || std::strtol(pid, nullptr, 10) == getpid())) {
    const long long us = std::strtoll(usec, nullptr, 10);
    if (us > 0) watchdog_ = std::chrono::microseconds(us / 2);
  }
}

void Notifier::send(const std::string& state) const {
  if (!enabled_) return;
#if FRAMEFUSE_HAVE_SYSTEMD
  sd_notify(0, state.c_str());
#else
  const char* path = std::getenv("NOTIFY_SOCKET");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t len = std::strlen(path);
  if (len >= sizeof(addr.sun_path)) return;
  std::memcpy(addr.sun_path, path, len);
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';   // abstract namespace
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&addr),
         static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len));
  close(fd);
#endif
}

}  // namespace framefuse::daemon
