#include "daemon/process_stats.hpp"

#include <dirent.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>

namespace framefuse::daemon {
namespace {

//! Entries of `dir` other than . and .. (the descriptor reading it included, as client libraries count).
uint64_t count_entries(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return 0;
  uint64_t n = 0;
  while (const dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

//! The boot time, Unix seconds (/proc/stat `btime`); 0 where unreadable.
double boot_time_unix_s() {
  std::ifstream stat("/proc/stat");
  for (std::string key; stat >> key;) {
    if (key == "btime") {
      double t = 0;
      stat >> t;
      return t;
    }
    stat.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

}  // namespace

uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * uint64_t(sysconf(_SC_PAGESIZE));
}

ProcessStats read_process_stats() {
  ProcessStats s;
  // /proc/self/stat: the command name (field 2) is in parentheses and may hold spaces; the fields
  // after its closing parenthesis start at field 3 (state).
  std::ifstream in("/proc/self/stat");
  const std::string line{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (const size_t close = line.rfind(')'); close != std::string::npos) {
    std::istringstream fields(line.substr(close + 1));
    std::string f;
    const double ticks = double(sysconf(_SC_CLK_TCK));
    static const double boot_s = boot_time_unix_s();   // fixed while the host runs
    for (int field = 3; fields >> f; ++field) {
      if (field == 14 || field == 15) s.cpu_seconds += std::stod(f) / ticks;     // utime, stime
      if (field == 22) s.start_time_unix_s = boot_s + std::stod(f) / ticks;   // starttime
      if (field == 23) s.virtual_bytes = std::stoull(f);                             // vsize
    }
  }
  s.resident_bytes = resident_bytes();
  s.open_fds = count_entries("/proc/self/fd");
  if (rlimit r{}; getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY) s.max_fds = r.rlim_cur;
  return s;
}

uint64_t release_free_heap() {
  const uint64_t before = resident_bytes();
  malloc_trim(0);
  const uint64_t after = resident_bytes();
  return before > after ? before - after : 0;
}

}  // namespace framefuse::daemon
