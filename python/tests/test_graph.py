"""Graphs, partitions and the lifetime of every handle: built, checked, closed, never used after."""
import gc
import unittest

import numpy as np

import unicache
from unicache import OpKind
from support import MatMulBlock, cpu_engine, random


class GraphBuilding(unittest.TestCase):
    def test_add_tensor_gives_ids_shapes_and_constness(self):
        with unicache.Graph() as g:
            x, w = g.add_tensor([-1, 8]), g.add_tensor((8, 4), constant=True)
            self.assertEqual((x.shape, x.is_constant, x.ndims), ((-1, 8), False, 2))
            self.assertEqual((w.shape, w.is_constant), ((8, 4), True))
            self.assertNotEqual(x.id, w.id)

    def test_op_kinds_mirror_the_c_enum(self):
        self.assertEqual([k.value for k in OpKind], list(range(len(OpKind))))
        self.assertEqual((OpKind.MATMUL, OpKind.RELU, OpKind.SOFTMAX), (0, 3, 8))

    def test_a_fused_block_is_one_partition_with_its_inputs_in_order(self):
        block = MatMulBlock(16, 8, OpKind.ADD, OpKind.GELU_ERF)
        self.assertEqual(len(block.graph.partitions), 1)
        p = block.partition
        self.assertEqual([t.id for t in p.inputs], [t.id for t in block.inputs])
        self.assertEqual([t.id for t in p.outputs], [block.output.id])
        self.assertEqual([t.is_constant for t in p.inputs], [False, True, True])

    def test_two_matmuls_are_two_partitions_in_dependency_order(self):
        g = unicache.Graph()
        x, w1, w2 = g.add_tensor([-1, 8]), g.add_tensor([8, 8], True), g.add_tensor([8, 4], True)
        h, y = g.add_tensor([-1, 8]), g.add_tensor([-1, 4])
        g.add_op(OpKind.MATMUL, [x, w1], [h])
        g.add_op(OpKind.MATMUL, [h.id, w2.id], [y.id])  # ids work as well as tensors
        g.finalize()
        first, second = g.partitions
        self.assertEqual(first.outputs[0].id, second.inputs[0].id)

    def test_transposes_are_attributes_of_matmul(self):
        g = unicache.Graph()
        a, b, y = g.add_tensor([8, -1]), g.add_tensor([4, 8], True), g.add_tensor([-1, 4])
        g.add_op(OpKind.MATMUL, [a, b], [y], transpose_a=True, transpose_b=True)
        g.finalize()
        engine, stream = cpu_engine(), cpu_engine().stream()
        xa, wb = random((8, 5), 3), random((4, 8), 4)
        (out,) = g.partitions[0].compile([xa.shape, wb.shape], engine).execute(stream, [xa, wb])
        np.testing.assert_allclose(out, xa.T @ wb.T, rtol=1e-5, atol=1e-5)

    def test_an_invalid_graph_raises_invalid_graph_with_the_c_message(self):
        g = unicache.Graph()
        a, b, y = g.add_tensor([2, 3]), g.add_tensor([4, 5]), g.add_tensor([2, 5])
        g.add_op(OpKind.MATMUL, [a, b], [y])
        with self.assertRaises(unicache.InvalidGraph) as caught:
            g.finalize()
        self.assertEqual(caught.exception.status, unicache.Status.INVALID_GRAPH)
        self.assertIn("op 1 (MatMul)", caught.exception.message)
        self.assertIn("[2,3]", caught.exception.message)

    def test_an_unknown_tensor_id_is_an_error(self):
        g = unicache.Graph()
        x = g.add_tensor([2])
        with self.assertRaises(unicache.Error):
            g.add_op(OpKind.RELU, [x], [12345])

    def test_partitions_before_finalize_are_an_invalid_argument(self):
        with self.assertRaises(unicache.InvalidArgument):
            unicache.Graph().partitions

    def test_malformed_shapes_are_rejected_in_python(self):
        g = unicache.Graph()
        for shape in ([1] * 9, ["a", 2], [-2, 3], 7):
            with self.subTest(shape=shape), self.assertRaises(unicache.InvalidArgument):
                g.add_tensor(shape)
        with self.assertRaises(unicache.InvalidArgument):
            g.add_op("matmul", [], [])


class Lifetime(unittest.TestCase):
    def test_a_closed_graph_raises_and_closing_twice_is_fine(self):
        g = unicache.Graph()
        g.close()
        g.close()
        self.assertTrue(g.closed)
        with self.assertRaises(unicache.InvalidHandle) as caught:
            g.add_tensor([1])
        self.assertEqual(caught.exception.status, unicache.Status.INVALID_HANDLE)
        with self.assertRaises(unicache.InvalidHandle):
            g.finalize()

    def test_a_context_manager_closes(self):
        with unicache.Graph() as g:
            pass
        self.assertTrue(g.closed)

    def test_a_partition_keeps_its_graph_alive(self):
        block = MatMulBlock(8, 4)
        p = block.partition
        block.graph.close()
        del block
        gc.collect()
        cp = p.compile([(3, 8), (8, 4), (4,)], cpu_engine())
        self.assertEqual(cp.outputs[0].shape, (3, 4))

    def test_a_compiled_partition_needs_neither_graph_nor_partition(self):
        block = MatMulBlock(8, 4)
        x = random((2, 8), 5)
        cp = block.partition.compile(block.shapes(2), cpu_engine())
        want, weights = block.reference(x), block.weights
        block.graph.close()
        del block
        gc.collect()
        (out,) = cp.execute(cpu_engine().stream(), [x] + weights)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)

    def test_streams_and_compiled_partitions_keep_their_engine_alive(self):
        cpu_engine()  # skips in a build without the CPU backend
        engine = unicache.Engine.cpu()  # one of this test's own, to close
        stream = engine.stream()
        block = MatMulBlock(8, 4)
        cp = block.partition.compile(block.shapes(2), engine)
        engine.close()
        with self.assertRaises(unicache.InvalidHandle):
            engine.stream()
        with self.assertRaises(unicache.InvalidHandle):
            block.partition.compile(block.shapes(2), engine)
        x = random((2, 8), 6)
        (out,) = cp.execute(stream, [x] + block.weights)
        np.testing.assert_allclose(out, block.reference(x), rtol=1e-5, atol=1e-5)
        stream.wait()

    def test_closed_streams_and_compiled_partitions_raise(self):
        block = MatMulBlock(8, 4)
        cp = block.partition.compile(block.shapes(2), cpu_engine())
        stream = cpu_engine().stream()
        stream.close()
        with self.assertRaises(unicache.InvalidHandle):
            cp.execute(stream, [random((2, 8), 7)] + block.weights)
        with self.assertRaises(unicache.InvalidHandle):
            stream.wait()
        cp.close()
        with self.assertRaises(unicache.InvalidHandle):
            cp.execute(cpu_engine().stream(), [random((2, 8), 7)] + block.weights)
        with self.assertRaises(unicache.InvalidHandle):
            cp.cache_blob_id()


if __name__ == "__main__":
    unittest.main()
