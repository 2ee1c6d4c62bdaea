#!/usr/bin/env python3
"""Installs the package into a fresh virtual environment, offline, and imports it there:
the CTest test python_package_install.

    python3 python/tests/check_install.py

`python -m venv`, then `pip install --no-index <checkout>/python` (nothing may
come from an index: the build backend is in the tree), then, from another
directory, `import unicache` without numpy and without the library's
location, and with UNICACHE_BUILD_DIR (when set) the library's version; the
torch.compile backend's entry point is declared; where this interpreter has
torch >= 2, torch.compile(model, backend="unicache") in a venv that sees its
torch finds the installed backend with no import or registration call.
Exits 0 if all of it works, 1 if not, 77 (skipped) where this interpreter
cannot make a virtual environment with pip (Debian: python3-venv).
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parents[1]
SKIP = 77


def run(command, **kwargs):
    print("+", " ".join(str(c) if "\n" not in str(c) else "'<script>'" for c in command), flush=True)
    return subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=300, **kwargs)


def main() -> int:
    try:
        import ensurepip  # noqa: F401
        import venv  # noqa: F401
    except ImportError as e:
        print(f"python_package_install: skipped: {e} (Debian: python3-venv)", file=sys.stderr)
        return SKIP
    with tempfile.TemporaryDirectory(prefix="unicache-venv-") as tmp:
        env_dir = Path(tmp) / "venv"
        made = run([sys.executable, "-m", "venv", env_dir])
        if made.returncode != 0:
            print(f"python_package_install: skipped: no virtual environment with pip here:\n{made.stdout}{made.stderr}",
                  file=sys.stderr)
            return SKIP
        python = env_dir / "bin" / "python"
        installed = run([python, "-m", "pip", "install", "--no-index", "--no-cache-dir", "--disable-pip-version-check",
                         PYTHON_DIR])
        print(installed.stdout, installed.stderr)
        if installed.returncode != 0:
            print("python_package_install: FAILED: pip install", file=sys.stderr)
            return 1
        environment = {k: v for k, v in os.environ.items()
                       if k not in ("UNICACHE_LIBRARY", "UNICACHE_BUILD_DIR", "PYTHONPATH")}
        bare = run([python, "-c", "import importlib.util, sys, unicache\n"
                    "assert importlib.util.find_spec('numpy') is None, 'numpy in a fresh venv?'\n"
                    "assert unicache.__file__.startswith(sys.prefix), unicache.__file__\n"
                    "import os; assert os.path.exists(os.path.join(os.path.dirname(unicache.__file__), 'py.typed'))\n"
                    "print('import unicache', unicache.__version__, 'from', unicache.__file__)"],
                   cwd="/", env=environment)
        print(bare.stdout, bare.stderr)
        if bare.returncode != 0:
            print("python_package_install: FAILED: import unicache in the venv", file=sys.stderr)
            return 1
        declared = run([python, "-c", "from importlib.metadata import entry_points\n"
                        "found = {e.name: e.value for e in entry_points(group='torch_dynamo_backends')}\n"
                        "assert found.get('unicache') == 'unicache.torch._dynamo:dynamo_backend', found\n"
                        "print('entry point torch_dynamo_backends: unicache =', found['unicache'])"],
                       cwd="/", env=environment)
        print(declared.stdout, declared.stderr)
        if declared.returncode != 0:
            print("python_package_install: FAILED: the torch.compile backend's entry point", file=sys.stderr)
            return 1
        build_dir = os.environ.get("UNICACHE_BUILD_DIR")
        if build_dir:
            loaded = run([python, "-c", "import unicache\n"
                          "assert unicache.library_version() == unicache.__version__\n"
                          "print('library', unicache.library_version(), 'from', unicache.library_path())"],
                         cwd="/", env=dict(environment, UNICACHE_BUILD_DIR=build_dir))
            print(loaded.stdout, loaded.stderr)
            if loaded.returncode != 0:
                print("python_package_install: FAILED: the library from the venv", file=sys.stderr)
                return 1
    found = found_by_torch_compile()
    if found:
        return found
    print("python_package_install: pip install ./python and import unicache work in a fresh venv")
    return 0


DYNAMO_CHECK = """
import sys, torch
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
x = torch.randn(3, 8)
with torch.no_grad():
    got, want = torch.compile(model, backend="unicache")(x), model(x)
assert "unicache.torch" in sys.modules, "the backend was not loaded"
import unicache.torch
assert unicache.torch.statistics().captures == 1, unicache.torch.statistics()
assert (got - want).abs().max().item() < 1e-5
print("torch.compile(model, backend='unicache') with no import of unicache: ok")
"""


def found_by_torch_compile() -> int:
    """Where this interpreter has dynamo (torch >= 2): in a venv that sees the system's
    torch, torch.compile(backend="unicache") finds the installed package by its entry
    point, with no import or registration call. 0 when it does or cannot be tried."""
    try:
        import torch._dynamo  # noqa: F401
    except ImportError:
        print("python_package_install: torch.compile's discovery not tried: no torch >= 2 here")
        return 0
    build_dir = os.environ.get("UNICACHE_BUILD_DIR")
    if not build_dir:
        print("python_package_install: torch.compile's discovery not tried: UNICACHE_BUILD_DIR is not set")
        return 0
    with tempfile.TemporaryDirectory(prefix="unicache-venv-torch-") as tmp:
        env_dir = Path(tmp) / "venv"
        if run([sys.executable, "-m", "venv", "--system-site-packages", env_dir]).returncode != 0:
            return 0
        python = env_dir / "bin" / "python"
        # Where this interpreter is itself a venv (the GPU host's torch is one), the new
        # venv sees the system's packages, not this one's: name them in a .pth file.
        import site
        target = run([python, "-c", "import site; print(site.getsitepackages()[0])"]).stdout.strip()
        if target:
            Path(target, "_parent_site_packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
        installed = run([python, "-m", "pip", "install", "--no-index", "--no-cache-dir", "--disable-pip-version-check",
                         PYTHON_DIR])
        if installed.returncode != 0:
            print(installed.stdout, installed.stderr, "python_package_install: FAILED: pip install (torch venv)",
                  file=sys.stderr)
            return 1
        environment = {k: v for k, v in os.environ.items() if k not in ("UNICACHE_LIBRARY", "PYTHONPATH")}
        checked = run([python, "-c", DYNAMO_CHECK], cwd="/", env=dict(environment, UNICACHE_BUILD_DIR=build_dir))
        print(checked.stdout, checked.stderr)
        if checked.returncode != 0:
            print("python_package_install: FAILED: torch.compile(backend='unicache') without a registration call",
                  file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
