"""The lifetime of C handles: released deterministically, never used after.

A `NativeHandle` holds one C handle with a count of its holders: the Python
object made over it and the objects that depend on it (a stream on its
engine, a partition on its graph). The C destroy function runs when the last
holder lets go, so closing an engine that a stream still uses ends the
engine object's use at once but keeps the C engine until the stream closes.
A call borrows the handle for its duration, so a close() from another thread
during it takes effect when the call returns, never in the middle.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterable, Optional, Tuple

from .errors import InvalidHandle, error_for


class NativeHandle:
    """One C handle and its holders' count (starts at 1: the object made over it)."""

    __slots__ = ("_pointer", "_destroy", "_holders", "_lock", "what")

    def __init__(self, pointer: int, destroy: Callable[[int], int], what: str) -> None:
        self._pointer, self._destroy, self.what = pointer, destroy, what
        self._holders = 1
        self._lock = threading.Lock()

    @property
    def pointer(self) -> int:
        """The C handle (for a holder, which keeps it alive)."""
        return self._pointer

    def acquire(self) -> int:
        """Adds a holder and returns the pointer; InvalidHandle if it was destroyed."""
        with self._lock:
            if self._holders == 0:
                raise InvalidHandle(f"the {self.what} is closed")
            self._holders += 1
            return self._pointer

    def release(self) -> None:
        """Drops a holder; the last one destroys the C handle (raising its error, if any)."""
        with self._lock:
            self._holders -= 1
            if self._holders:
                return
        status = self._destroy(self._pointer)
        if status:
            raise error_for(status, f"destroying the {self.what} failed", self.what)

    def __enter__(self) -> int:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


_close_lock = threading.Lock()


class Resource:
    """Base of the objects over a C handle: close(), a context manager, __del__.

    Subclasses call `_own(native, depends_on)`; `depends_on` holds the handles
    of the objects this one keeps alive (each acquired once, released on close).
    """

    _native: Optional[NativeHandle] = None
    _depends_on: Tuple[NativeHandle, ...] = ()

    def _own(self, native: NativeHandle, depends_on: Iterable["Resource"] = ()) -> None:
        acquired = []
        try:
            for resource in depends_on:
                handle = resource._handle()
                handle.acquire()
                acquired.append(handle)
        except BaseException:
            for handle in acquired:
                handle.release()
            native.release()
            raise
        self._native, self._depends_on = native, tuple(acquired)

    def _handle(self) -> NativeHandle:
        """The handle, to borrow with `with self._handle() as pointer:`; InvalidHandle once closed."""
        native = self._native
        if native is None:
            raise InvalidHandle(f"the {type(self).__name__} is closed")
        return native

    @property
    def closed(self) -> bool:
        return self._native is None

    def close(self) -> None:
        """Ends this object's use; idempotent. The C handle is destroyed once nothing
        made from this object still needs it (see the module's docstring)."""
        with _close_lock:
            native, depends_on = self._native, self._depends_on
            self._native, self._depends_on = None, ()
        if native is None:
            return
        try:
            native.release()
        finally:
            for handle in depends_on:
                handle.release()

    def __enter__(self) -> Any:
        self._handle()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # at interpreter exit the library may be gone: nothing left to do
            pass
