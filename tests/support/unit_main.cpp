//! gtest main of the unit, oracle and integration test binaries (ctest_result.hpp).
#include <gtest/gtest.h>

#include "tests/support/ctest_result.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return framefuse::test::run_all_tests_for_ctest(argc > 0 ? argv[0] : "test");
}
