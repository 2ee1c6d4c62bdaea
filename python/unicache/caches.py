"""The process-wide in-memory caches: capacities, policies, statistics, eviction callbacks.

Two caches: the constant tensor cache (packed weights) and the kernel cache
(kernels and compiled partitions). A capacity is in MB per device of an
engine kind; shrinking evicts, 0 caches nothing. Every function may be
called from any thread.

    unicache.set_cache_capacity(Cache.KERNEL, EngineKind.GPU, 512, Policy.LRU)
    before = unicache.cache_stats(Cache.KERNEL)
    ...
    print(unicache.cache_stats(Cache.KERNEL) - before)   # what happened in between
"""
from __future__ import annotations

import ctypes as C
import dataclasses
import enum
import threading
import warnings
from typing import Callable, Dict, NamedTuple, Tuple

from . import _abi, _lib
from .engine import EngineKind
from .errors import InvalidArgument


class Cache(enum.IntEnum):
    """`unicache_cache_t`"""

    CONSTANT_TENSOR = 0
    KERNEL = 1


class Policy(enum.IntEnum):
    """`unicache_policy_t`: what a full cache evicts."""

    DEFAULT = 0
    NO_EVICT = 1
    LRU = 2
    COST = 3  # GreedyDual-Size-Frequency behind an admission window


class Owner(enum.IntEnum):
    """Owner ids: the namespace of a cache entry's key (the C++ headers' values)."""

    COMPILED_PARTITION = 0xC0DE0001
    ONEDNN_CPU = 0x0D0E0001
    OPENCL = 0x0C1E0001
    CUDA = 0x0C0D0001


@dataclasses.dataclass(frozen=True)
class CacheStats:
    """Counters of a whole cache (every device and context). `a - b` gives the
    difference of each counter (for bytes and entries: their change)."""

    hits: int = 0
    waits: int = 0
    misses: int = 0
    inserts: int = 0
    evictions: int = 0
    failures: int = 0
    refused_full: int = 0
    refused_oversize: int = 0
    refused_admission: int = 0
    bytes: int = 0
    entries: int = 0

    def __sub__(self, other: "CacheStats") -> "CacheStats":
        return CacheStats(*(getattr(self, f) - getattr(other, f) for f in _abi.CACHE_STATS_FIELDS))


class Capacity(NamedTuple):
    capacity_mb: int
    policy: Policy


def set_cache_capacity(cache: Cache, kind: EngineKind, capacity_mb: int, policy: Policy = Policy.DEFAULT) -> None:
    """Sets the capacity of every device of `kind` in `cache`, and its policy.
    CacheError above the maximum; InvalidArgument for a value outside an enum."""
    _lib.call("unicache_set_cache_capacity", int(cache), int(kind), capacity_mb, int(policy))


def get_cache_capacity(cache: Cache, kind: EngineKind) -> Capacity:
    mb, policy = C.c_size_t(), C.c_int()
    _lib.call("unicache_get_cache_capacity", int(cache), int(kind), C.byref(mb), C.byref(policy))
    return Capacity(mb.value, Policy(policy.value))


def set_constant_tensor_cache_capacity(kind: EngineKind, size_mb: int) -> None:
    """oneDNN Graph's name: the constant tensor cache's capacity for `kind`."""
    _lib.call("unicache_set_constant_tensor_cache_capacity", int(kind), size_mb)


def get_constant_tensor_cache_capacity(kind: EngineKind) -> int:
    mb = C.c_size_t()
    _lib.call("unicache_get_constant_tensor_cache_capacity", int(kind), C.byref(mb))
    return mb.value


def set_kernel_cache_capacity(capacity_mb: int) -> None:
    """The kernel cache's capacity for every device of both kinds."""
    _lib.call("unicache_set_kernel_cache_capacity", capacity_mb)


def get_kernel_cache_capacity() -> int:
    mb = C.c_size_t()
    _lib.call("unicache_get_kernel_cache_capacity", C.byref(mb))
    return mb.value


def cache_stats(cache: Cache) -> CacheStats:
    s = _abi.CacheStatsStruct()
    _lib.call("unicache_get_cache_stats", int(cache), C.byref(s))
    return CacheStats(*(getattr(s, f) for f in _abi.CACHE_STATS_FIELDS))


@dataclasses.dataclass(frozen=True)
class EvictionEvent:
    """An evicted entry: its scope (kind, device, context), owner and key bytes."""

    kind: EngineKind
    device_id: int
    context_id: int
    owner_id: int
    key: bytes


class EvictionSubscription:
    """A subscribed callback; remove() unsubscribes (waiting for calls running on
    other threads). It stays subscribed until then, even if this object is dropped."""

    _live: Dict[Tuple[int, int, int], "EvictionSubscription"] = {}  # keeps each C thunk alive while subscribed
    _lock = threading.Lock()

    def __init__(self, cache: Cache, owner_id: int, callback: Callable[[EvictionEvent], None]) -> None:
        def thunk(_user: object, kind: int, device: int, context: int, owner: int, key: int, size: int) -> None:
            try:
                callback(EvictionEvent(EngineKind(kind), device, context, owner, C.string_at(key, size)))
            except Exception as e:  # noqa: BLE001 (it runs on the evicting thread: nowhere to raise to)
                warnings.warn(f"unicache: an eviction callback raised {e!r}; ignored", RuntimeWarning)

        self.cache, self.owner_id, self._thunk = Cache(cache), owner_id, _abi.EvictionCallback(thunk)
        subscription = C.c_uint64()
        _lib.call("unicache_add_eviction_callback", int(cache), owner_id, self._thunk, None, C.byref(subscription))
        self.id = subscription.value
        with self._lock:
            self._live[(self.cache, owner_id, self.id)] = self

    def remove(self) -> None:
        with self._lock:
            if self._live.pop((self.cache, self.owner_id, self.id), None) is None:
                raise InvalidArgument("the eviction callback was removed already")
        _lib.call("unicache_remove_eviction_callback", int(self.cache), self.owner_id, self.id)


def add_eviction_callback(cache: Cache, owner_id: int, callback: Callable[[EvictionEvent], None]) -> \
        EvictionSubscription:
    """Calls `callback(event)` after each eviction of an entry of `owner_id` (an
    `Owner`) from `cache`, on the evicting thread, with no lock of the cache held.
    An exception it raises is reported as a RuntimeWarning and dropped."""
    return EvictionSubscription(cache, owner_id, callback)
