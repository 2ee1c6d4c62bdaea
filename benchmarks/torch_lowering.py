#!/usr/bin/env python3
"""Where torch.compile(backend="unicache")'s own time goes at a model's first capture.

    PYTHONPATH=python UNICACHE_LIBRARY=... python3 benchmarks/torch_lowering.py --model hf-bert [--profile]

Builds one of torch_frontend.py's model-library models (random weights, CUDA
when there is one), compiles it with dynamic=True and runs three requests. For
each it prints the request's time, the dynamo backend's total (backend_ms),
the partition compiles the request made and, for the request that captured,
the backend's phases: prepare (dynamo's graph copied, parameters lifted,
numbers folded), symbolic_info, plan (rewrite, lowering, finish, steps) and
build (the CompiledModule, its forward written). Run it twice with the same
UNICACHE_PERSISTENT_CACHE_DIR for the warm store's figures. --profile then
captures once more under cProfile and prints the heaviest functions.
Needs torch >= 2 and the model library (transformers).
"""
import argparse
import cProfile
import io
import os
import pstats
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("hf-bert", "hf-gpt2", "hf-llama"), default="hf-bert")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--profile", action="store_true", help="also a cProfile of a second capture")
    args = parser.parse_args()
    sys.path.insert(0, HERE)
    import torch
    if int(torch.__version__.split(".")[0]) < 2:
        print(f"torch_lowering: skipped: needs torch >= 2 (dynamo); this is torch {torch.__version__}",
              file=sys.stderr)
        return 77
    import torch._dynamo
    from torch_frontend import hf_model
    import unicache.torch as ut
    from unicache.torch import _dynamo, _lowering, _plan, _report

    phases = {}

    def timed(owner, attribute, label):
        function = getattr(owner, attribute)

        def wrapper(*a, **k):
            started = time.perf_counter()
            try:
                return function(*a, **k)
            finally:
                phases[label] = phases.get(label, 0.0) + (time.perf_counter() - started) * 1e3
        setattr(owner, attribute, wrapper)

    for owner, attribute, label in ((_dynamo, "prepare", "prepare"), (_dynamo, "symbolic_info", "symbolic_info"),
                                    (_plan, "plan", "plan"), (_plan, "rewrite", "plan.rewrite"),
                                    (_lowering.Lowerer, "finish", "plan.finish"), (_plan, "_steps", "plan.steps"),
                                    (_plan, "build", "build"), (_plan, "CompiledModule", "build.module")):
        timed(owner, attribute, label)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    torch.manual_seed(0)
    model, vocab = hf_model(args.model, args.layers)
    model = model.eval().to(device)
    ut.register_dynamo_backend()
    extra = {} if args.model == "hf-bert" else {"use_cache": False}

    def request(batch, length):
        return {"input_ids": torch.randint(0, vocab, (batch, length), device=device), **extra}

    with torch.no_grad():
        model(**request(2, 16))
        sync()
        run = torch.compile(model, backend="unicache", dynamic=True)
        for batch, length in ((3, 40), (5, 77), (2, 130)):
            compiled_before = _report.statistics().partition_compile_ms
            started = time.perf_counter()
            run(**request(batch, length))
            sync()
            ms = (time.perf_counter() - started) * 1e3
            s = _report.statistics()
            print(f"{args.model} {batch}x{length}: {ms:.1f} ms; backend_ms {s.backend_ms:.1f}; partition compiles "
                  f"{s.partition_compile_ms - compiled_before:.1f} ms" +
                  ("; " + ", ".join(f"{k} {v:.1f}" for k, v in phases.items()) if phases else ""), flush=True)
            phases.clear()
        if args.profile:
            torch._dynamo.reset()
            run = torch.compile(model, backend="unicache", dynamic=True)
            profile = cProfile.Profile()
            backend = _dynamo._backend

            def profiled(*a):
                profile.enable()
                try:
                    return backend(*a)
                finally:
                    profile.disable()
            _dynamo._backend = profiled
            run(**request(3, 40))
            sync()
            for key, count in (("cumulative", 60), ("tottime", 30)):
                out = io.StringIO()
                pstats.Stats(profile, stream=out).sort_stats(key).print_stats(count)
                print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
