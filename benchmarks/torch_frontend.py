#!/usr/bin/env python3
"""A model over the serving trace of bench_dynamic_shapes, through torch eager,
torch.compile and unicache.torch, each mode in a fresh process.

    python3 benchmarks/torch_frontend.py [--device cpu|cuda] [--model bert-encoder|hf-bert|hf-gpt2|hf-llama]
        [--requests 300] [--seed 7] [--layers 12] [--max-seq 512] [--dynamic true|default]
        [--modes eager,unicache_cold,unicache_warm,...] [--check 20] [--rounds 1] [--json FILE]

Models: bert-encoder, the BERT-base encoder of bert_encoder.py (hidden states
in); hf-bert, hf-gpt2 and hf-llama, the model library's (Hugging Face
transformers) BertModel, GPT2Model and LlamaModel built from their configs
with random weights (nothing is downloaded; Llama at hidden 1024, 12 layers),
token ids in, fp32, eval(), no KV cache; --layers sets their layer count too.
Modes, in this order, each a fresh process started by this one:
  eager           torch eager
  compile_cold    torch.compile(dynamic=True), TORCHINDUCTOR_CACHE_DIR an empty folder
  compile_warm    the same, with the folder compile_cold filled
  dynamo_eager    torch.compile(backend="eager"): dynamo's capture alone, no compiler
  unicache_cold   unicache.torch.compile (torch.fx; bert-encoder only),
                  UNICACHE_PERSISTENT_CACHE_DIR an empty folder
  unicache_warm   the same, with the store unicache_cold filled
  dynamo_unicache_cold  torch.compile(backend="unicache"), an empty store
  dynamo_unicache_warm  the same, with the store dynamo_unicache_cold filled
  interleaved     eager, dynamo_eager and torch.compile(backend="unicache") in one
                  process, each request of the trace run by all three in turn (the
                  order rotating), p50 / p99 over requests 21 on: the steady state
                  without the spread between processes (the host's speed differed
                  by up to 1.5x between fresh processes of the same mode); the
                  store starts empty, so unicache's adaptive GEMMs are tuned
                  during the run
  interleaved_warm  the same over the store interleaved filled (tuning choices and
                  kernels kept): the steady state of a process after the first
--dynamic: the torch.compile modes with dynamic=True (the default) or with
dynamo's own default (automatic dynamic shapes); compile_* always use dynamic=True.
(torch.compile needs torch >= 2; without it its modes are left out.)
The dynamo modes count captures (graphs dynamo handed to the backend), those
after the 20th request, and unicache's fallbacks (unicache.torch.statistics()).
Their first request is taken apart: the setup (torch.compile's call, and
importing unicache), the backend's calls, and the captured graphs' first run
(timed around the callables the backend returned). unicache's own part of
its first result is importing unicache.torch, the backend call, and its
graphs' first run beyond that of dynamo alone's process in the same round;
the rest (dynamo's import and capture) is the same work in both.
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
MODES = ("eager", "compile_cold", "compile_warm", "dynamo_eager", "unicache_cold", "unicache_warm",
         "dynamo_unicache_cold", "dynamo_unicache_warm", "interleaved", "interleaved_warm")
INTERLEAVED = ("interleaved", "interleaved_warm")
MODELS = ("bert-encoder", "hf-bert", "hf-gpt2", "hf-llama")


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * (len(ordered) - 1)))))]


class Workload:
    """A model on a device and how a request of (batch, length) is made and read."""

    def __init__(self, args, device) -> None:
        import torch
        sys.path.insert(0, HERE)
        torch.manual_seed(0)
        self.device = device
        if args.model == "bert-encoder":
            from bert_encoder import BertEncoder
            self.model = BertEncoder(args.layers, args.hidden, args.heads, args.ffn).eval().to(device)
            self.hidden = self.model.hidden
            self.vocab = 0
        else:
            self.model, self.vocab = hf_model(args.model, args.layers)
            self.model = self.model.eval().to(device)

    def request(self, batch: int, length: int, base=None):
        """(positional inputs, keyword inputs) of one request."""
        import torch
        if self.vocab == 0:
            if base is not None:
                return (base[: batch * length * self.hidden].view(batch, length, self.hidden),), {}
            return (torch.randn(batch, length, self.hidden, device=self.device),), {}
        ids = torch.randint(0, self.vocab, (batch, length), device=self.device)
        return (), {"input_ids": ids, "use_cache": False} if self.decoder else {"input_ids": ids}

    @property
    def decoder(self) -> bool:
        return getattr(self.model.config, "is_decoder", False) or self.model.config.model_type in ("gpt2", "llama")

    @staticmethod
    def output(result):
        return result if not hasattr(result, "last_hidden_state") else result.last_hidden_state


def hf_model(name: str, layers: int):
    """The model library's model from its config (random weights), and its vocabulary size."""
    import transformers
    if name == "hf-bert":
        config = transformers.BertConfig(num_hidden_layers=layers)
        return transformers.BertModel(config, add_pooling_layer=False), config.vocab_size
    if name == "hf-gpt2":
        config = transformers.GPT2Config(n_layer=layers)
        return transformers.GPT2Model(config), config.vocab_size
    config = transformers.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=layers,
                                      num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=1024)
    return transformers.LlamaModel(config), config.vocab_size


class GraphCalls:
    """Time spent inside the captured graphs' calls while `timing` is set: in a
    dynamo mode's first request, the part of the first result that is the
    graphs' first run (for unicache: partition compiles, first launches, the
    ops left to torch), apart from dynamo's capture and the backend call."""

    def __init__(self) -> None:
        self.ms = 0.0
        self.timing = True
        self.import_ms = 0.0  # importing unicache.torch, where the mode does

    def wrap(self, function):
        def call(*args):
            if not self.timing:
                return function(*args)
            started = time.perf_counter()
            try:
                return function(*args)
            finally:
                self.ms += (time.perf_counter() - started) * 1e3
        return call


def compiled_for(args, workload, mode: str, graph_calls: GraphCalls):
    """The callable a mode runs, and a function of its counters (or None). The
    dynamo modes' captured graphs are timed by graph_calls."""
    import torch
    model, device = workload.model, workload.device
    dynamic = True if args.dynamic == "true" else None
    if mode == "eager":
        return model, None
    if mode.startswith("compile"):
        return torch.compile(model, dynamic=True), None
    if mode == "dynamo_eager":
        captured = []

        def counting(gm, example_inputs):
            captured.append(1)
            return graph_calls.wrap(gm.forward)
        return torch.compile(model, backend=counting, dynamic=dynamic), lambda: {"captures": len(captured)}
    started = time.perf_counter()
    import unicache.torch
    graph_calls.import_ms = (time.perf_counter() - started) * 1e3
    if mode.startswith("dynamo_unicache"):
        # The backend that backend="unicache" names, its result timed.
        def timed(gm, example_inputs):
            return graph_calls.wrap(unicache.torch.dynamo_backend(gm, example_inputs))
        run = torch.compile(model, backend=timed, dynamic=dynamic)
        return run, lambda: dict(vars(unicache.torch.statistics()))
    # A small example: compile() runs the module twice on it (and on one a
    # little larger) to see which dimensions follow the input.
    example = torch.randn(1, 8, workload.hidden, device=device)
    run = unicache.torch.compile(model, [example], dynamic_dims={0: (0, 1)})
    return run, lambda: {"partitions": run.partitions, "signatures": run.signatures}


def child(args) -> None:
    """One mode in this (fresh) process; writes its figures to args.child_json."""
    import torch
    imported = time.perf_counter()  # Python and torch loaded: what every mode pays alike
    device = torch.device(args.device)
    workload = Workload(args, device)
    trace = make_trace(args.requests, args.seed, max_seq=args.max_seq)
    base = None
    if workload.vocab == 0:
        largest = max(b * s for b, s in trace)
        base = torch.randn(largest * workload.hidden, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    engine = None
    counters = None
    graph_calls = GraphCalls()
    result = {"mode": args.child}
    times = []
    with torch.no_grad():
        for i, (batch, length) in enumerate(trace):
            inputs, kwargs = workload.request(batch, length, base)
            t0 = time.perf_counter()
            if i == 0:
                run, counters = compiled_for(args, workload, args.child, graph_calls)
                result["setup_ms"] = (time.perf_counter() - t0) * 1e3  # unicache's import included
                engine = getattr(run, "engine", None)
                built_before = (0, 0)
            run(*inputs, **kwargs)
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
            if i == 0:
                result["first_result_unix"] = time.time()
                result["after_import_to_first_result_ms"] = (time.perf_counter() - imported) * 1e3
                graph_calls.timing = False
                if args.child.startswith("dynamo"):
                    result["first_graph_calls_ms"] = graph_calls.ms
                    first_counters = counters()
                    result["first_backend_ms"] = first_counters.get("backend_ms", 0.0)
                    result["unicache_import_ms"] = graph_calls.import_ms
                if engine is not None:
                    stats = engine.build_stats()
                    built_before = (stats.built, stats.loaded)
                    result["first_request_builds"] = stats.built
                    result["first_request_loads"] = stats.loaded
            if i == 19 and counters is not None:
                result["counters_at_20"] = counters()
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
    if counters is not None:
        result["counters"] = counters()
        if "captures" in result["counters"] and "counters_at_20" in result:
            result["captures_after_20"] = result["counters"]["captures"] - result["counters_at_20"]["captures"]
    with open(args.child_json, "w") as f:
        json.dump(result, f)


# Requests the interleaved mode leaves out of p50 / p99 (captures, first compiles).
INTERLEAVED_WARM_UP = 20


def interleaved(args) -> None:
    """The interleaved mode in this (fresh) process; writes its figures to args.child_json."""
    import copy
    import torch
    import unicache.torch
    device = torch.device(args.device)
    workload = Workload(args, device)
    dynamic = True if args.dynamic == "true" else None
    unicache.torch.register_dynamo_backend()
    runs = {"eager": workload.model,
            "dynamo_eager": torch.compile(copy.deepcopy(workload.model), backend="eager", dynamic=dynamic),
            "dynamo_unicache": torch.compile(copy.deepcopy(workload.model), backend="unicache", dynamic=dynamic)}
    names = list(runs)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times: dict = {name: [] for name in names}
    trace = make_trace(args.requests, args.seed, max_seq=args.max_seq)
    with torch.no_grad():
        for i, (batch, length) in enumerate(trace):
            inputs, kwargs = workload.request(batch, length)
            sync()
            for name in names[i % 3:] + names[:i % 3]:
                t0 = time.perf_counter()
                runs[name](*inputs, **kwargs)
                sync()
                times[name].append((time.perf_counter() - t0) * 1e3)
    result = {"mode": args.child, "requests_run": len(trace), "measured_from_request": INTERLEAVED_WARM_UP + 1}
    for name in names:
        rest = times[name][INTERLEAVED_WARM_UP:] or times[name]
        result[name] = {"p50_ms": statistics.median(rest), "p99_ms": percentile(rest, 99)}
    for name in names[1:]:
        result[name]["p50_over_eager"] = result[name]["p50_ms"] / result["eager"]["p50_ms"]
        result[name]["p99_over_eager"] = result[name]["p99_ms"] / result["eager"]["p99_ms"]
    result["dynamo_unicache"]["p50_over_dynamo_eager"] = (result["dynamo_unicache"]["p50_ms"] /
                                                          result["dynamo_eager"]["p50_ms"])
    result["counters"] = dict(vars(unicache.torch.statistics()))
    with open(args.child_json, "w") as f:
        json.dump(result, f)


def make_trace(requests: int, seed: int, max_seq: int):
    sys.path.insert(0, HERE)
    from bert_encoder import make_trace as draw
    return draw(requests, seed, max_seq=max_seq)


def check(args) -> dict:
    """unicache against eager on the trace's first `args.check` shapes, in this process
    (through torch.compile for the model library's models), and for those the share of
    matmul FLOPs explain() finds in unicache at a middle shape."""
    import torch
    import unicache.torch
    device = torch.device(args.device)
    workload = Workload(args, device)
    trace = make_trace(args.check, args.seed, max_seq=args.max_seq)
    worst = 0.0
    out = {}
    with torch.no_grad():
        if workload.vocab == 0:
            fast = unicache.torch.compile(workload.model, [torch.randn(1, 8, workload.hidden, device=device)],
                                          dynamic_dims={0: (0, 1)})
        else:
            unicache.torch.register_dynamo_backend()
            fast = torch.compile(workload.model, backend="unicache", dynamic=True if args.dynamic == "true" else None)
        for batch, length in trace:
            inputs, kwargs = workload.request(batch, length)
            want, got = workload.output(workload.model(*inputs, **kwargs)), workload.output(fast(*inputs, **kwargs))
            ratio = ((got - want).abs().max() / want.abs().max()).item()
            worst = max(worst, ratio)
        if workload.vocab:
            inputs, kwargs = workload.request(4, 128)
            report = unicache.torch.explain(workload.model, *inputs, **kwargs)
            out["matmul_flop_share"] = report.matmul_flop_share
            out["explain"] = str(report)
            print(report, flush=True)
    out.update({"shapes": len(trace), "max_abs_diff_over_scale": worst, "tolerance": 1e-4, "ok": worst <= 1e-4})
    return out


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
               "--heads", str(args.heads), "--ffn", str(args.ffn), "--model", args.model, "--dynamic", args.dynamic]
    start = time.time()
    run = subprocess.run(command, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        print(f"torch_frontend: mode {mode} failed:\n{run.stderr[-4000:]}", file=sys.stderr)
        return {"mode": mode, "failed": run.stderr[-2000:]}
    with open(out) as f:
        result = json.load(f)
    os.unlink(out)
    if "first_result_unix" in result:
        result["fresh_process_to_first_result_ms"] = (result.pop("first_result_unix") - start) * 1e3
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--model", default="bert-encoder", choices=MODELS)
    parser.add_argument("--dynamic", default="true", choices=("true", "default"),
                        help="the dynamo modes' dynamic= (True, or dynamo's automatic dynamic shapes)")
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
        interleaved(args) if args.child in INTERLEAVED else child(args)
        return 0
    import torch
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if int(torch.__version__.split(".")[0]) < 2:
        modes = [m for m in modes if not m.startswith(("compile", "dynamo")) and m not in INTERLEAVED]
    if args.model != "bert-encoder":  # torch.fx cannot trace the model library's models
        modes = [m for m in modes if m not in ("unicache_cold", "unicache_warm")]
    report = {"benchmark": "torch_frontend", "backend": args.device, "device": device_name(args.device),
              "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "model": f"BERT encoder, {args.layers} layers, hidden {args.hidden}, {args.heads} heads, FFN {args.ffn}, "
                       "fp32, no mask" if args.model == "bert-encoder" else
                       f"{args.model} (transformers, from config, random weights), {args.layers} layers, fp32",
              "dynamic": args.dynamic,
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
    report["own_first_result"] = own_first_result(report["modes"])
    for mode, r in report["own_first_result"].items():
        print(f"{mode:14s} unicache's own part of the first result (import, backend call, graphs' first run "
              f"beyond dynamo alone's), median over {r['own_ms']['rounds']} rounds: {r['own_ms']['median']:.1f} ms "
              f"({r['own_ms']['min']:.1f} to {r['own_ms']['max']:.1f}); first request minus dynamo alone's: "
              f"{r['first_request_minus_dynamo_alone_ms']['median']:.0f} ms "
              f"({r['first_request_minus_dynamo_alone_ms']['min']:.0f} to "
              f"{r['first_request_minus_dynamo_alone_ms']['max']:.0f})", flush=True)
    for kind in INTERLEAVED:
        together = [m for m in report["modes"] if m["mode"] == kind and "failed" not in m]
        if not together:
            continue
        report[f"{kind}_medians"] = {
            f"{name}_{key}": statistics.median(m[name][key] for m in together)
            for name, key in (("dynamo_eager", "p50_over_eager"), ("dynamo_eager", "p99_over_eager"),
                              ("dynamo_unicache", "p50_over_eager"), ("dynamo_unicache", "p99_over_eager"),
                              ("dynamo_unicache", "p50_over_dynamo_eager"))}
        print(f"{kind}, median over {len(together)} processes: " +
              "  ".join(f"{k} {v:.2f}x" for k, v in report[f"{kind}_medians"].items()), flush=True)
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
        if m["mode"] == "eager" or m["mode"] in INTERLEAVED or base is None or "failed" in m:
            continue
        for key in RATIO_KEYS:
            out.setdefault(m["mode"], {}).setdefault(key, []).append(m[key] / base[key])
    summary = {}
    for mode, by_key in out.items():
        summary[mode] = {"rounds": len(by_key["p50_ms"])}
        for key, values in by_key.items():
            summary[mode][key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return summary


def own_first_result(results: list) -> dict:
    """Per unicache dynamo mode, unicache's own part of its first result, against
    dynamo alone's process of the same round: importing unicache, the backend
    call, and its graphs' first run beyond dynamo alone's. dynamo's capture and
    torch.compile's own setup (importing dynamo), the same work in both, are
    left out, and with them most of the spread of the processes' speed that the
    whole first result carries. Also the plain difference of the two first
    results. Medians and ranges over the rounds."""
    alone = {m["round"]: m for m in results if m["mode"] == "dynamo_eager" and "first_graph_calls_ms" in m}
    parts: dict = {}
    for m in results:
        base = alone.get(m["round"])
        if not m["mode"].startswith("dynamo_unicache") or base is None or "first_graph_calls_ms" not in m:
            continue
        own = (m["unicache_import_ms"] + m["first_backend_ms"] +
               m["first_graph_calls_ms"] - base["first_graph_calls_ms"])
        entry = parts.setdefault(m["mode"], {"own_ms": [], "first_request_minus_dynamo_alone_ms": []})
        entry["own_ms"].append(own)
        entry["first_request_minus_dynamo_alone_ms"].append(m["first_request_ms"] - base["first_request_ms"])
    return {mode: {key: {"median": statistics.median(v), "min": min(v), "max": max(v), "rounds": len(v)}
                   for key, v in by_key.items()} for mode, by_key in parts.items()}


def run_round(args, modes: list, report: dict, round_: int) -> None:
    """Every mode once, in order, the warm modes over the caches their cold modes filled."""
    with tempfile.TemporaryDirectory() as inductor, tempfile.TemporaryDirectory() as store, \
            tempfile.TemporaryDirectory() as dynamo_store, tempfile.TemporaryDirectory() as interleaved_store:
        for mode in modes:
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=inductor,
                       UNICACHE_PERSISTENT_CACHE_DIR=dynamo_store if mode.startswith("dynamo") else
                       interleaved_store if mode in INTERLEAVED else store)
            result = run_mode(args, mode, env)
            result["round"] = round_
            report["modes"].append(result)
            if args.json:  # after every mode: a run cut short keeps what it measured
                with open(args.json, "w") as f:
                    json.dump(report, f, indent=1)
            if mode in INTERLEAVED and "failed" not in result:
                print(f"{mode:16s} " + "  ".join(
                    f"{name} p50 {result[name]['p50_ms']:.2f} ms p99 {result[name]['p99_ms']:.2f} ms" +
                    (f" ({result[name]['p50_over_eager']:.2f}x, {result[name]['p99_over_eager']:.2f}x eager's)"
                     if name != "eager" else "") for name in ("eager", "dynamo_eager", "dynamo_unicache")),
                      flush=True)
            elif "failed" not in result:
                print(f"{mode:14s} first {result['first_request_ms']:9.1f} ms  fresh process to first result "
                      f"{result['fresh_process_to_first_result_ms']:9.1f} ms (after imports "
                      f"{result['after_import_to_first_result_ms']:8.1f} ms)  p50 {result['p50_ms']:8.2f} ms  "
                      f"p99 {result['p99_ms']:8.2f} ms" +
                      (f"  builds later {result['later_builds']}" if "later_builds" in result else "") +
                      (f"  first request: setup {result['setup_ms']:.1f} ms, backend {result['first_backend_ms']:.1f} ms, "
                       f"graphs' first run {result['first_graph_calls_ms']:.1f} ms"
                       if "first_graph_calls_ms" in result else "") +
                      (f"  captures {result['counters']['captures']} ({result.get('captures_after_20', 0)} after "
                       "request 20)" if "captures" in result.get("counters", {}) else "") +
                      (f"  backend {result['counters']['backend_ms']:.0f} ms, partition compiles "
                       f"{result['counters']['partition_compile_ms']:.0f} ms, in torch: graphs "
                       f"{result['counters']['graphs_in_torch']}, calls {result['counters']['calls_in_torch']}"
                       if "backend_ms" in result.get("counters", {}) else ""),
                      flush=True)


if __name__ == "__main__":
    sys.exit(main())
