#pragma once
//! The daemon process' own resources, as Prometheus client libraries export them (the process_*
//! families), and giving freed heap back to the OS. Linux: /proc/self.
#include <cstdint>

namespace framefuse::daemon {

struct ProcessStats {
  double cpu_seconds = 0;          //!< user + system CPU time of all threads
  uint64_t resident_bytes = 0;     //!< resident set
  uint64_t virtual_bytes = 0;      //!< virtual address space
  double start_time_unix_s = 0;    //!< when the process started, Unix time
  uint64_t open_fds = 0, max_fds = 0;   //!< file descriptors open, and the soft limit
};

//! Now. Fields that cannot be read stay 0.
ProcessStats read_process_stats();

//! The resident set now, bytes (/proc/self/statm); 0 where unreadable.
uint64_t resident_bytes();

//! Returns free heap pages to the OS (glibc's malloc_trim, which also releases free pages inside
//! every thread's arena): memory that stopped pipelines freed stays resident otherwise. Returns the
//! resident bytes that went (0 when none did). Takes milliseconds on a large
//! heap: for after a reload, not the per-frame path.
uint64_t release_free_heap();

}  // namespace framefuse::daemon
