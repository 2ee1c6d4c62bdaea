"""Results against numpy on the CPU engine: each fused block at several batch sizes,
one graph compiled once per shape; and executions from several threads at once."""
import threading
import unittest

import numpy as np

import unicache
from unicache import OpKind
from support import MatMulBlock, cpu_engine, gelu_erf, random, softmax

BATCHES = (1, 7, 33, 128)


class CpuNumerics(unittest.TestCase):
    def check_block(self, binary, post, k=64, n=32):
        engine = cpu_engine()
        stream = engine.stream()
        block = MatMulBlock(k, n, binary, post)
        for m in BATCHES:
            with self.subTest(m=m):
                x = random((m, k), m)
                out = block.run(engine, stream, x)
                self.assertEqual((out.shape, out.dtype), ((m, n), np.float32))
                np.testing.assert_allclose(out, block.reference(x), rtol=1e-4, atol=1e-4)

    def test_matmul_add_relu(self):
        self.check_block(OpKind.ADD, OpKind.RELU)

    def test_matmul_add_gelu_erf(self):
        self.check_block(OpKind.ADD, OpKind.GELU_ERF)

    def test_matmul_add_gelu_tanh(self):
        self.check_block(OpKind.ADD, OpKind.GELU_TANH)

    def test_matmul_multiply_sigmoid(self):
        self.check_block(OpKind.MULTIPLY, OpKind.SIGMOID)

    def test_matmul_tanh(self):
        self.check_block(None, OpKind.TANH)

    def test_matmul_silu(self):
        self.check_block(None, OpKind.SILU)

    def test_attention_in_both_layouts_against_numpy(self):
        engine = cpu_engine()
        stream = engine.stream()
        for layout in (unicache.AttentionLayout.BHLD, unicache.AttentionLayout.BLHD):
            g = unicache.Graph()
            q, k, v = (g.add_tensor([-1, -1, -1, 16]) for _ in range(3))
            mask, y = g.add_tensor([-1, 1, 1, -1]), g.add_tensor([-1, -1, -1, 16])
            op = g.add_op(OpKind.ATTENTION, [q, k, v, mask], [y])
            g.set_op_attr(op, unicache.OpAttr.SCALE, 0.3)
            g.set_op_attr_ints(op, unicache.OpAttr.CAUSAL, [1])
            g.set_op_attr_ints(op, unicache.OpAttr.LAYOUT, [int(layout)])
            g.finalize()
            (p,) = g.partitions
            b, h, l, s = 2, 3, 11, 11
            shape = (b, h, l, 16) if layout == unicache.AttentionLayout.BHLD else (b, l, h, 16)
            qv, kv, vv = random(shape, 1), random(shape, 2), random(shape, 3)
            mv = np.zeros((b, 1, 1, s), np.float32)
            mv[1, 0, 0, 7:] = -np.inf  # the second sequence padded
            (got,) = p.compile([shape, shape, shape, mv.shape], engine).execute(stream, [qv, kv, vv, mv])
            swap = (lambda t: t.transpose(0, 2, 1, 3)) if layout == unicache.AttentionLayout.BLHD else (lambda t: t)
            q64, k64, v64 = (swap(t).astype(np.float64) for t in (qv, kv, vv))
            scores = 0.3 * q64 @ k64.transpose(0, 1, 3, 2) + mv
            scores[..., np.triu_indices(l, 1)[0], np.triu_indices(l, 1)[1]] = -np.inf
            probs = np.exp(scores - scores.max(-1, keepdims=True))
            want = swap(probs / probs.sum(-1, keepdims=True) @ v64)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5, err_msg=str(layout))

    def test_rms_norm_and_rsqrt_against_numpy(self):
        engine = cpu_engine()
        stream = engine.stream()
        g = unicache.Graph()
        x, gamma, y = g.add_tensor([-1, 48]), g.add_tensor([48], constant=True), g.add_tensor([-1, 48])
        r = g.add_tensor([-1, 48])
        op = g.add_op(OpKind.RMS_NORM, [x, gamma], [y])
        g.set_op_attr(op, unicache.OpAttr.EPSILON, 1e-6)
        g.add_op(OpKind.RSQRT, [y], [r])
        g.mark_output(y)
        g.finalize()
        weights = random((48,), 3) + 2.0
        for m in (1, 9, 300):
            xv = random((m, 48), m)
            want = xv / np.sqrt((xv.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * weights
            norm, root = g.partitions
            (got,) = norm.compile([(m, 48), (48,)], engine).execute(stream, [xv, weights])
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
            positive = np.abs(got) + 0.5
            (got_root,) = root.compile([(m, 48)], engine).execute(stream, [positive])
            np.testing.assert_allclose(got_root, 1.0 / np.sqrt(positive), rtol=2e-5)

    def test_matmul_add_then_softmax_two_partitions(self):
        self.check_block(OpKind.ADD, OpKind.SOFTMAX, k=40, n=24)

    def test_softmax_alone_over_the_last_axis(self):
        g = unicache.Graph()
        x, y = g.add_tensor([-1, 10]), g.add_tensor([-1, 10])
        g.add_op(OpKind.SOFTMAX, [x], [y])
        g.finalize()
        engine = cpu_engine()
        for m in BATCHES:
            a = random((m, 10), m) * 4
            (out,) = g.partitions[0].compile([a.shape], engine).execute(engine.stream(), [a])
            np.testing.assert_allclose(out, softmax(a.astype(np.float64)), rtol=1e-5, atol=1e-6)

    def test_batched_matmul_of_rank_3(self):
        g = unicache.Graph()
        a, b, y = g.add_tensor([-1, -1, 16]), g.add_tensor([-1, 16, 8]), g.add_tensor([-1, -1, 8])
        g.add_op(OpKind.MATMUL, [a, b], [y])
        g.finalize()
        engine = cpu_engine()
        for batch, m in ((1, 1), (3, 7), (2, 33)):
            x, w = random((batch, m, 16), m), random((batch, 16, 8), batch)
            (out,) = g.partitions[0].compile([x.shape, w.shape], engine).execute(engine.stream(), [x, w])
            np.testing.assert_allclose(out, x @ w, rtol=1e-4, atol=1e-4)

    def test_outputs_given_are_written_in_place_and_returned(self):
        block = MatMulBlock(16, 8)
        x, y = random((5, 16), 9), np.full((5, 8), np.nan, np.float32)
        cp = block.partition.compile(block.shapes(5), cpu_engine())
        (out,) = cp.execute(cpu_engine().stream(), [x] + block.weights, [y])
        self.assertIs(out, y)
        np.testing.assert_allclose(y, block.reference(x), rtol=1e-4, atol=1e-4)

    def test_two_partitions_run_one_after_the_other(self):
        g = unicache.Graph()
        x, w1, w2 = g.add_tensor([-1, 32]), g.add_tensor([32, 48], True), g.add_tensor([48, 16], True)
        h, a, y = g.add_tensor([-1, 48]), g.add_tensor([-1, 48]), g.add_tensor([-1, 16])
        g.add_op(OpKind.MATMUL, [x, w1], [h])
        g.add_op(OpKind.GELU_ERF, [h], [a])
        g.add_op(OpKind.MATMUL, [a, w2], [y])
        g.finalize()
        first, second = g.partitions
        engine, weights1, weights2 = cpu_engine(), random((32, 48), 1), random((48, 16), 2)
        stream = engine.stream()
        for m in (2, 17):
            xs = random((m, 32), m)
            (hidden,) = first.compile([xs.shape, weights1.shape], engine).execute(stream, [xs, weights1])
            (out,) = second.compile([hidden.shape, weights2.shape], engine).execute(stream, [hidden, weights2])
            want = gelu_erf(xs.astype(np.float64) @ weights1) @ weights2
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)

    def test_threads_execute_one_compiled_partition_at_once_each_with_its_stream(self):
        block = MatMulBlock(64, 32)
        cp = block.partition.compile(block.shapes(16), cpu_engine())
        errors = []

        def work(seed):
            try:
                stream = cpu_engine().stream()
                for i in range(20):
                    x = random((16, 64), seed * 100 + i)
                    (out,) = cp.execute(stream, [x] + block.weights)
                    np.testing.assert_allclose(out, block.reference(x), rtol=1e-4, atol=1e-4)
            except Exception as e:  # reported by the main thread
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])


if __name__ == "__main__":
    unittest.main()


class LayerNormNumerics(unittest.TestCase):
    """LayerNorm with its epsilon set through Graph.set_op_attr, against numpy."""

    def test_layer_norm_over_the_last_axis_at_several_row_counts(self):
        g = unicache.Graph()
        x, gamma, beta = g.add_tensor([-1, 48]), g.add_tensor([48], constant=True), g.add_tensor([48], constant=True)
        y = g.add_tensor([-1, 48])
        op = g.add_op(OpKind.LAYER_NORM, [x, gamma, beta], [y])
        g.set_op_attr(op, unicache.OpAttr.EPSILON, 1e-12)
        g.finalize()
        engine = cpu_engine()
        gv, bv = random((48,), 1) + 1, random((48,), 2)
        for m in BATCHES:
            a = random((m, 48), m) * 3 + 5
            (out,) = g.partitions[0].compile([a.shape, (48,), (48,)], engine).execute(engine.stream(), [a, gv, bv])
            a64 = a.astype(np.float64)
            want = (a64 - a64.mean(-1, keepdims=True)) / np.sqrt(a64.var(-1, keepdims=True) + 1e-12) * gv + bv
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)

    def test_an_epsilon_out_of_range_or_on_another_op_is_an_invalid_graph(self):
        g = unicache.Graph()
        x, gamma, beta, y = (g.add_tensor(s) for s in ([4, 8], [8], [8], [4, 8]))
        op = g.add_op(OpKind.LAYER_NORM, [x, gamma, beta], [y])
        with self.assertRaises(unicache.InvalidGraph) as caught:
            g.set_op_attr(op, unicache.OpAttr.EPSILON, -1.0)
        self.assertIn("epsilon", str(caught.exception))
        z = g.add_tensor([4, 8])
        relu = g.add_op(OpKind.RELU, [y], [z])
        with self.assertRaises(unicache.InvalidGraph):
            g.set_op_attr(relu, unicache.OpAttr.EPSILON, 1e-5)


class TransposeNumerics(unittest.TestCase):
    """Transpose with its permutation set through Graph.set_op_attr_ints, against numpy."""

    def test_attention_head_split_at_several_shapes(self):
        g = unicache.Graph()
        x, y = g.add_tensor([-1, -1, 4, 8]), g.add_tensor([-1, 4, -1, 8])
        g.set_op_attr_ints(g.add_op(OpKind.TRANSPOSE, [x], [y]), unicache.OpAttr.PERMUTATION, (0, 2, 1, 3))
        g.finalize()
        engine = cpu_engine()
        for b, s in ((1, 1), (3, 17), (2, 300)):
            a = random((b, s, 4, 8), s)
            (out,) = g.partitions[0].compile([a.shape], engine).execute(engine.stream(), [a])
            np.testing.assert_array_equal(out, a.transpose(0, 2, 1, 3))

    def test_bad_permutations_are_invalid_graphs_or_arguments(self):
        g = unicache.Graph()
        x, y = g.add_tensor([2, 3]), g.add_tensor([3, 2])
        op = g.add_op(OpKind.TRANSPOSE, [x], [y])
        with self.assertRaises(unicache.InvalidArgument):
            g.set_op_attr_ints(op, unicache.OpAttr.PERMUTATION, [1, 2**64])
        with self.assertRaises(unicache.InvalidArgument):
            g.set_op_attr_ints(op, unicache.OpAttr.PERMUTATION, [1.0, 0])
        with self.assertRaises(unicache.InvalidGraph):
            g.set_op_attr_ints(op, unicache.OpAttr.PERMUTATION, range(7))
        with self.assertRaises(unicache.InvalidArgument) as caught:
            g.set_op_attr(op, unicache.OpAttr.PERMUTATION, 1.0)
        self.assertIn("set_op_attr_i64s", str(caught.exception))
        g.set_op_attr_ints(op, unicache.OpAttr.PERMUTATION, [0, 0])
        with self.assertRaises(unicache.InvalidGraph) as caught:
            g.finalize()
        self.assertIn("permutation [0,0] is not one of the axes of [2,3]", str(caught.exception))


class MarkedOutputs(unittest.TestCase):
    def test_a_marked_output_ends_the_fused_chain(self):
        g = unicache.Graph()
        x, w, b = g.add_tensor([-1, 8]), g.add_tensor([8, 4], constant=True), g.add_tensor([4])
        mm, s, y = g.add_tensor([-1, 4]), g.add_tensor([-1, 4]), g.add_tensor([-1, 4])
        g.add_op(OpKind.MATMUL, [x, w], [mm])
        g.add_op(OpKind.ADD, [mm, b], [s])
        g.add_op(OpKind.RELU, [s], [y])
        g.mark_output(s)
        g.finalize()
        self.assertEqual([p.outputs[0].id for p in g.partitions], [s.id, y.id])
        with self.assertRaises(unicache.InvalidGraph):
            g.mark_output(12345)
