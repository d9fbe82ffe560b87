#include "tests/support/ctest_result.hpp"

#include <gtest/gtest.h>

#include <cstdio>

namespace framefuse::test {

int run_all_tests_for_ctest(const char* binary) {
  const int rc = RUN_ALL_TESTS();
  if (rc != 0 || GTEST_FLAG_GET(list_tests)) return rc;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  if (unit.test_to_run_count() == 0) {
    std::printf("%s: FAILED, the filter selected no test\n", binary);
    return 1;
  }
  if (unit.skipped_test_count() == 0) return 0;
  std::printf("%s: SKIPPED, %d of %d test(s) skipped themselves:\n", binary, unit.skipped_test_count(),
              unit.test_to_run_count());
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
    for (int j = 0; j < suite.total_test_count(); ++j) {
      const ::testing::TestInfo& t = *suite.GetTestInfo(j);
      if (t.should_run() && t.result()->Skipped()) std::printf("  %s.%s\n", suite.name(), t.name());
    }
  }
  return kSkipped;
}

}  // namespace framefuse::test
