// install_crash_report(): a child process that dies by a fatal signal first writes the signal and a
// backtrace to stderr, and still dies by that signal (its default action, exit status and core
// dump, is kept).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "daemon/crash_report.hpp"

namespace framefuse::daemon {
namespace {

struct Death {
  int signal = 0;       //!< the signal that ended the child, 0 if it exited
  std::string stderr_text;
};

//! Runs `die` in a child process with the crash report installed; returns how it ended.
template <class Die>
Death run_child(Die die) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pipe_fds[1], STDERR_FILENO);
    close(pipe_fds[0]);
    install_crash_report();
    install_crash_report();   // idempotent
    die();
    _exit(0);
  }
  close(pipe_fds[1]);
  Death d;
  char buf[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof buf)) > 0;) d.stderr_text.append(buf, size_t(n));
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  d.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return d;
}

TEST(CrashReport, SegfaultPrintsSignalAndBacktraceThenDiesBySignal) {
  const Death d = run_child([] {
    volatile int* volatile nowhere = nullptr;
    *nowhere = 1;   // a real fault, not a raise()
  });
  EXPECT_EQ(d.signal, SIGSEGV) << d.stderr_text;
  EXPECT_NE(d.stderr_text.find("framefused: fatal signal 11 (SEGV) in thread "), std::string::npos) << d.stderr_text;
  EXPECT_NE(d.stderr_text.find("backtrace (addr2line -e BINARY -f -C OFFSET):\n"), std::string::npos);
  // At least a few frames, each "binary(...)[0x...]".
  size_t frames = 0;
  for (size_t at = 0; (at = d.stderr_text.find(")[0x", at)) != std::string::npos; ++at) ++frames;
  EXPECT_GE(frames, 3u) << d.stderr_text;
}

TEST(CrashReport, AbortIsReportedToo) {
  const Death d = run_child([] { std::abort(); });
  EXPECT_EQ(d.signal, SIGABRT) << d.stderr_text;
  EXPECT_NE(d.stderr_text.find("framefused: fatal signal 6 (ABRT)"), std::string::npos) << d.stderr_text;
}

TEST(CrashReport, NormalExitPrintsNothing) {
  const Death d = run_child([] {});
  EXPECT_EQ(d.signal, 0);
  EXPECT_EQ(d.stderr_text, "");
}

}  // namespace
}  // namespace framefuse::daemon
