"""unittest.main() for ctest entries: a test that skipped itself must never read as passed.

Exit 77 (the entries' SKIP_RETURN_CODE) when any test skipped itself and none failed, 1 when a test
failed or none ran, else 0."""
import sys
import unittest

SKIPPED = 77


def main():
    result = unittest.main(exit=False).result
    if not result.wasSuccessful():
        sys.exit(1)
    if result.testsRun == 0:
        print("FAILED: no test ran", file=sys.stderr)
        sys.exit(1)
    if result.skipped:
        print(f"SKIPPED: {len(result.skipped)} of {result.testsRun} test(s) skipped themselves:", file=sys.stderr)
        for test, reason in result.skipped:
            print(f"  {test.id()}: {reason}", file=sys.stderr)
        sys.exit(SKIPPED)
    sys.exit(0)
