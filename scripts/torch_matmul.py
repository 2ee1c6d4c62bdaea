#!/usr/bin/env python3
"""GFLOP/s of torch.matmul in fp32 with TF32 off, on the first CUDA device:
the reference bench_gpu_gemm is compared against in docs/benchmarks.md.

    python3 scripts/torch_matmul.py [n ...]      (default: 1024 2048 4096)
    python3 scripts/torch_matmul.py --linear MxNxK[,MxNxK...]

With --linear: the device time of torch.addmm(bias, A, B) (a Linear, as
bench_gemm_tiles runs it) per shape, the best of three runs of 20 launches
between two CUDA events, in microseconds: what bench_gemm_tiles compares to.
"""
import json
import sys

if "-h" in sys.argv[1:] or "--help" in sys.argv[1:]:
    print("usage:" + __doc__.split("\n\n")[1].rstrip() + "\n\n" + __doc__.split("\n\n")[0])
    sys.exit(0)


def parse_linear(args):
    """--linear's MxNxK list, or exit with the bad one named (before torch loads)."""
    shapes = []
    for s in ",".join(args).split(","):
        parts = s.split("x") if s else []
        if len(parts) != 3 or not all(p.isdigit() and 0 < int(p) <= 1 << 20 for p in parts):
            sys.exit(f"torch_matmul.py: bad shape '{s}' (MxNxK, each 1..1048576)")
        shapes.append(tuple(int(p) for p in parts))
    return shapes


LINEAR_SHAPES = parse_linear(sys.argv[2:]) if sys.argv[1:2] == ["--linear"] else []

import torch  # noqa: E402 (after --help and the shapes, which need no torch)


def measure(n: int, iterations: int = 20) -> float:
    a = torch.rand(n, n, device="cuda", dtype=torch.float32)
    b = torch.rand(n, n, device="cuda", dtype=torch.float32)
    for _ in range(3):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iterations):
        start.record()
        torch.matmul(a, b)
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    times.sort()
    return 2.0 * n**3 / times[len(times) // 2] / 1e9


def linear_us(m: int, n: int, k: int, reps: int = 20) -> float:
    a = torch.rand(m, k, device="cuda", dtype=torch.float32)
    b = torch.rand(k, n, device="cuda", dtype=torch.float32)
    bias = torch.rand(n, device="cuda", dtype=torch.float32)
    for _ in range(3):
        torch.addmm(bias, a, b)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(3):
        start.record()
        for _ in range(reps):
            torch.addmm(bias, a, b)
        stop.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(stop) * 1e3 / reps)
    return best


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if sys.argv[1:2] == ["--linear"]:
        shapes = LINEAR_SHAPES
        result = {
            "benchmark": "torch.addmm fp32, TF32 off, device us",
            "device": torch.cuda.get_device_name(0),
            "torch": torch.__version__,
            "us": {f"{m}x{n}x{k}": round(linear_us(m, n, k), 2) for m, n, k in shapes},
        }
        print(json.dumps(result))
        return
    sizes = [int(x) for x in sys.argv[1:]] or [1024, 2048, 4096]
    result = {
        "benchmark": "torch.matmul fp32, TF32 off",
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "gflops": {str(n): round(measure(n), 1) for n in sizes},
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
