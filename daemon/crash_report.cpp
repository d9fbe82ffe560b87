#include "daemon/crash_report.hpp"

#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>

namespace framefuse::daemon {
namespace {

constexpr std::array kFatal = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
constexpr int kMaxFrames = 64;

//! write() of all of `s` (async-signal-safe).
void put(const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= size_t(w);
  }
}
void put(const char* s) { put(s, strlen(s)); }

//! Decimal digits of v into `out` (async-signal-safe), NUL-terminated.
void decimal(unsigned long v, char (&out)[24]) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  int i = 0;
  while (n > 0) out[i++] = tmp[--n];
  out[i] = '\0';
}

void on_fatal(int sig, siginfo_t*, void*) {
  char num[24];
  put("framefused: fatal signal ");
  decimal(static_cast<unsigned long>(sig), num);
  put(num);
  put(" (");
  const char* name = sigabbrev_np(sig);
  put(name ? name : "?");
  put(") in thread ");
  decimal(static_cast<unsigned long>(syscall(SYS_gettid)), num);
  put(num);
  put("; backtrace (addr2line -e BINARY -f -C OFFSET):\n");
  void* frames[kMaxFrames];
  backtrace_symbols_fd(frames, backtrace(frames, kMaxFrames), STDERR_FILENO);
  // SA_RESETHAND restored the default action: raising again ends the process by this signal.
  raise(sig);
}

}  // namespace

void install_crash_report() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  void* prime[1];
  backtrace(prime, 1);   // loads the unwinder now: backtrace() allocates on its first call
  static std::array<char, 64 * 1024> alt_stack;
  stack_t ss{};
  ss.ss_sp = alt_stack.data();
  ss.ss_size = alt_stack.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa{};
  sa.sa_sigaction = &on_fatal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (const int sig : kFatal) sigaction(sig, &sa, nullptr);
}

}  // namespace framefuse::daemon
