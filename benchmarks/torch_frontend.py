#!/usr/bin/env python3
"""The BERT-base encoder of bert_encoder.py over the serving trace of
bench_dynamic_shapes, through torch eager, torch.compile(dynamic=True) and
unicache.torch, each mode in a fresh process.

    python3 benchmarks/torch_frontend.py [--device cpu|cuda] [--requests 300] [--seed 7]
        [--layers 12] [--max-seq 512] [--modes eager,unicache_cold,unicache_warm,...]
        [--check 20] [--rounds 1] [--json FILE]

Modes, in this order, each a fresh process started by this one:
  eager           torch eager
  compile_cold    torch.compile(dynamic=True), TORCHINDUCTOR_CACHE_DIR an empty folder
  compile_warm    the same, with the folder compile_cold filled
  unicache_cold   unicache.torch.compile, UNICACHE_PERSISTENT_CACHE_DIR an empty folder
  unicache_warm   the same, with the store unicache_cold filled
(torch.compile needs torch >= 2; without it those modes are left out.)
--rounds N runs the modes N times in turn, each round with empty caches of
its own, and reports each mode's median, over the rounds, of its ratio to
the eager process of the same round: the host's speed differs between
processes, so one pair of processes says little.
The unicache package is byte-compiled first, as pip install does.
Per mode: the first request (unicache's compile() included, as torch.compile's
first call includes its compile), the time from starting the process to the
first result, the same from when `import torch` returned (building the model
and moving it to the device included), and p50 / p99 over the other requests. Each request is queued
as its users run it: the call, then one synchronize on CUDA. Every request
has a shape of the trace (batch x length); unicache's kernel builds are
counted. --check N compares unicache's outputs with eager's for the trace's
first N shapes (max abs difference over the output's largest magnitude).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("eager", "compile_cold", "compile_warm", "unicache_cold", "unicache_warm")


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * (len(ordered) - 1)))))]


def child(args) -> None:
    """One mode in this (fresh) process; writes its figures to args.child_json."""
    import torch
    imported = time.perf_counter()  # Python and torch loaded: what every mode pays alike
    sys.path.insert(0, HERE)
    from bert_encoder import BertEncoder, make_trace
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = BertEncoder(args.layers, args.hidden, args.heads, args.ffn).eval().to(device)
    trace = make_trace(args.requests, args.seed, max_seq=args.max_seq)
    hidden = model.hidden
    largest = max(b * s for b, s in trace)
    base = torch.randn(largest * hidden, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    engine = None
    result = {"mode": args.child}
    times = []
    with torch.no_grad():
        for i, (batch, length) in enumerate(trace):
            x = base[: batch * length * hidden].view(batch, length, hidden)
            t0 = time.perf_counter()
            if i == 0:
                if args.child == "eager":
                    run = model
                elif args.child.startswith("compile"):
                    run = torch.compile(model, dynamic=True)
                else:
                    import unicache.torch
                    # A small example: compile() runs the module twice on it (and on
                    # one a little larger) to see which dimensions follow the input.
                    example = torch.randn(1, 8, hidden, device=device)
                    run = unicache.torch.compile(model, [example], dynamic_dims={0: (0, 1)})
                    engine = run.engine
                    built_before = (0, 0)
            run(x)
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
            if i == 0:
                result["first_result_unix"] = time.time()
                result["after_import_to_first_result_ms"] = (time.perf_counter() - imported) * 1e3
                if engine is not None:
                    stats = engine.build_stats()
                    built_before = (stats.built, stats.loaded)
                    result["first_request_builds"] = stats.built
                    result["first_request_loads"] = stats.loaded
    rest = times[1:] or times
    result.update(first_request_ms=times[0], p50_ms=statistics.median(rest), p99_ms=percentile(rest, 99),
                  mean_ms=statistics.fmean(rest), requests_run=len(times),
                  distinct_shapes=len(set(trace)))
    # The slowest requests after the first: what sets p99 (request index, batch, length, ms).
    slowest = sorted(range(1, len(times)), key=lambda i: times[i], reverse=True)[:6]
    result["slowest"] = [[i, trace[i][0], trace[i][1], round(times[i], 3)] for i in slowest]
    if engine is not None:
        stats = engine.build_stats()
        result["later_builds"] = stats.built - built_before[0]
        result["later_loads"] = stats.loaded - built_before[1]
        result["partitions"] = run.partitions
        result["signatures"] = run.signatures
    with open(args.child_json, "w") as f:
        json.dump(result, f)


def check(args) -> dict:
    """unicache against eager on the trace's first `args.check` shapes, in this process."""
    import torch
    sys.path.insert(0, HERE)
    import unicache.torch
    from bert_encoder import BertEncoder, make_trace
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = BertEncoder(args.layers, args.hidden, args.heads, args.ffn).eval().to(device)
    trace = make_trace(args.check, args.seed, max_seq=args.max_seq)
    worst = 0.0
    with torch.no_grad():
        fast = unicache.torch.compile(model, [torch.randn(1, 8, model.hidden, device=device)],
                                      dynamic_dims={0: (0, 1)})
        for batch, length in trace:
            x = torch.randn(batch, length, model.hidden, device=device)
            want, got = model(x), fast(x)
            ratio = ((got - want).abs().max() / want.abs().max()).item()
            worst = max(worst, ratio)
    return {"shapes": len(trace), "max_abs_diff_over_scale": worst, "tolerance": 1e-4, "ok": worst <= 1e-4}


def device_name(device: str) -> str:
    import torch
    if device == "cuda":
        return torch.cuda.get_device_name()
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} CPUs)"


def byte_compile_unicache() -> None:
    """The unicache package's bytecode, written once as `pip install` writes it, so
    that each fresh process loads it rather than compiling the package's source
    (torch's, installed, is compiled already; from a source tree, and with
    PYTHONDONTWRITEBYTECODE set, nothing would write it)."""
    import compileall
    import importlib.util
    spec = importlib.util.find_spec("unicache")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        compileall.compile_dir(folder, quiet=1)


def run_mode(args, mode: str, env: dict) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    command = [sys.executable, os.path.abspath(__file__), "--child", mode, "--child-json", out,
               "--device", args.device, "--requests", str(args.requests), "--seed", str(args.seed),
               "--layers", str(args.layers), "--max-seq", str(args.max_seq), "--hidden", str(args.hidden),
               "--heads", str(args.heads), "--ffn", str(args.ffn)]
    start = time.time()
    run = subprocess.run(command, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        print(f"torch_frontend: mode {mode} failed:\n{run.stderr[-4000:]}", file=sys.stderr)
        return {"mode": mode, "failed": run.stderr[-2000:]}
    with open(out) as f:
        result = json.load(f)
    os.unlink(out)
    result["fresh_process_to_first_result_ms"] = (result.pop("first_result_unix") - start) * 1e3
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768, help="smaller for a smoke run (with --heads, --ffn)")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--ffn", type=int, default=3072)
    parser.add_argument("--max-seq", type=int, default=512)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--check", type=int, default=0, help="compare with eager on this many shapes first")
    parser.add_argument("--rounds", type=int, default=1, help="run the modes this many times in turn")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    import torch
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if int(torch.__version__.split(".")[0]) < 2:
        modes = [m for m in modes if not m.startswith("compile")]
    report = {"benchmark": "torch_frontend", "backend": args.device, "device": device_name(args.device),
              "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "model": f"BERT encoder, {args.layers} layers, hidden {args.hidden}, {args.heads} heads, FFN {args.ffn}, "
                       "fp32, no mask",
              "requests": args.requests, "seed": args.seed, "max_seq": args.max_seq,
              "trace": "B ~ uniform{1..8}, L = longest of B lognormal(ln 48, 0.9) lengths, clamped to max_seq",
              "modes": []}
    if args.device == "cuda":
        report["tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
    if args.check:
        report["check"] = check(args)
        print(f"check: {report['check']}", flush=True)
    byte_compile_unicache()
    for round_ in range(args.rounds):
        run_round(args, modes, report, round_)
    if args.rounds > 1:
        report["ratios_to_eager"] = ratios_to_eager(report["modes"])
        for mode, r in report["ratios_to_eager"].items():
            print(f"{mode:14s} median over {r['rounds']} rounds, against eager's process of the same round: " +
                  "  ".join(f"{key.replace('_ms', '')} {r[key]['median']:.2f}x ({r[key]['min']:.2f}-{r[key]['max']:.2f})"
                            for key in RATIO_KEYS), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if all("failed" not in m for m in report["modes"]) and report.get("check", {}).get("ok", True) else 1


RATIO_KEYS = ("p50_ms", "p99_ms", "fresh_process_to_first_result_ms", "after_import_to_first_result_ms")


def ratios_to_eager(results: list) -> dict:
    """Per mode, the median (and range) over rounds of its figures over eager's in that round."""
    eager = {m["round"]: m for m in results if m["mode"] == "eager" and "failed" not in m}
    out: dict = {}
    for m in results:
        base = eager.get(m["round"])
        if m["mode"] == "eager" or base is None or "failed" in m:
            continue
        for key in RATIO_KEYS:
            out.setdefault(m["mode"], {}).setdefault(key, []).append(m[key] / base[key])
    summary = {}
    for mode, by_key in out.items():
        summary[mode] = {"rounds": len(by_key["p50_ms"])}
        for key, values in by_key.items():
            summary[mode][key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return summary


def run_round(args, modes: list, report: dict, round_: int) -> None:
    """Every mode once, in order, the warm modes over the caches their cold modes filled."""
    with tempfile.TemporaryDirectory() as inductor, tempfile.TemporaryDirectory() as store:
        for mode in modes:
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=inductor, UNICACHE_PERSISTENT_CACHE_DIR=store)
            result = run_mode(args, mode, env)
            result["round"] = round_
            report["modes"].append(result)
            if args.json:  # after every mode: a run cut short keeps what it measured
                with open(args.json, "w") as f:
                    json.dump(report, f, indent=1)
            if "failed" not in result:
                print(f"{mode:14s} first {result['first_request_ms']:9.1f} ms  fresh process to first result "
                      f"{result['fresh_process_to_first_result_ms']:9.1f} ms (after imports "
                      f"{result['after_import_to_first_result_ms']:8.1f} ms)  p50 {result['p50_ms']:8.2f} ms  "
                      f"p99 {result['p99_ms']:8.2f} ms" +
                      (f"  builds later {result['later_builds']}" if "later_builds" in result else ""),
                      flush=True)


if __name__ == "__main__":
    sys.exit(main())
