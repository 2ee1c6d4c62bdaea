"""The C interface's structures and constants, as ctypes declares them.

These mirror include/unicache/unicache.h field for field; a change there is a
change here. Internal: the public objects never hand these out.
"""
from __future__ import annotations

import ctypes as C

MAX_NDIMS = 8  # UNICACHE_MAX_NDIMS
UNKNOWN_DIM = -1  # UNICACHE_UNKNOWN_DIM: a dimension known only when compiling


class LogicalTensorStruct(C.Structure):
    """unicache_logical_tensor_t"""

    _fields_ = [
        ("id", C.c_uint64),
        ("ndims", C.c_int32),
        ("dims", C.c_int64 * MAX_NDIMS),
        ("is_constant", C.c_int32),
    ]


class TensorShapeStruct(C.Structure):
    """unicache_tensor_shape_t"""

    _fields_ = [("tensor_id", C.c_uint64), ("ndims", C.c_int32), ("dims", C.POINTER(C.c_int64))]


class ShapeRequestStruct(C.Structure):
    """unicache_shape_request_t"""

    _fields_ = [("shapes", C.POINTER(TensorShapeStruct)), ("num_shapes", C.c_size_t)]


class TensorStruct(C.Structure):
    """unicache_tensor_t"""

    _fields_ = [("desc", LogicalTensorStruct), ("data", C.c_void_p), ("version", C.c_uint64)]


CACHE_STATS_FIELDS = ("hits", "waits", "misses", "inserts", "evictions", "failures", "refused_full",
                      "refused_oversize", "refused_admission", "bytes", "entries")


class CacheStatsStruct(C.Structure):
    """unicache_cache_stats_t"""

    _fields_ = [(name, C.c_uint64) for name in CACHE_STATS_FIELDS]


class BuildStatsStruct(C.Structure):
    """unicache_build_stats_t"""

    _fields_ = [("built", C.c_uint64), ("loaded", C.c_uint64), ("build_ns", C.c_uint64)]


STORE_STATS_FIELDS = ("entries", "bytes", "devices", "temporary_files")


class StoreStatsStruct(C.Structure):
    """unicache_store_stats_t"""

    _fields_ = [(name, C.c_uint64) for name in STORE_STATS_FIELDS]


class DeviceIdentityStruct(C.Structure):
    """unicache_device_identity_t"""

    _fields_ = [("platform_name", C.c_char_p), ("device_name", C.c_char_p), ("device_version", C.c_char_p),
                ("driver_version", C.c_char_p)]


# unicache_eviction_callback_t(user_data, kind, device_id, context_id, owner_id, key, key_size)
EvictionCallback = C.CFUNCTYPE(None, C.c_void_p, C.c_int32, C.c_int, C.c_uint64, C.c_uint32, C.c_void_p,
                               C.c_size_t)
