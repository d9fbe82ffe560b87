//! The daemon's view of its own process (daemon/process_stats.hpp), read from /proc/self, and the
//! freed heap it gives back to the system after a reload.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <thread>
#include <vector>

#include "daemon/process_stats.hpp"

namespace framefuse::daemon {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(ProcessStats, DescribeThisProcess) {
  const ProcessStats before = read_process_stats();
  EXPECT_GT(before.resident_bytes, kMiB);
  EXPECT_GE(before.virtual_bytes, before.resident_bytes);
  const double now = double(std::time(nullptr));
  EXPECT_GT(before.start_time_unix_s, now - 24 * 3600.0);
  EXPECT_LE(before.start_time_unix_s, now + 1);
  EXPECT_GT(before.open_fds, 2u);   // stdin, stdout, stderr at least
  if (before.max_fds > 0) EXPECT_GE(before.max_fds, before.open_fds);

  const int fd = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(read_process_stats().open_fds, before.open_fds + 1);
  ::close(fd);

  // 0.2 s of CPU by the C library's clock(): /proc's counter (10 ms ticks) moves by about that.
  const std::clock_t start = std::clock();
  volatile uint64_t spin = 0;
  while (double(std::clock() - start) < 0.2 * CLOCKS_PER_SEC) spin = spin + 1;
  const double used = read_process_stats().cpu_seconds - before.cpu_seconds;
  EXPECT_GT(used, 0.15);
  EXPECT_LT(used, 2.0);
}

TEST(ProcessStats, FreedHeapGoesBackToTheSystem) {
  // A worker (its own malloc arena, as a pipeline's threads) fills 64 MiB in small blocks, keeps one
  // block above them and frees the rest: free memory below a block in use, which the heap keeps.
  constexpr size_t kBlock = 512, kBlocks = 64 * kMiB / kBlock;
  void* above = nullptr;
  std::thread([&] {
    std::vector<void*> blocks(kBlocks);
    for (void*& b : blocks) {
      b = std::malloc(kBlock);
      static_cast<volatile char*>(b)[0] = 1;   // touched: resident
      static_cast<volatile char*>(b)[kBlock - 1] = 1;
    }
    above = std::malloc(kBlock);
    for (void* b : blocks) std::free(b);
  }).join();
  const uint64_t resident = resident_bytes();
  const uint64_t released = release_free_heap();
  std::free(above);
  EXPECT_GT(released, 32 * kMiB) << "of 64 MiB freed";
  EXPECT_LE(resident_bytes() + 32 * kMiB, resident);
  EXPECT_LT(release_free_heap(), 8 * kMiB) << "nothing much is left to release a second time";
}

}  // namespace
}  // namespace framefuse::daemon
