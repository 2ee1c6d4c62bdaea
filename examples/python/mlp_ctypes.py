#!/usr/bin/env python3
"""An MLP block through unicache's C interface, from Python (ctypes, numpy).

Builds y = relu(x @ W + b) with W and b constant, compiles it for several
batch sizes on the CPU (oneDNN) and on the default OpenCL device, runs each,
compares with numpy, and prints what the caches did.

The shared library is found in build/src/c_api/ of this checkout, or in the
build directory that UNICACHE_BUILD_DIR names. Exits 1 if a result is wrong.
"""
import ctypes as C
import os
import sys
from pathlib import Path

try:
    import numpy as np
except ImportError:
    print("mlp_ctypes: skipped: numpy is not installed (Debian: python3-numpy)", file=sys.stderr)
    sys.exit(77)

MAX_NDIMS = 8
UNKNOWN = -1
SUCCESS, UNSUPPORTED = 0, 9
CPU, GPU = 0, 1
CONSTANT_TENSOR_CACHE, KERNEL_CACHE = 0, 1
OP_MATMUL, OP_ADD, OP_RELU = 0, 1, 3


class LogicalTensor(C.Structure):
    _fields_ = [("id", C.c_uint64), ("ndims", C.c_int32), ("dims", C.c_int64 * MAX_NDIMS), ("is_constant", C.c_int32)]


class Tensor(C.Structure):
    _fields_ = [("desc", LogicalTensor), ("data", C.c_void_p), ("version", C.c_uint64)]


class CacheStats(C.Structure):
    _fields_ = [(name, C.c_uint64) for name in ("hits", "waits", "misses", "inserts", "evictions", "failures",
                                               "refused_full", "refused_oversize", "refused_admission", "bytes",
                                               "entries")]


def load_library():
    root = Path(__file__).resolve().parents[2]
    build = Path(os.environ.get("UNICACHE_BUILD_DIR", root / "build"))
    path = build / "src" / "c_api" / "libunicache_c.so"
    if not path.exists():
        sys.exit(f"mlp_ctypes: {path} not found: build the project (target unicache_c) or set UNICACHE_BUILD_DIR")
    lib = C.CDLL(str(path))
    lib.unicache_last_error.restype = C.c_char_p
    lib.unicache_status_name.restype = C.c_char_p
    lib.unicache_version.restype = C.c_char_p
    # Every function's parameters, so that ctypes passes pointers and sizes
    # at their full width (an undeclared Python int goes as a C int).
    P, VP, SZ, I32, U64 = C.POINTER, C.c_void_p, C.c_size_t, C.c_int32, C.c_uint64
    prototypes = {
        "unicache_graph_create": [P(VP)],
        "unicache_graph_destroy": [VP],
        "unicache_graph_add_tensor": [VP, I32, P(C.c_int64), I32, P(LogicalTensor)],
        "unicache_graph_add_op": [VP, C.c_int, P(U64), SZ, P(U64), SZ, I32, I32, P(U64)],
        "unicache_graph_finalize": [VP],
        "unicache_graph_get_partition": [VP, SZ, P(VP)],
        "unicache_engine_create_cpu": [C.c_int, P(VP)],
        "unicache_engine_destroy": [VP],
        "unicache_stream_create": [VP, P(VP)],
        "unicache_stream_destroy": [VP],
        "unicache_compile": [VP, SZ, P(I32), P(P(C.c_int64)), VP, P(VP)],
        "unicache_compiled_partition_destroy": [VP],
        "unicache_compiled_partition_get_output": [VP, SZ, P(LogicalTensor)],
        "unicache_compiled_partition_execute": [VP, VP, P(Tensor), SZ, P(Tensor), SZ],
        "unicache_get_cache_stats": [C.c_int, P(CacheStats)],
        "unicache_opencl_engine_create_default": [P(VP)],
        "unicache_opencl_buffer_create": [VP, SZ, VP, P(VP)],
        "unicache_opencl_buffer_read": [VP, VP, VP, SZ],
        "unicache_opencl_buffer_release": [VP],
    }
    for name, argtypes in prototypes.items():
        if hasattr(lib, name):  # the OpenCL ones exist only in builds with that backend
            function = getattr(lib, name)
            function.argtypes = argtypes
            function.restype = C.c_int
    return lib


lib = load_library()


def check(status, what):
    if status != SUCCESS:
        raise RuntimeError(f"{what}: {lib.unicache_status_name(status).decode()}: {lib.unicache_last_error().decode()}")


def mlp_graph(k, n):
    g = C.c_void_p()
    check(lib.unicache_graph_create(C.byref(g)), "graph_create")

    def tensor(shape, constant=False):
        t = LogicalTensor()
        dims = (C.c_int64 * len(shape))(*shape)
        check(lib.unicache_graph_add_tensor(g, len(shape), dims, int(constant), C.byref(t)), "add_tensor")
        return t

    x, w, b = tensor([UNKNOWN, k]), tensor([k, n], True), tensor([n], True)
    mm, s, y = tensor([UNKNOWN, n]), tensor([UNKNOWN, n]), tensor([UNKNOWN, n])

    def op(kind, ins, outs):
        i = (C.c_uint64 * len(ins))(*[t.id for t in ins])
        o = (C.c_uint64 * len(outs))(*[t.id for t in outs])
        check(lib.unicache_graph_add_op(g, kind, i, len(ins), o, len(outs), 0, 0, None), "add_op")

    op(OP_MATMUL, [x, w], [mm])
    op(OP_ADD, [mm, b], [s])
    op(OP_RELU, [s], [y])
    check(lib.unicache_graph_finalize(g), "finalize")
    part = C.c_void_p()
    check(lib.unicache_graph_get_partition(g, 0, C.byref(part)), "get_partition")
    return g, part, x, w, b


def run(device, engine, stream, part, x, w, b, weights, bias, ms, buffers):
    """Compiles and runs the partition for each batch size; returns the largest error."""
    worst = 0.0
    for m in ms:
        xs = np.random.default_rng(m).standard_normal((m, weights.shape[0]), dtype=np.float32)
        shapes = [(m, weights.shape[0]), weights.shape, bias.shape]
        ndims = (C.c_int32 * 3)(*[len(s) for s in shapes])
        arrays = [(C.c_int64 * len(s))(*s) for s in shapes]
        ptrs = (C.POINTER(C.c_int64) * 3)(*[C.cast(a, C.POINTER(C.c_int64)) for a in arrays])
        cp = C.c_void_p()
        check(lib.unicache_compile(part, 3, ndims, ptrs, engine, C.byref(cp)), f"compile M={m}")
        out_desc = LogicalTensor()
        check(lib.unicache_compiled_partition_get_output(cp, 0, C.byref(out_desc)), "get_output")
        y = np.zeros((m, weights.shape[1]), dtype=np.float32)
        data = [buffers(a) for a in (xs, weights, bias)] + [buffers(y)]
        descs = [x, w, b]
        ins = (Tensor * 3)()
        for i in range(3):
            ins[i].desc, ins[i].data, ins[i].version = descs[i], data[i][0], 1
        ins[0].desc.dims[0] = m
        outs = (Tensor * 1)()
        outs[0].desc, outs[0].data = out_desc, data[3][0]
        check(lib.unicache_compiled_partition_execute(cp, stream, ins, 3, outs, 1),
              f"execute M={m}")
        got = data[3][1]()
        want = np.maximum(xs @ weights + bias, 0)
        worst = max(worst, float(np.max(np.abs(got - want))))
        check(lib.unicache_compiled_partition_destroy(cp), "destroy")
        for d in data:
            d[2]()
    print(f"  {device}: batch sizes {list(ms)}: largest difference from numpy {worst:.2e}")
    return worst


def kernel_stats():
    s = CacheStats()
    check(lib.unicache_get_cache_stats(KERNEL_CACHE, C.byref(s)), "stats")
    return s


def main():
    print(f"unicache {lib.unicache_version().decode()} through its C interface")
    k, n = 64, 32
    rng = np.random.default_rng(7)
    weights = rng.standard_normal((k, n), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    g, part, x, w, b = mlp_graph(k, n)
    ms = (1, 7, 33, 128)
    failed = False

    engine, stream = C.c_void_p(), C.c_void_p()
    status = lib.unicache_engine_create_cpu(0, C.byref(engine))
    if status == UNSUPPORTED:
        print("  cpu: this build has no CPU backend")
    else:
        check(status, "engine_create_cpu")
        check(lib.unicache_stream_create(engine, C.byref(stream)), "stream_create")

        def host(a):  # host memory: the array itself
            return a.ctypes.data, (lambda: a), (lambda: None)

        failed |= run("cpu (oneDNN)", engine, stream, part, x, w, b, weights, bias, ms, host) > 1e-3
        check(lib.unicache_stream_destroy(stream), "stream_destroy")
        check(lib.unicache_engine_destroy(engine), "engine_destroy")

    if not hasattr(lib, "unicache_opencl_engine_create_default"):
        print("  opencl: this build has no OpenCL backend")
    elif lib.unicache_opencl_engine_create_default(C.byref(engine)) != SUCCESS:
        print(f"  opencl: no device ({lib.unicache_last_error().decode()})")
    else:
        check(lib.unicache_stream_create(engine, C.byref(stream)), "stream_create")

        def device_buffer(a):  # a cl_mem holding a copy; read back on demand
            mem = C.c_void_p()
            check(lib.unicache_opencl_buffer_create(engine, a.nbytes, a.ctypes.data, C.byref(mem)),
                  "buffer_create")

            def read():
                out = np.empty_like(a)
                check(lib.unicache_opencl_buffer_read(stream, mem, out.ctypes.data, out.nbytes), "read")
                return out

            return mem.value, read, (lambda: check(lib.unicache_opencl_buffer_release(mem), "release"))

        failed |= run("opencl", engine, stream, part, x, w, b, weights, bias, ms, device_buffer) > 1e-3
        check(lib.unicache_stream_destroy(stream), "stream_destroy")
        check(lib.unicache_engine_destroy(engine), "engine_destroy")

    s = kernel_stats()
    print(f"  kernel cache: {s.misses} misses (kernels built or loaded), {s.hits} hits, {s.entries} entries, "
          f"{s.bytes / 1024:.0f} KB")
    check(lib.unicache_graph_destroy(g), "graph_destroy")
    if failed:
        print("mlp_ctypes: a result differs from numpy", file=sys.stderr)
        return 1
    print("all results match numpy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
