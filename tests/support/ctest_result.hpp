#pragma once
//! How a gtest binary reports to ctest: a skipped test must never read as a passed one.
namespace framefuse::test {

//! ctest's SKIP_RETURN_CODE for every test entry.
inline constexpr int kSkipped = 77;

//! RUN_ALL_TESTS() (after InitGoogleTest), then the exit status for ctest: a failure's status;
//! kSkipped when any selected test skipped itself (the skipped tests are listed); 1 when the
//! filter selected no test at all (a renamed suite must not pass silently); else 0.
int run_all_tests_for_ctest(const char* binary);

}  // namespace framefuse::test
