#!/usr/bin/env python3
"""bench_dynamic_shapes' workload through torch on the first CUDA device: the
baseline its GPU modes are compared against in docs/benchmarks.md.

Replays a trace written by `bench_dynamic_shapes --shapes-out FILE` (the rows
M of each request): per request, the BERT layer's six matmuls with bias (Q, K,
V and output projections H x H, FFN H -> F with GELU(erf), F -> H), fp32 with
TF32 off. Latency per request is host wall time, like bench_dynamic_shapes'.

Two runs of the trace, one after the other:
- queued (the headline, p50_ms...): every op queued on torch's current stream
  and one torch.cuda.synchronize() per request, as PyTorch serves a request
  and as bench_dynamic_shapes waits (once per request);
- sync_each (p50_ms_sync_each...): a synchronize after every matmul, the
  figure earlier versions of this script reported.

    python3 scripts/torch_dynamic_shapes.py FILE [--hidden 768] [--ffn 3072] [--json OUT]
"""
import argparse
import json
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--ffn", type=int, default=3072)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = [int(line) for line in open(args.trace) if line.strip() and not line.startswith("#")]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    h, f = args.hidden, args.ffn
    gen = torch.Generator(device="cuda").manual_seed(7)
    steps = [(h, h, -1, False), (h, h, -1, False), (h, h, -1, False), (h, h, 2, False), (h, f, 3, True), (f, h, 4, False)]
    weights = [(torch.rand(k, n, device="cuda", generator=gen) * 0.1 - 0.05,
                torch.rand(n, device="cuda", generator=gen) * 0.1 - 0.05) for k, n, _, _ in steps]
    x_all = torch.rand(max(rows), h, device="cuda", generator=gen)
    torch.cuda.synchronize()

    def replay(sync_each: bool) -> list:
        latency = []
        for m in rows:
            start = time.perf_counter()
            x = x_all[:m]
            outs = []
            for (k, n, source, gelu), (w, b) in zip(steps, weights):
                y = torch.addmm(b, x if source < 0 else outs[source], w)
                if gelu:
                    y = torch.nn.functional.gelu(y)
                if sync_each:
                    torch.cuda.synchronize()
                outs.append(y)
            torch.cuda.synchronize()
            latency.append((time.perf_counter() - start) * 1e3)
        return latency

    def summary(latency: list, suffix: str) -> dict:
        ordered = sorted(latency)
        return {
            "first_request_ms" + suffix: latency[0],
            "p50_ms" + suffix: ordered[len(ordered) // 2],
            "p99_ms" + suffix: ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
            "mean_ms" + suffix: sum(latency) / len(latency),
            "max_ms" + suffix: ordered[-1],
        }

    queued = replay(sync_each=False)
    sync_each = replay(sync_each=True)
    result = {
        "benchmark": "torch_dynamic_shapes",
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "requests": len(rows),
        **summary(queued, ""),
        **summary(sync_each, "_sync_each"),
    }
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1)


if __name__ == "__main__":
    main()
