//! gtest main of the GPU tests. Exit 77 (ctest SKIP_RETURN_CODE) when there is no CUDA device or
//! when any selected test skipped itself, so ctest reports "skipped", never "passed"; 1 when the
//! filter selected none (tests/support/ctest_result.hpp).
#include <gtest/gtest.h>

#include <cstdio>

#include "pipeline/exec/device.hpp"
#include "tests/support/ctest_result.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!GTEST_FLAG_GET(list_tests)) {
    const framefuse::CudaProbe probe = framefuse::probe_cuda();
    if (probe.devices == 0) {
      std::printf("gpu_tests: SKIPPED, no CUDA device (%s)\n", probe.detail.c_str());
      return framefuse::test::kSkipped;
    }
    std::printf("gpu_tests: %d CUDA device(s), testing on %s\n", probe.devices, probe.detail.c_str());
  }
  return framefuse::test::run_all_tests_for_ctest("gpu_tests");
}
