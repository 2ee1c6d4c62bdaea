"""The package's exceptions: one base, `Error`, and one class per failure.

Every exception the package raises derives from `unicache.Error`, which
carries `.status` (a `Status`, mirroring `unicache_status_t`) and `.message`
(the C library's message from `unicache_last_error()`, or the package's own
for a check done in Python). Classes that describe a bad argument also derive
from the matching built-in (`ValueError`, `TypeError`, `MemoryError`,
`ImportError`), so code written against the built-ins keeps working.
"""
from __future__ import annotations

import enum
from typing import Dict, Optional, Type


class Status(enum.IntEnum):
    """`unicache_status_t`: what a C call returned."""

    SUCCESS = 0
    INVALID_ARGUMENT = 1  # a null pointer, an unknown enum value, a bad shape
    INVALID_HANDLE = 2  # a null, destroyed or (in Python) closed handle
    BUFFER_TOO_SMALL = 3
    INVALID_GRAPH = 4  # the graph cannot be validated or partitioned
    COMPILE_FAILED = 5
    EXECUTE_FAILED = 6
    CACHE_ERROR = 7
    STORE_ERROR = 8
    UNSUPPORTED = 9  # the library was built without the backend asked for
    OUT_OF_MEMORY = 10
    RUNTIME_ERROR = 11


class Error(Exception):
    """The base of every exception this package raises.

    `status` is the `Status` of the failure; `message` is the library's own
    text (what `unicache_last_error()` said) or the package's, and `str()`
    of the exception prefixes it with what was being done.
    """

    status: Status = Status.RUNTIME_ERROR

    def __init__(self, message: str, status: Optional[Status] = None, what: str = "") -> None:
        self.message = message
        if status is not None:
            self.status = status
        self.what = what
        super().__init__(f"{what}: {message}" if what else message)


class InvalidArgument(Error, ValueError):
    """A value passed in is malformed: a shape, a count, a tensor's layout."""

    status = Status.INVALID_ARGUMENT


class InvalidTensorType(InvalidArgument, TypeError):
    """A tensor of the wrong type, dtype or device for the engine."""


class InvalidHandle(Error, ValueError):
    """An object used after close() (or a handle the library does not know)."""

    status = Status.INVALID_HANDLE


class BufferTooSmall(Error):
    status = Status.BUFFER_TOO_SMALL


class InvalidGraph(Error):
    """finalize() refused the graph; the message names the op and tensor."""

    status = Status.INVALID_GRAPH


class CompileFailed(Error):
    status = Status.COMPILE_FAILED


class ExecuteFailed(Error):
    status = Status.EXECUTE_FAILED


class CacheError(Error):
    status = Status.CACHE_ERROR


class StoreError(Error):
    status = Status.STORE_ERROR


class Unsupported(Error):
    """The loaded library was built without the backend asked for, or its
    device is not there (the message says which)."""

    status = Status.UNSUPPORTED


class OutOfMemory(Error, MemoryError):
    status = Status.OUT_OF_MEMORY


class LibraryError(Error, ImportError):
    """libunicache_c could not be found or loaded, or is of another version.
    The message lists every place that was tried."""

    status = Status.RUNTIME_ERROR


_BY_STATUS: Dict[Status, Type[Error]] = {
    Status.INVALID_ARGUMENT: InvalidArgument,
    Status.INVALID_HANDLE: InvalidHandle,
    Status.BUFFER_TOO_SMALL: BufferTooSmall,
    Status.INVALID_GRAPH: InvalidGraph,
    Status.COMPILE_FAILED: CompileFailed,
    Status.EXECUTE_FAILED: ExecuteFailed,
    Status.CACHE_ERROR: CacheError,
    Status.STORE_ERROR: StoreError,
    Status.UNSUPPORTED: Unsupported,
    Status.OUT_OF_MEMORY: OutOfMemory,
}


def error_for(status: int, message: str, what: str = "") -> Error:
    """The exception for a C status (an unknown value gives a plain Error)."""
    try:
        known = Status(status)
    except ValueError:
        return Error(f"{message} (status {status})", Status.RUNTIME_ERROR, what)
    return _BY_STATUS.get(known, Error)(message, known, what)
