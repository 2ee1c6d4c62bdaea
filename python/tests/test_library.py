"""Finding and loading libunicache_c; versions; the status and error mirrors of the C enums."""
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import unicache
from unicache import _lib
from unicache.errors import error_for

PACKAGE_PARENT = str(Path(unicache.__file__).resolve().parents[1])


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter (the library is loaded once per process), this package first."""
    environment = {k: v for k, v in os.environ.items() if k not in ("UNICACHE_LIBRARY", "UNICACHE_BUILD_DIR")}
    environment.update(env, PYTHONPATH=PACKAGE_PARENT)
    return subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True,
                           timeout=120, cwd=tempfile.gettempdir())


class Library(unittest.TestCase):
    def test_package_and_library_versions_are_the_same_release(self):
        self.assertEqual(unicache.__version__, unicache.library_version())

    def test_library_path_names_the_loaded_file(self):
        self.assertIn("libunicache_c", unicache.library_path())

    def test_import_works_without_the_library_and_the_first_use_lists_the_places_tried(self):
        missing = os.path.join(tempfile.gettempdir(), "no-such-dir", "libunicache_c.so")
        code = ("import unicache\n"
                "try:\n    unicache.library_version()\n"
                "except unicache.LibraryError as e:\n"
                "    assert isinstance(e, ImportError) and isinstance(e, unicache.Error)\n    print(e)\n")
        result = run_python(code, UNICACHE_LIBRARY=missing)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("UNICACHE_LIBRARY", result.stdout)
        self.assertIn(missing, result.stdout)

    def test_a_build_dir_without_the_library_is_reported_not_replaced(self):
        with tempfile.TemporaryDirectory() as empty:
            result = run_python("import unicache; unicache.Graph()", UNICACHE_BUILD_DIR=empty)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("LibraryError", result.stderr)
        self.assertIn(os.path.join(empty, "c_api", "libunicache_c.so"), result.stderr)

    def test_a_file_that_is_not_a_library_is_refused(self):
        with tempfile.NamedTemporaryFile(suffix=".so") as bogus:
            bogus.write(b"not an ELF file")
            bogus.flush()
            result = run_python("import unicache; unicache.library_version()", UNICACHE_LIBRARY=bogus.name)
        self.assertIn("cannot load", result.stderr)

    def test_unicache_library_comes_before_unicache_build_dir(self):
        path = unicache.library_path()
        result = run_python("import unicache; print(unicache.library_path())", UNICACHE_LIBRARY=path,
                            UNICACHE_BUILD_DIR="/nonexistent")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), path)

    def test_status_names_match_the_c_library(self):
        name = _lib.library().cdll.unicache_status_name
        for status in unicache.Status:
            self.assertEqual(name(int(status)).decode(), "UNICACHE_" + status.name)

    def test_each_status_has_its_error_class_and_all_derive_from_error(self):
        self.assertIsInstance(error_for(4, "m"), unicache.InvalidGraph)
        self.assertIsInstance(error_for(1, "m"), ValueError)
        self.assertIsInstance(error_for(10, "m"), MemoryError)
        for status in unicache.Status:
            if status != unicache.Status.SUCCESS:
                e = error_for(int(status), "message", "doing")
                self.assertIsInstance(e, unicache.Error)
                self.assertEqual((e.status, e.message, str(e)), (status, "message", "doing: message"))
        self.assertEqual(error_for(999, "m").status, unicache.Status.RUNTIME_ERROR)

    def test_every_c_function_is_declared_with_its_types(self):
        lib = _lib.library()
        for name in list(_lib._CORE) + [n for n in {**_lib._OPENCL, **_lib._CUDA} if n not in lib.missing]:
            self.assertIsNotNone(getattr(lib.cdll, name).argtypes, name)


if __name__ == "__main__":
    unittest.main()
