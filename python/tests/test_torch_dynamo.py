"""The torch.compile backend "unicache" (dynamo) on models written the way model
libraries write them (library_style_models: BERT, GPT-2 and Llama code paths):
no more captures than dynamo alone makes, outputs as eager's, every matmul
FLOP in unicache, and nothing run in torch without a warning and a counter.
Skipped without torch >= 2 (dynamo): Debian 12's torch is 1.13, so these run
on a machine with a newer torch (the GPU host; a Debian 13 root)."""
import os
import random
import sys
import unittest
import warnings

try:
    import torch
    import torch._dynamo
except ImportError:
    torch = None

import unicache

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

NO_DYNAMO = "torch >= 2 with dynamo is not installed (Debian 12's python3-torch is 1.13)"


def trace(n, seed, max_batch=8, max_length=96):
    rng = random.Random(seed)
    return [(rng.randint(1, max_batch), rng.randint(1, max_length)) for _ in range(n)]


def relative_difference(got, want):
    return ((got - want).abs().max() / want.abs().max().clamp_min(1.0)).item()


@unittest.skipIf(torch is None, NO_DYNAMO)
class DynamoBackend(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import unicache.torch
        from library_style_models import BertStyle, Gpt2Style, LlamaStyle
        try:
            unicache.Engine.cpu()
        except unicache.Unsupported as e:
            raise unittest.SkipTest(f"no CPU engine: {e.message}") from None
        cls.ut = unicache.torch
        torch.manual_seed(0)
        cls.models = {"bert": BertStyle().eval(), "gpt2": Gpt2Style().eval(), "llama": LlamaStyle().eval()}

    def setUp(self):
        torch._dynamo.reset()
        self.ut._report.reset_statistics()
        quiet = warnings.catch_warnings()  # tests that look for a warning set their own filter
        quiet.__enter__()
        self.addCleanup(quiet.__exit__, None, None, None)
        warnings.simplefilter("ignore", self.ut.FallbackWarning)

    def run_trace(self, model, backend, shapes, **options):
        """(captures, worst relative difference to eager) over `shapes`, from a fresh dynamo."""
        torch._dynamo.reset()
        captured = []

        def counting(gm, example_inputs):
            captured.append(len(captured))
            if backend == "eager":
                return gm.forward
            return self.ut.dynamo_backend(gm, example_inputs)
        compiled = torch.compile(model, backend=counting, **options)
        worst = 0.0
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", self.ut.FallbackWarning)
            for batch, length in shapes:
                ids = torch.randint(0, 100, (batch, length))
                worst = max(worst, relative_difference(compiled(ids), model(ids)))
        return len(captured), worst

    def test_captures_are_dynamos_own_with_dynamic_true_and_by_default(self):
        shapes = trace(40, seed=3)
        for name, model in self.models.items():
            for options in ({"dynamic": True}, {}):
                with self.subTest(model=name, **options):
                    alone, _ = self.run_trace(model, "eager", shapes, **options)
                    ours, worst = self.run_trace(model, "unicache", shapes, **options)
                    self.assertLessEqual(ours, alone, "the backend made dynamo capture again")
                    self.assertLessEqual(worst, 1e-4)

    def test_no_capture_after_the_first_shapes(self):
        # Sizes 1 are dynamo's own specialization: after a batch and a length of
        # 1 and of more than 1 have been seen, no new size captures again.
        first = [(1, 1), (2, 5), (1, 7), (3, 1)]
        later = trace(30, seed=5)
        for name, model in self.models.items():
            with self.subTest(model=name):
                before, _ = self.run_trace(model, "unicache", first)
                self.ut._report.reset_statistics()
                torch._dynamo.reset()
                compiled = torch.compile(model, backend="unicache")
                with torch.no_grad():
                    for batch, length in first:
                        compiled(torch.randint(0, 100, (batch, length)))
                    captured = self.ut.statistics().captures
                    self.assertEqual(captured, before)
                    for batch, length in later:
                        compiled(torch.randint(0, 100, (batch, length)))
                self.assertEqual(self.ut.statistics().captures, captured, "a later shape was captured again")

    def test_outputs_match_eager_at_20_shapes_through_the_plain_call(self):
        # torch.compile(model, backend="unicache") with no options serves every request.
        for name, model in self.models.items():
            with self.subTest(model=name):
                torch._dynamo.reset()
                compiled = torch.compile(model, backend="unicache")
                with torch.no_grad():
                    for batch, length in trace(20, seed=11):
                        ids = torch.randint(0, 100, (batch, length))
                        self.assertLessEqual(relative_difference(compiled(ids), model(ids)), 1e-4,
                                             f"{name} {batch}x{length}")
        stats = self.ut.statistics()
        self.assertEqual((stats.graphs_in_torch, stats.calls_in_torch, stats.recompile_limit_hits), (0, 0, 0))

    def test_explain_shows_every_matmul_flop_in_unicache_and_the_dynamic_dims(self):
        for name, model in self.models.items():
            with self.subTest(model=name):
                report = self.ut.explain(model, torch.randint(0, 100, (2, 9)))
                self.assertEqual(len(report.graphs), 1, str(report))
                self.assertGreaterEqual(report.matmul_flop_share, 0.95, str(report))
                graph = report.graphs[0]
                self.assertGreater(graph.partitions, 0)
                self.assertIn("l_input_ids_[-1,-1]", graph.dynamic_dims, "batch and length are symbolic")
                self.assertIn("torch x", str(report), "ops left to torch are listed with their reasons")
                for reason in graph.torch_reasons:
                    self.assertRegex(reason, r"^\w+: ", "each reason names its op")

    def test_explain_names_why_an_op_stays_in_torch(self):
        class Mixed(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = torch.nn.Linear(8, 8)
                self.b = torch.nn.Linear(8, 8).double()

            def forward(self, x):
                return self.b(torch.relu(self.a(x)).double()).float()
        report = self.ut.explain(Mixed().eval(), torch.randn(2, 3, 8))
        reasons = report.graphs[0].torch_reasons
        self.assertTrue(any(r.startswith("linear: its value is float64") for r in reasons), reasons)
        self.assertAlmostEqual(report.matmul_flop_share, 0.5)

    def test_a_graph_with_nothing_for_unicache_runs_in_torch_and_says_so_once(self):
        model = torch.nn.Linear(8, 8).double().eval()
        compiled = torch.compile(model, backend="unicache")
        with self.assertWarnsRegex(self.ut.FallbackWarning, "has no op unicache runs"):
            compiled(torch.randn(2, 8, dtype=torch.float64))
        with warnings.catch_warnings():
            warnings.simplefilter("error", self.ut.FallbackWarning)  # said once: no second warning
            torch._dynamo.reset()
            torch.compile(model, backend="unicache")(torch.randn(3, 8, dtype=torch.float64))
        self.assertEqual(self.ut.statistics().graphs_without_partitions, 2)

    def test_a_graph_the_backend_cannot_compile_runs_in_torch_never_raises(self):
        from unittest import mock
        model = self.models["bert"]
        ids = torch.randint(0, 100, (2, 7))
        with mock.patch("unicache.torch._plan.Lowerer.finish", side_effect=RuntimeError("forced")):
            compiled = torch.compile(model, backend="unicache")
            with torch.no_grad(), self.assertWarnsRegex(self.ut.FallbackWarning, "runs in torch.*forced"):
                got = compiled(ids)
        with torch.no_grad():
            self.assertLessEqual(relative_difference(got, model(ids)), 1e-6)
        self.assertEqual(self.ut.statistics().graphs_in_torch, 1)

    def test_dynamos_recompile_limit_is_said_and_counted(self):
        # With automatic dynamic shapes off, every batch size is a new capture: at
        # dynamo's limit it runs the function in eager for good, which unicache says.
        config = torch._dynamo.config
        limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
        with mock_config(config, **{limit: 2, "automatic_dynamic_shapes": False}), torch.no_grad():
            compiled = torch.compile(model, backend="unicache")
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always", self.ut.FallbackWarning)
                for batch in (1, 2, 3, 4):
                    x = torch.randn(batch, 8)
                    self.assertLessEqual(relative_difference(compiled(x), model(x)), 1e-5)
        said = [str(w.message) for w in seen if issubclass(w.category, self.ut.FallbackWarning)]
        self.assertTrue(any("recompile limit" in m and "run in torch eager" in m for m in said), said)
        self.assertTrue(any("captured a function again" in m for m in said), said)
        stats = self.ut.statistics()
        self.assertGreaterEqual(stats.recompile_limit_hits, 1)
        self.assertGreaterEqual(stats.recaptures, 1)

    def test_one_graph_serving_two_modules_uses_each_ones_parameters(self):
        # Two layers of one class compiled apart share dynamo's graph: each call
        # runs with its own layer's weights, in unicache.
        torch.manual_seed(2)
        first, second = (torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()).eval() for _ in range(2))
        x = torch.randn(4, 8)
        with torch.no_grad():
            for layer in (first, second, first):
                self.assertLessEqual(relative_difference(torch.compile(layer, backend="unicache")(x), layer(x)), 1e-5)
        self.assertEqual(self.ut.statistics().calls_in_torch, 0)

    def test_a_number_dynamo_passes_as_a_tensor_is_folded_and_checked_per_call(self):
        # A float input that changed becomes a 0-d tensor read with .item() (recent
        # dynamo does so for a module's float attributes from the start): lowering
        # sees the number; a call with another number compiles again, never reuses it.
        class Scaled(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(8, 8)

            def forward(self, x, eps, scale):
                return F.layer_norm(self.linear(x) * scale, (8,), eps=eps)
        import torch.nn.functional as F
        from unicache.torch._dynamo import prepare
        from unicache.torch._plan import plan
        from unicache.torch._capture import symbolic_info
        from unicache.torch._lowering import op_name
        left_to_torch = []  # per capture that read a number with .item(): the ops lowering refused

        def inspecting(gm, example_inputs):
            if any(n.op == "call_method" and n.target == "item" for n in gm.graph.nodes):
                graph, _, _ = prepare(gm, example_inputs)
                p = plan(gm, graph, symbolic_info(gm, graph))
                left_to_torch.append({op_name(n) for n in p.refused})
            return self.ut.dynamo_backend(gm, example_inputs)
        model = Scaled().eval()
        compiled = torch.compile(model, backend=inspecting, dynamic=True)
        x = torch.randn(3, 8)
        with torch.no_grad():
            for eps, scale in ((1e-5, 0.5), (1e-2, 0.25), (1e-2, 2.0), (1e-5, 0.5)):
                self.assertLessEqual(relative_difference(compiled(x, eps, scale), model(x, eps, scale)), 1e-5,
                                     f"eps {eps} scale {scale}")
        self.assertTrue(left_to_torch, "dynamo passed no number as a tensor: the test checks nothing")
        for refused in left_to_torch:
            self.assertFalse({"item", "mul", "layer_norm"} & refused, f"folded numbers still in torch: {refused}")
        stats = self.ut.statistics()
        self.assertEqual((stats.calls_in_torch, stats.graphs_in_torch), (0, 0))


class SdpaBlock(torch.nn.Module if torch is not None else object):
    """One attention block as model libraries write it: q, k and v projections viewed
    per head and swapped, sdpa with a mask or causal, the result swapped back."""

    def __init__(self, hidden=64, heads=4, mask="bool", causal=False, rope=False):
        super().__init__()
        self.heads, self.mask, self.causal, self.rope = heads, mask, causal, rope
        self.q, self.k, self.v = (torch.nn.Linear(hidden, hidden) for _ in range(3))
        self.o = torch.nn.Linear(hidden, hidden)

    def forward(self, x, keep):
        batch, length, hidden = x.shape
        q, k, v = (p(x).view(batch, length, self.heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
        if self.rope:  # arithmetic on the [B, H, L, D] layout (Llama's rotary embedding): no swap to skip
            q, k = q * 0.5 + 0.25, k * 2.0 - 0.5
        mask = None
        if self.mask == "bool":
            mask = keep[:, None, None, :]
        elif self.mask == "float":
            mask = (1.0 - keep[:, None, None, :].float()) * torch.finfo(torch.float32).min
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)
        return self.o(a.transpose(1, 2).reshape(batch, length, hidden))


@unittest.skipIf(torch is None, NO_DYNAMO)
class FusedAttentionOnCuda(unittest.TestCase):
    """On a GPU, sdpa is one Attention partition (no scores in memory); where q, k, v
    and the result are swapped per head, the swaps go too (layout blhd)."""

    @classmethod
    def setUpClass(cls):
        import unicache.torch
        available, reason = unicache.cuda_available()
        if not (torch.cuda.is_available() and available):
            raise unittest.SkipTest(f"no CUDA device for torch and unicache: {reason or 'torch has no CUDA'}")
        cls.ut = unicache.torch

    def setUp(self):
        torch._dynamo.reset()
        self.ut._report.reset_statistics()

    def graphs_and_worst(self, model, shapes, pad):
        """The unicache graphs (as JSON) dynamo's captures lowered to, and the worst
        relative difference to eager over `shapes`."""
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(self.ut._dynamo._compile(gm, example_inputs)[0]._lowered.graph.to_json())
            return self.ut.dynamo_backend(gm, example_inputs)
        compiled = torch.compile(model, backend=backend, dynamic=True)
        worst = 0.0
        with torch.no_grad():
            for batch, length in shapes:
                x = torch.randn(batch, length, 64, device="cuda")
                keep = torch.ones(batch, length, dtype=torch.bool, device="cuda")
                if pad:
                    keep[0, length // 2 + 1:] = False  # the first sequence padded
                worst = max(worst, relative_difference(compiled(x, keep), model(x, keep)))
        return graphs, worst

    def test_sdpa_is_one_attention_partition_in_each_layout(self):
        shapes = [(1, 1), (2, 5), (3, 17), (4, 70), (2, 129), (5, 33)]
        for mask, causal, rope, layout in (("bool", False, False, "blhd"), ("float", False, False, "blhd"),
                                           (None, True, False, "blhd"), ("bool", True, False, "blhd"),
                                           ("bool", False, True, "bhld")):
            with self.subTest(mask=mask, causal=causal, rope=rope):
                torch._dynamo.reset()
                model = SdpaBlock(mask=mask, causal=causal, rope=rope).cuda().eval()
                graphs, worst = self.graphs_and_worst(model, shapes, pad=mask is not None)
                self.assertLessEqual(worst, 1e-4)
                self.assertTrue(graphs)
                for text in graphs:
                    self.assertEqual(text.count('"kind": "Attention"'), 1, text)
                    self.assertIn(f'"layout": "{layout}"', text)
                    self.assertIn(f'"causal": {"true" if causal else "false"}', text)
                    self.assertNotIn('"kind": "Softmax"', text)
                    if layout == "blhd":
                        self.assertNotIn('"kind": "Transpose"', text, "the per-head swaps are read through")

    def test_library_style_models_run_attention_fused_and_match_eager(self):
        from library_style_models import BertStyle, Gpt2Style, LlamaStyle
        torch.manual_seed(0)
        for name, model in (("bert", BertStyle()), ("gpt2", Gpt2Style()), ("llama", LlamaStyle())):
            with self.subTest(model=name):
                torch._dynamo.reset()
                model = model.cuda().eval()
                graphs = []

                def backend(gm, example_inputs):
                    graphs.append(self.ut._dynamo._compile(gm, example_inputs)[0]._lowered.graph.to_json())
                    return self.ut.dynamo_backend(gm, example_inputs)
                compiled = torch.compile(model, backend=backend, dynamic=True)
                with torch.no_grad():
                    for batch, length in trace(20, seed=13):
                        ids = torch.randint(0, 100, (batch, length), device="cuda")
                        self.assertLessEqual(relative_difference(compiled(ids), model(ids)), 1e-4,
                                             f"{name} {batch}x{length}")
                self.assertTrue(graphs)
                for text in graphs:
                    self.assertEqual(text.count('"kind": "Attention"'), 2, f"{name}: one per layer")
                    self.assertNotIn('"kind": "Softmax"', text)
        stats = self.ut.statistics()
        self.assertEqual((stats.graphs_in_torch, stats.calls_in_torch), (0, 0))


class mock_config:
    """dynamo config values set for a block, then restored."""

    def __init__(self, config, **values):
        self.config, self.values, self.saved = config, values, {}

    def __enter__(self):
        for key, value in self.values.items():
            self.saved[key] = getattr(self.config, key)
            setattr(self.config, key, value)

    def __exit__(self, *exc):
        for key, value in self.saved.items():
            setattr(self.config, key, value)


if __name__ == "__main__":
    unittest.main()
