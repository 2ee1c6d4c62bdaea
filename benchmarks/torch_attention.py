#!/usr/bin/env python3
"""unicache's Attention kernel against torch's scaled_dot_product_attention, device time.

    PYTHONPATH=python UNICACHE_LIBRARY=... python3 benchmarks/torch_attention.py [--calls 20]

For each case (batch, length, heads, head size, a padding mask or causal;
both layouts: q, k, v given as [B, H, L, D], and as [B, L, H, D] swapped per
head inside the module, as model libraries write it), one module that calls
F.scaled_dot_product_attention runs in eager torch and through
torch.compile(backend="unicache") with static shapes (a head size that
dynamo leaves symbolic keeps attention as MatMul, Softmax, MatMul). It
prints the mean device time per call from torch.profiler (every kernel the
call launched: eager's fused kernel and its copies, unicache's attention
kernel), their ratio, the largest difference over the output's largest
magnitude, and the kernels' names. fp32, TF32 off. Needs torch >= 2 with
CUDA (77 otherwise).
"""
import argparse
import sys

CASES = ((7, 469, 12, 64, False), (6, 90, 12, 64, False), (8, 512, 12, 64, False), (8, 512, 16, 64, True),
         (4, 256, 16, 128, True), (2, 33, 12, 64, False))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20, help="calls profiled per case")
    args = parser.parse_args()
    import torch
    if int(torch.__version__.split(".")[0]) < 2 or not torch.cuda.is_available():
        print(f"torch_attention: skipped: needs torch >= 2 with CUDA; this is torch {torch.__version__}"
              f"{'' if torch.cuda.is_available() else ' without CUDA'}", file=sys.stderr)
        return 77
    import torch._dynamo
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile
    import unicache.torch as ut
    torch.backends.cuda.matmul.allow_tf32 = False
    ut.register_dynamo_backend()

    class Attention(torch.nn.Module):
        def __init__(self, swapped: bool, causal: bool) -> None:
            super().__init__()
            self.swapped, self.causal = swapped, causal

        def forward(self, q, k, v, mask):
            if self.swapped:
                q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)
            return a.transpose(1, 2) if self.swapped else a

    def device_us(call):
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            for _ in range(args.calls):
                call()
            torch.cuda.synchronize()
        events = [e for e in p.key_averages() if e.device_time_total > 0]
        return sum(e.device_time_total for e in events) / args.calls, sorted({e.key[:40] for e in events})

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for batch, length, heads, size, causal in CASES:
        for swapped in (False, True):
            shape = (batch, length, heads, size) if swapped else (batch, heads, length, size)
            q, k, v = (torch.randn(shape, device="cuda") for _ in range(3))
            mask = None
            if not causal:  # the first sequence padded from its middle
                mask = torch.zeros(batch, 1, 1, length, device="cuda")
                mask[0, 0, 0, length // 2:] = float("-inf")
            module = Attention(swapped, causal).cuda()
            torch._dynamo.reset()
            compiled = torch.compile(module, backend="unicache", dynamic=False)
            with torch.no_grad():
                want = module(q, k, v, mask)
                error = ((compiled(q, k, v, mask) - want).abs().max() / want.abs().max()).item()
                eager, eager_kernels = device_us(lambda: module(q, k, v, mask).contiguous())
                ours, our_kernels = device_us(lambda: compiled(q, k, v, mask))
            print(f"{batch}x{length} heads {heads} size {size}{' causal' if causal else ' mask'} "
                  f"{'blhd' if swapped else 'bhld'}: eager {eager:.1f} us, unicache {ours:.1f} us, "
                  f"ratio {ours / eager:.2f}, difference {error:.1e}; eager {eager_kernels}; unicache {our_kernels}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
