#!/usr/bin/env python3
"""Runs the unicache package's tests (unittest, standard library): the CTest test python_package.

    python3 python/tests/run_tests.py [-v] [test name patterns (unittest -k)]

Tests the package of this checkout (python/unicache), over the library that
UNICACHE_BUILD_DIR or UNICACHE_LIBRARY names, else this checkout's build/.
Exits 0 when every test passed or was skipped, 1 on a failure, and 77
(skipped) without numpy, which the tests compare results with.
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("python_package: skipped: numpy is not installed (Debian: python3-numpy)", file=sys.stderr)
        return 77
    sys.path[:0] = [os.path.dirname(HERE), HERE]  # the checkout's package, then the tests' support module
    args = [a for a in sys.argv[1:] if a != "-v"]
    loader = unittest.TestLoader()
    if args:
        loader.testNamePatterns = [a if "*" in a else f"*{a}*" for a in args]
    suite = loader.discover(HERE, pattern="test_*.py", top_level_dir=HERE)
    result = unittest.TextTestRunner(verbosity=2 if "-v" in sys.argv else 1).run(suite)
    for test, reason in result.skipped:
        print(f"skipped: {test.id()}: {reason}")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
