//! gtest main of the GPU tests. Exit 77 (ctest SKIP_RETURN_CODE) when there is no CUDA device or
//! when every selected test skipped itself, so ctest reports "skipped", never "passed".
#include <gtest/gtest.h>

#include <cstdio>

#include "pipeline/exec/device.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!GTEST_FLAG_GET(list_tests)) {
    const framefuse::CudaProbe probe = framefuse::probe_cuda();
    if (probe.devices == 0) {
      std::printf("gpu_tests: SKIPPED, no CUDA device (%s)\n", probe.detail.c_str());
      return 77;
    }
    std::printf("gpu_tests: %d CUDA device(s), testing on %s\n", probe.devices, probe.detail.c_str());
  }
  const int rc = RUN_ALL_TESTS();
  const auto* unit = ::testing::UnitTest::GetInstance();
  if (rc == 0 && unit->test_to_run_count() > 0 && unit->skipped_test_count() == unit->test_to_run_count()) {
    std::printf("gpu_tests: SKIPPED, every selected test skipped itself\n");
    return 77;
  }
  return rc;
}
