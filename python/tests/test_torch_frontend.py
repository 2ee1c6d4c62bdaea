"""unicache.torch on the CPU against torch eager: the BERT encoder of
benchmarks/bert_encoder.py at shapes of the serving trace, new shapes that
build nothing, ops the IR lacks left to torch, and bad inputs answered with
exceptions. Skipped without torch (Debian: python3-torch)."""
import os
import subprocess
import sys
import unittest
import weakref

try:
    import torch
except ImportError:
    torch = None

import unicache

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "benchmarks"))


# What the probes below saw: each tensor `remember` was given, weakly, and
# whether it was still alive when `check_freed` ran after it.
_remembered = []
_alive_at_check = []


def remember(x):
    """A torch step: its input weakly noted; a new tensor out (no view of it)."""
    _remembered.append(weakref.ref(x))
    return x.clone()


def check_freed(x):
    """A torch step after remember's: whether remember's input is still alive."""
    _alive_at_check.append(_remembered[-1]() is not None)
    return x.clone()


if torch is not None:
    torch.fx.wrap("remember")
    torch.fx.wrap("check_freed")


def close_to(test, got, want, what):
    """Max abs difference <= 1e-4 of the output's scale (its largest magnitude)."""
    scale = want.abs().max().item()
    diff = (got - want).abs().max().item()
    test.assertLessEqual(diff, 1e-4 * max(scale, 1.0), f"{what}: max abs diff {diff:.3g} at scale {scale:.3g}")


@unittest.skipIf(torch is None, "torch is not installed (Debian: python3-torch)")
class TorchFrontend(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import unicache.torch
        from bert_encoder import BertEncoder, make_trace
        try:
            unicache.Engine.cpu()
        except unicache.Unsupported as e:
            raise unittest.SkipTest(f"no CPU engine: {e.message}") from None
        cls.ut, cls.make_trace = unicache.torch, staticmethod(make_trace)
        torch.manual_seed(0)
        cls.small = BertEncoder(layers=2, hidden=64, heads=4, ffn=128).eval()
        cls.fast_small = unicache.torch.compile(cls.small, [torch.randn(2, 8, 64)], dynamic_dims={0: (0, 1)})

    def test_bert_base_matches_eager(self):
        from bert_encoder import BertEncoder
        torch.manual_seed(1)
        model = BertEncoder().eval()  # 12 layers, hidden 768: the benchmark's model
        fast = self.ut.compile(model, [torch.randn(1, 8, 768)], dynamic_dims={0: (0, 1)})
        self.assertEqual(fast.partitions, 12 * 15, "per layer: Q, K, V, their 3 head splits, scores, softmax, "
                         "context, head merge, projection+residual, LayerNorm, FFN up+GELU, FFN down+residual, "
                         "LayerNorm")
        for batch, length in ((1, 8), (2, 17), (3, 5)):
            x = torch.randn(batch, length, 768)
            with torch.no_grad():
                want = model(x)
            close_to(self, fast(x), want, f"BERT-base {batch}x{length}")

    def test_the_encoder_matches_eager_at_20_shapes_of_the_trace(self):
        for batch, length in self.make_trace(20, seed=7, max_seq=96):
            x = torch.randn(batch, length, 64)
            with torch.no_grad():
                want = self.small(x)
            close_to(self, self.fast_small(x), want, f"{batch}x{length}")

    def test_everything_but_views_runs_in_unicache(self):
        # Attention's head split and merge (permute, contiguous) are Transpose
        # ops: torch runs only views and size arithmetic, no copy of its own.
        ran_in_torch = {name.rstrip("_0123456789") for name in self.fast_small.torch_nodes}
        self.assertLessEqual(ran_in_torch, {"size", "getitem", "add", "view"})

    def test_new_batch_sizes_build_no_kernels(self):
        # A child process in the agnostic kernel mode, where nothing is built in
        # the background: after lengths and row counts have been seen once, new
        # batch sizes at those lengths build no kernel at all.
        code = (
            "import torch, unicache.torch as ut\n"
            "from bert_encoder import BertEncoder\n"
            "torch.manual_seed(0)\n"
            "m = BertEncoder(layers=2, hidden=64, heads=4, ffn=128).eval()\n"
            "f = ut.compile(m, [torch.randn(2, 8, 64)], dynamic_dims={0: (0, 1)})\n"
            "for b in (1, 2, 4, 8, 16):\n"
            "    f(torch.randn(b, 8, 64)); f(torch.randn(b, 24, 64))\n"
            "before = f.engine.build_stats().built\n"
            "for b in (3, 5, 6, 7, 9, 11, 13):\n"
            "    for s in (8, 24):\n"
            "        x = torch.randn(b, s, 64)\n"
            "        assert (f(x) - m(x)).abs().max().item() < 1e-4\n"
            "print(f.engine.build_stats().built - before, f.signatures)\n")
        env = dict(os.environ, UNICACHE_KERNEL_SHAPES="agnostic",
                   PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), sys.path[0]]))
        with torch.no_grad():
            run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        self.assertEqual(run.returncode, 0, run.stderr)
        built, signatures = run.stdout.split()
        self.assertEqual(int(signatures), 24)
        self.assertEqual(int(built), 0, "14 new shapes built kernels")

    def test_a_repeated_shape_compiles_nothing_more(self):
        x = torch.randn(3, 11, 64)
        self.fast_small(x)
        compiles = self.fast_small.compiles
        self.fast_small(torch.randn(3, 11, 64))
        self.assertEqual(self.fast_small.compiles, compiles)

    def test_new_shapes_keep_nothing_the_garbage_collector_walks(self):
        # A serving process meets a new shape at most requests. What it keeps per
        # shape must not be objects the cyclic collector tracks: they add up to
        # full collections, which walk every object of the process (100-170 ms
        # with torch on CUDA). Keeping the C handles and descriptions as Python
        # objects kept ~300 per shape.
        import gc
        with torch.no_grad():
            for length in range(40, 43):
                self.fast_small(torch.randn(2, length, 64))
            gc.collect()
            gc.collect()
            before, compiles = len(gc.get_objects()), self.fast_small.compiles
            for length in range(43, 63):
                self.fast_small(torch.randn(2, length, 64))
            gc.collect()
            gc.collect()
            kept = len(gc.get_objects()) - before
        self.assertGreaterEqual(self.fast_small.compiles - compiles, 20 * 8)  # every shape compiled its structures
        self.assertLess(kept, 20 * 10, f"{kept} tracked objects kept by 20 new shapes")

    def test_the_compiled_table_keeps_at_most_max_compiled_and_stays_correct(self):
        import unicache.torch._runtime as runtime
        fast = self.ut.compile(self.small, [torch.randn(2, 8, 64)], dynamic_dims={0: (0, 1)})
        self.assertEqual(fast.max_compiled, runtime.MAX_COMPILED)
        fast.max_compiled = 12  # fewer than one shape's partitions: entries go while a call runs
        with torch.no_grad():
            for length in (5, 9, 5, 13, 9):
                x = torch.randn(2, length, 64)
                close_to(self, fast(x), self.small(x), f"length {length}")
                self.assertLessEqual(fast.kept, 12)
        self.assertGreater(fast.compiles, fast.kept)  # dropped ones compiled again

    def test_ops_the_ir_lacks_run_in_torch(self):
        class Odd(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

            def forward(self, x):
                h = torch.exp(self.a(x)) - 1.0  # exp: not in the IR (- 1.0 is an Add)
                return torch.relu(self.b(h.flip(-1))) * 2.0 + torch.cumsum(h, dim=-1)

        torch.manual_seed(2)
        model = Odd().eval()
        fast = self.ut.compile(model, [torch.randn(4, 16)])
        self.assertGreaterEqual(fast.partitions, 2)
        self.assertTrue({"exp", "flip", "cumsum"} <= set(fast.torch_nodes), fast.torch_nodes)
        for batch in (1, 5, 9):
            x = torch.randn(batch, 16)
            with torch.no_grad():
                close_to(self, fast(x), model(x), f"batch {batch}")

    def test_the_forward_drops_each_value_after_its_last_use(self):
        class Chain(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

            def forward(self, x):
                h = self.a(x)  # a partition's output, read only by remember
                kept = remember(h)
                return self.b(check_freed(kept))

        torch.manual_seed(4)
        model = Chain().eval()
        fast = self.ut.compile(model, [torch.randn(2, 16)])
        self.assertEqual(fast.torch_nodes, ["remember", "check_freed"])
        _remembered.clear()
        _alive_at_check.clear()
        x = torch.randn(5, 16)
        with torch.no_grad():
            close_to(self, fast(x), model(x), "the chain")
        # The compiled run dropped h before check_freed; eager (second) kept it.
        self.assertEqual(_alive_at_check, [False, True])

    def test_an_intermediate_torch_reads_is_kept(self):
        class Branch(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = torch.nn.Linear(8, 8)

            def forward(self, x):
                h = self.a(x)  # read by GELU (fusable) and by torch's exp
                return torch.nn.functional.gelu(h) + torch.exp(h)

        torch.manual_seed(3)
        model = Branch().eval()
        fast = self.ut.compile(model, [torch.randn(3, 8)])
        x = torch.randn(6, 8)
        with torch.no_grad():
            close_to(self, fast(x), model(x), "branch")

    def test_in_place_ops_and_in_place_modules_stay_torchs_and_are_seen(self):
        class Masked(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.q, self.k, self.fc = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
                self.act = torch.nn.ReLU(inplace=True)

            def forward(self, x):
                s = torch.matmul(self.q(x), self.k(x).transpose(-1, -2)) / 4.0
                s.masked_fill_(s > 0.5, -1e9)  # read by nothing: kept because it changes s
                h = self.fc(x)
                a = self.act(h)  # changes h too: eager's a + h is 2 * relu(h)
                return torch.softmax(s, dim=-1), a + h

        torch.manual_seed(4)
        model = Masked().eval()
        fast = self.ut.compile(model, [torch.randn(2, 5, 8)], dynamic_dims={0: (0, 1)})
        for shape in ((2, 5, 8), (3, 7, 8)):
            x = torch.randn(*shape)
            with torch.no_grad():
                want = model(x)
                got = fast(x)
            for g, w, what in zip(got, want, ("masked softmax", "in-place relu")):
                close_to(self, g, w, f"{what} {shape}")

    def test_permutes_and_transposes_are_transpose_ops(self):
        class Heads(torch.nn.Module):
            def forward(self, x, y):
                b, s = x.size(0), x.size(1)
                q = x.view(b, s, 2, 4).transpose(1, 2)  # HF's newer head split
                k = torch.permute(y.view(b, s, 2, 4), (0, -2, 1, 3))
                scores = torch.matmul(q, k.permute(0, 1, 3, 2))  # a swap of the last two: the MatMul's flag
                same = x.permute(0, 1, 2)  # the identity: no op at all
                return scores.permute(3, 1, 0, 2).contiguous(), torch.relu(same), torch.tanh(y.transpose(0, 2))

        fast = self.ut.compile(Heads().eval(), [torch.randn(2, 5, 8), torch.randn(2, 5, 8)],
                               dynamic_dims={0: (0, 1), 1: (0, 1)})
        ran_in_torch = {name.rstrip("_0123456789") for name in fast.torch_nodes}
        self.assertLessEqual(ran_in_torch, {"size", "view"}, fast.torch_nodes)
        for b, s in ((2, 5), (3, 7), (1, 1)):
            x, y = torch.randn(b, s, 8), torch.randn(b, s, 8)
            with torch.no_grad():
                want = Heads()(x, y)
                got = fast(x, y)
            for g, w, what in zip(got, want, ("scores permuted", "identity", "tanh of a transpose")):
                close_to(self, g, w, f"{what} {b}x{s}")

    def test_a_permute_stays_a_torch_view_where_something_changes_in_place(self):
        class Cache(torch.nn.Module):
            def forward(self, x, y):
                w = y.permute(2, 0, 1)  # a view of y: the write below shows through it
                y.mul_(2.0)
                return torch.relu(w), y

        fast = self.ut.compile(Cache().eval(), [torch.randn(2, 5, 8), torch.randn(2, 5, 8)])
        self.assertIn("permute", fast.torch_nodes)
        x, y = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
        with torch.no_grad():
            want = Cache()(x, y.clone())
            got = fast(x, y.clone())
        for g, w, what in zip(got, want, ("relu of the view", "the tensor changed")):
            close_to(self, g, w, what)

    def test_a_transpose_a_matmul_folds_and_another_op_reads_runs_for_both(self):
        class Both(torch.nn.Module):
            def forward(self, q, k):
                kt = k.transpose(-1, -2)
                return torch.matmul(q, kt), torch.relu(kt)

        q, k = torch.randn(3, 4, 8), torch.randn(3, 6, 8)
        fast = self.ut.compile(Both().eval(), [q, k])
        with torch.no_grad():
            for g, w in zip(fast(q, k), Both()(q, k)):
                close_to(self, g, w, "matmul and relu of one transpose")

    def test_a_replaced_parameter_is_the_one_used(self):
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()).eval()
        fast = self.ut.compile(model, [torch.randn(2, 8)])
        x = torch.randn(3, 8)
        fast(x)
        model[0].weight = torch.nn.Parameter(torch.randn(8, 8))
        with torch.no_grad():
            close_to(self, fast(x), model(x), "after the weight was replaced")
        model[0].weight = torch.nn.Parameter(torch.randn(8, 8, dtype=torch.float64))
        with self.assertRaises(unicache.InvalidTensorType) as caught:
            fast(x)
        self.assertIn("compile again", str(caught.exception))

    def test_a_changed_parameter_is_used(self):
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
        fast = self.ut.compile(model, [torch.randn(2, 8)])
        x = torch.randn(2, 8)
        fast(x)
        with torch.no_grad():
            model[0].weight.mul_(-1.0)
            close_to(self, fast(x), model(x), "after the weight changed in place")

    def test_bad_inputs_raise_clear_exceptions(self):
        f = self.fast_small
        with self.assertRaises(unicache.InvalidTensorType) as caught:
            f(torch.randn(2, 8, 64, dtype=torch.float64))
        self.assertIn("float64", str(caught.exception))
        with self.assertRaises(unicache.InvalidArgument) as caught:
            f(torch.randn(2, 64, 8).transpose(1, 2))
        self.assertIn("contiguous", str(caught.exception))
        with self.assertRaises(unicache.InvalidArgument) as caught:
            f(torch.randn(2, 8, 65))
        self.assertIn("[-1, -1, 64]", str(caught.exception))
        with self.assertRaises(unicache.InvalidArgument):
            f(torch.randn(2, 8, 64), torch.randn(2, 8, 64))
        with self.assertRaises(unicache.InvalidTensorType):
            f([[1.0]])

    def test_an_untraceable_module_names_fx_reason(self):
        class Loop(torch.nn.Module):
            def forward(self, x):
                for _ in x.size():  # iterating over a traced size
                    x = x + 1
                return x

        with self.assertRaises(self.ut.TraceFailed) as caught:
            self.ut.compile(Loop().eval(), [torch.randn(2, 3)])
        self.assertIn("torch.fx could not trace Loop", str(caught.exception))
        self.assertIsInstance(caught.exception, unicache.Error)

    def test_compile_leaves_the_garbage_collector_as_it_found_it(self):
        import gc
        seen = []

        class Probe(torch.nn.Module):  # records the collector's state when torch.fx traces it
            def forward(self, x):
                seen.append(gc.isenabled())
                return torch.relu(x)

        class Fixed(torch.nn.Module):  # fails at compile(): its batch, named dynamic, cannot change
            def forward(self, x):
                torch._assert(x.size(0) == 2, "a batch of 2 only")
                return torch.relu(x)

        self.assertTrue(gc.isenabled())
        self.ut.compile(Probe().eval(), [torch.randn(2, 4)])
        self.assertEqual(seen, [False], "the collector is off while compile() traces")
        self.assertTrue(gc.isenabled())
        with self.assertRaises(unicache.InvalidArgument) as caught:
            self.ut.compile(Fixed().eval(), [torch.randn(2, 4)])
        self.assertIn("a batch of 2 only", str(caught.exception))
        self.assertIn("While executing", str(caught.exception), "the node that failed is named")
        self.assertTrue(gc.isenabled(), "on again after a failure")
        gc.disable()
        try:
            self.ut.compile(Probe().eval(), [torch.randn(2, 4)])
            self.assertFalse(gc.isenabled(), "left off where the caller turned it off")
        finally:
            gc.enable()

    def test_explain_reports_the_fx_capture(self):
        # torch 1.x has no dynamo: explain() reports what unicache.torch.compile's
        # torch.fx capture would run where.
        report = self.ut.explain(self.small, torch.randn(2, 8, 64))
        self.assertEqual(len(report.graphs), 1)
        graph = report.graphs[0]
        self.assertEqual(report.matmul_flop_share, 1.0, str(report))
        if report.door.startswith("unicache.torch.compile"):  # torch.fx: the graph compile() makes
            self.assertEqual(graph.partitions, self.fast_small.partitions)
        self.assertTrue(graph.dynamic_dims[0].endswith(("[-1,8,64]", "[-1,-1,64]")), graph.dynamic_dims)
        self.assertGreater(graph.ops_in_unicache, graph.ops_in_torch)
        # Only shape plumbing stays in torch (dynamo's capture on torch 2 also builds torch.Size values).
        self.assertTrue(all(r.split(":")[0] in ("view", "size", "Size", "getitem", "add", "floordiv", "mul")
                            for r in graph.torch_reasons), graph.torch_reasons)

        class Gpt2Mlp(torch.nn.Module):  # Conv1D's addmm and GELU written out
            def __init__(self):
                super().__init__()
                from library_style_models import Conv1D, NewGELU
                self.fc, self.act, self.out = Conv1D(32, 16), NewGELU(), Conv1D(16, 32)

            def forward(self, x):
                return self.out(self.act(self.fc(x)))
        mlp = Gpt2Mlp().eval()
        report = self.ut.explain(mlp, torch.randn(2, 5, 16))
        self.assertEqual(report.matmul_flop_share, 1.0, str(report))
        fast = self.ut.compile(mlp, [torch.randn(2, 5, 16)], dynamic_dims={0: (0, 1)})
        self.assertEqual(fast.partitions, 3, "each addmm with its bias, and the GELU written out, one partition each")
        for batch, length in ((1, 3), (4, 9)):
            x = torch.randn(batch, length, 16)
            with torch.no_grad():
                close_to(self, fast(x), mlp(x), f"GPT-2 MLP {batch}x{length}")
        if report.door.startswith("unicache.torch.compile"):  # torch.fx: positional inputs only
            with self.assertRaises(unicache.InvalidArgument):
                self.ut.explain(mlp, x=torch.randn(2, 5, 16))

    def test_rms_norm_silu_and_power_forms_run_in_unicache(self):
        # Llama's RMSNorm written out (pow, mean, rsqrt, float32 conversions) is one
        # RMSNorm op; SiLU gating, negation, x - number and pow(x, 0.5) are IR ops.
        from library_style_models import RMSNorm

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = RMSNorm(32)
                self.gate, self.up = torch.nn.Linear(32, 48, bias=False), torch.nn.Linear(32, 48, bias=False)
                self.down = torch.nn.Linear(48, 32, bias=False)
                self.act = torch.nn.SiLU()

            def forward(self, x):
                h = self.norm(x)
                y = self.down(self.act(self.gate(h)) * self.up(h))
                return -y + torch.pow(torch.sigmoid(y) + 1.0, 0.5) - 0.25
        torch.manual_seed(4)
        model = Block().eval()
        with torch.no_grad():
            model.norm.weight.uniform_(0.5, 1.5)
        fast = self.ut.compile(model, [torch.randn(2, 5, 32)], dynamic_dims={0: (0, 1)})
        report = self.ut.explain(model, torch.randn(2, 5, 32))
        reasons = " ".join(report.graphs[0].torch_reasons)
        for op in ("pow", "mean", "rsqrt", "silu", "neg", "sub", "sqrt"):
            self.assertNotIn(f"{op}:", reasons, f"{op} ran in torch: {reasons}")
        for batch, length in ((1, 1), (3, 7), (2, 40)):
            x = torch.randn(batch, length, 32)
            with torch.no_grad():
                close_to(self, fast(x), model(x), f"{batch}x{length}")

    def test_numbers_computed_from_numbers_are_folded(self):
        # Dynamo leaves GELU's sqrt(2 / pi) as nodes when pi is one of its inputs
        # (a global it lifts): once pi is a number, the nodes become their value.
        import math
        import operator
        from unicache.torch._dynamo import fold_constants
        g = torch.fx.Graph()
        x = g.placeholder("x")
        ratio = g.call_function(operator.truediv, (2.0, math.pi))
        root = g.call_function(math.sqrt, (ratio,))
        scaled = g.call_function(operator.mul, (root, x))
        bad = g.call_function(operator.truediv, (1.0, 0.0))  # not a number: left as it is
        g.output((scaled, bad))
        fold_constants(g)
        self.assertEqual([n.op for n in g.nodes], ["placeholder", "call_function", "call_function", "output"])
        self.assertAlmostEqual(scaled.args[0], math.sqrt(2.0 / math.pi))

    def test_training_mode_and_bad_dynamic_dims_are_refused(self):
        model = torch.nn.Linear(4, 4)
        with self.assertRaises(unicache.InvalidArgument):
            self.ut.compile(model.train(), [torch.randn(2, 4)])
        with self.assertRaises(unicache.InvalidArgument):
            self.ut.compile(model.eval(), [torch.randn(2, 4)], dynamic_dims={0: (5,)})


if __name__ == "__main__":
    unittest.main()
