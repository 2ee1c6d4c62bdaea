#!/usr/bin/env python3
"""GFLOP/s of torch.matmul in fp32 with TF32 off, on the first CUDA device:
the reference bench_gpu_gemm is compared against in docs/benchmarks.md.

    python3 scripts/torch_matmul.py [n ...]      (default: 1024 2048 4096)
"""
import json
import sys

if "-h" in sys.argv[1:] or "--help" in sys.argv[1:]:
    print("usage:" + __doc__.split("\n\n")[1].rstrip() + "\n\n" + __doc__.split("\n\n")[0])
    sys.exit(0)

import torch  # noqa: E402 (after --help, which needs no torch)


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


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
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
