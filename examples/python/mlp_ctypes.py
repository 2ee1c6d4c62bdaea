#!/usr/bin/env python3
"""An MLP block from Python, through the unicache package (ctypes over libunicache_c) and numpy.

Builds y = relu(x @ W + b) with W and b constant, compiles it for several
batch sizes on the CPU (oneDNN) and on the default OpenCL device, runs each,
compares with numpy, and prints what the kernel cache did.

Uses the installed package (pip install ./python), else this checkout's
python/unicache; the library comes from UNICACHE_BUILD_DIR or this
checkout's build/ (see the package's docstring). Exits 1 if a result is
wrong, 77 (skipped) without numpy.
"""
import sys
from pathlib import Path

try:
    import numpy as np
except ImportError:
    print("mlp_ctypes: skipped: numpy is not installed (Debian: python3-numpy)", file=sys.stderr)
    sys.exit(77)

try:
    import unicache
except ImportError:  # not installed: this checkout's package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    import unicache
from unicache import OpKind, OpenCLBuffer

BATCH_SIZES = (1, 7, 33, 128)


def mlp_graph(k, n):
    """relu(x @ W + b) with x of any batch size: one fused partition."""
    g = unicache.Graph()
    x, w, b = g.add_tensor([-1, k]), g.add_tensor([k, n], constant=True), g.add_tensor([n], constant=True)
    mm, s, y = g.add_tensor([-1, n]), g.add_tensor([-1, n]), g.add_tensor([-1, n])
    g.add_op(OpKind.MATMUL, [x, w], [mm])
    g.add_op(OpKind.ADD, [mm, b], [s])
    g.add_op(OpKind.RELU, [s], [y])
    g.finalize()
    return g


def run(device, engine, part, weights, bias, to_device, from_device):
    """Compiles and runs the partition for each batch size; returns the largest difference from numpy."""
    stream = engine.stream()
    constants = [to_device(weights), to_device(bias)]
    worst = 0.0
    for m in BATCH_SIZES:
        x = np.random.default_rng(m).standard_normal((m, weights.shape[0]), dtype=np.float32)
        cp = part.compile([x.shape, weights.shape, bias.shape], engine)  # a seen shape is a lookup
        inputs, y = [to_device(x)] + constants, to_device(np.zeros((m, weights.shape[1]), np.float32))
        cp.execute(stream, inputs, [y])
        stream.wait()  # on a GPU, execute() only enqueues: inputs stay alive until here
        got = from_device(stream, y, (m, weights.shape[1]))
        worst = max(worst, float(np.max(np.abs(got - np.maximum(x @ weights + bias, 0)))))
    print(f"  {device}: batch sizes {list(BATCH_SIZES)}: largest difference from numpy {worst:.2e}")
    return worst


def main():
    print(f"unicache {unicache.library_version()} from Python (package {unicache.__version__})")
    k, n = 64, 32
    rng = np.random.default_rng(7)
    weights = rng.standard_normal((k, n), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    part = mlp_graph(k, n).partitions[0]
    failed = False

    try:
        cpu = unicache.Engine.cpu()
    except unicache.Unsupported:
        print("  cpu: this build has no CPU backend")
    else:  # host memory: the arrays themselves, no copy
        failed |= run("cpu (oneDNN)", cpu, part, weights, bias, lambda a: a, lambda stream, a, shape: a) > 1e-3

    try:
        gpu = unicache.Engine.opencl_default()
    except unicache.Unsupported:
        print("  opencl: this build has no OpenCL backend")
    except unicache.Error as e:
        print(f"  opencl: no device ({e.message})")
    else:  # cl_mem buffers holding copies, read back after the stream's work
        failed |= run("opencl", gpu, part, weights, bias, lambda a: OpenCLBuffer(gpu, a),
                      lambda stream, buffer, shape: buffer.to_numpy(stream, shape)) > 1e-3

    s = unicache.cache_stats(unicache.Cache.KERNEL)
    print(f"  kernel cache: {s.misses} misses (kernels built or loaded), {s.hits} hits, {s.entries} entries, "
          f"{s.bytes / 1024:.0f} KB")
    if failed:
        print("mlp_ctypes: a result differs from numpy", file=sys.stderr)
        return 1
    print("all results match numpy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
