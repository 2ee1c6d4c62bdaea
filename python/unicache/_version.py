"""The package's version: the unicache release it belongs to (CMake's project version)."""
__version__ = "0.1.0"
