"""The persistent kernel store's runtime settings and statistics, and blobs.

The store keeps compiled device binaries on disk, shared by the processes
of a machine across restarts. It never fails its user: an unusable directory
turns it off with one warning on stderr, and stats() then raises StoreError
saying why. Every function may be called from any thread.

    unicache.store.set_directory("/var/cache/myapp/unicache")
    unicache.store.set_capacity_mb(2048)
    print(unicache.store.stats())

Blobs are for applications that keep binaries in their own storage: one
device binary under its key, self-checking, tied to a `DeviceIdentity`.
"""
from __future__ import annotations

import ctypes as C
import dataclasses
import os
from typing import Optional, Tuple, Union

from . import _abi, _lib
from .errors import Status

PathLike = Union[str, "os.PathLike[str]"]


def _encode(value: Optional[PathLike]) -> Optional[bytes]:
    return None if value is None else os.fsencode(value)


def set_enabled(enabled: bool) -> None:
    _lib.call("unicache_store_set_enabled", int(bool(enabled)))


def set_size_eviction(enabled: bool) -> None:
    """Whether a put that leaves the store over its size evicts (default on)."""
    _lib.call("unicache_store_set_size_eviction", int(bool(enabled)))


def set_directory(directory: PathLike) -> None:
    _lib.call("unicache_store_set_directory", _encode(directory))


def directory() -> str:
    """The directory in use."""
    return os.fsdecode(_lib.query_bytes("unicache_store_get_directory").rstrip(b"\0"))


def set_capacity_mb(capacity_mb: int) -> None:
    _lib.call("unicache_store_set_capacity_mb", capacity_mb)


def set_remote(url: Optional[str], secret_file: Optional[PathLike] = None) -> None:
    """The remote tier: a redis:// URL (None or "": off) and optionally a secret file
    signing entries. InvalidArgument for a malformed URL or unusable secret file
    (the message never quotes a password or the secret); nothing changes then."""
    _lib.call("unicache_store_set_remote", None if url is None else url.encode(), _encode(secret_file))


@dataclasses.dataclass(frozen=True)
class StoreStats:
    entries: int
    bytes: int
    devices: int
    temporary_files: int


def stats() -> StoreStats:
    """The store's contents; StoreError if the store was turned off, saying why."""
    s = _abi.StoreStatsStruct()
    _lib.call("unicache_store_get_stats", C.byref(s), what="store stats")
    return StoreStats(*(getattr(s, f) for f in _abi.STORE_STATS_FIELDS))


@dataclasses.dataclass(frozen=True)
class DeviceIdentity:
    """What a binary was compiled for; blobs are served only to an equal identity."""

    platform_name: str
    device_name: str
    device_version: str
    driver_version: str

    def _struct(self) -> _abi.DeviceIdentityStruct:
        return _abi.DeviceIdentityStruct(*(getattr(self, f.name).encode() for f in dataclasses.fields(self)))


def blob_id(device: DeviceIdentity, key: bytes) -> str:
    """32 hex digits naming the blob of `key` for `device`."""
    return _lib.query_string("unicache_blob_id", C.byref(device._struct()), key, len(key))


def serialize_blob(device: DeviceIdentity, key: bytes, binary: bytes) -> bytes:
    return _lib.query_bytes("unicache_blob_serialize", C.byref(device._struct()), key, len(key), binary, len(binary))


def deserialize_blob(device: DeviceIdentity, blob: bytes) -> Tuple[bytes, bytes]:
    """(key, binary) of a blob; InvalidArgument naming the problem for a blob of another
    device, driver or unicache build, a corrupt or truncated one, or not a blob."""
    identity = device._struct()
    key_size, binary_size = C.c_size_t(0), C.c_size_t(0)
    status = _lib.function("unicache_blob_deserialize")(C.byref(identity), blob, len(blob), None,
                                                        C.byref(key_size), None, C.byref(binary_size))
    if status != Status.BUFFER_TOO_SMALL:  # the answer to a size query, with both sizes set
        _lib.check(status, "deserialize_blob")
    key = (C.c_char * max(key_size.value, 1))()
    binary = (C.c_char * max(binary_size.value, 1))()
    _lib.call("unicache_blob_deserialize", C.byref(identity), blob, len(blob), key, C.byref(key_size), binary,
              C.byref(binary_size), what="deserialize_blob")
    return key.raw[:key_size.value], binary.raw[:binary_size.value]
