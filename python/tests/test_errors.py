"""Bad input raises the package's errors, naming the input and what was expected; none crashes."""
import unittest

import numpy as np

import unicache
from unicache import OpKind
from support import MatMulBlock, cpu_engine, random


class ExecuteArguments(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.block = MatMulBlock(16, 8)
        cls.cp = cls.block.partition.compile(cls.block.shapes(4), cpu_engine())
        cls.stream = cpu_engine().stream()

    def execute(self, inputs, outputs=None):
        return self.cp.execute(self.stream, inputs, outputs)

    def inputs(self):
        return [random((4, 16), 1)] + self.block.weights

    def test_float64_is_a_type_error_naming_the_input_and_float32(self):
        bad = self.inputs()
        bad[1] = bad[1].astype(np.float64)
        with self.assertRaises(unicache.InvalidTensorType) as caught:
            self.execute(bad)
        e = caught.exception
        self.assertIsInstance(e, TypeError)
        self.assertIsInstance(e, unicache.Error)
        self.assertEqual(e.status, unicache.Status.INVALID_ARGUMENT)
        self.assertIn("input 1", str(e))
        self.assertIn("float32", str(e))

    def test_a_non_contiguous_array_is_a_value_error(self):
        bad = self.inputs()
        bad[0] = np.asfortranarray(bad[0])
        with self.assertRaises(unicache.InvalidArgument) as caught:
            self.execute(bad)
        self.assertIsInstance(caught.exception, ValueError)
        self.assertIn("input 0", str(caught.exception))
        self.assertIn("contiguous", str(caught.exception))

    def test_a_strided_view_is_refused_too(self):
        bad = self.inputs()
        bad[0] = random((4, 32), 2)[:, ::2]
        with self.assertRaises(unicache.InvalidArgument):
            self.execute(bad)

    def test_the_wrong_number_of_inputs_says_how_many(self):
        with self.assertRaises(unicache.InvalidArgument) as caught:
            self.execute(self.inputs()[:2])
        self.assertIn("expected 3 inputs", str(caught.exception))
        self.assertIn("got 2", str(caught.exception))
        with self.assertRaises(unicache.InvalidArgument):
            self.execute(self.inputs(), [np.zeros((4, 8), np.float32)] * 2)

    def test_a_shape_other_than_the_compiled_one_names_both(self):
        for shape in ((5, 16), (4, 16, 1), (64,)):
            bad = self.inputs()
            bad[0] = random(shape, 3)
            with self.subTest(shape=shape), self.assertRaises(unicache.InvalidArgument) as caught:
                self.execute(bad)
            self.assertIn("input 0", str(caught.exception))
            self.assertIn("expected [4, 16]", str(caught.exception))

    def test_outputs_must_be_writable_and_of_the_output_shape(self):
        out = np.zeros((4, 8), np.float32)
        out.flags.writeable = False
        with self.assertRaises(unicache.InvalidArgument) as caught:
            self.execute(self.inputs(), [out])
        self.assertIn("output 0", str(caught.exception))
        with self.assertRaises(unicache.InvalidArgument):
            self.execute(self.inputs(), [np.zeros((4, 9), np.float32)])

    def test_objects_that_are_not_tensors_are_type_errors(self):
        for thing in (None, "x", [[1.0] * 16] * 4, 3.5, object()):
            bad = self.inputs()
            bad[0] = thing
            with self.subTest(thing=type(thing)), self.assertRaises(unicache.InvalidTensorType):
                self.execute(bad)
        with self.assertRaises(unicache.InvalidArgument):
            self.execute(self.inputs()[0])  # one array, not a list of them

    def test_integer_arrays_are_type_errors(self):
        bad = self.inputs()
        bad[2] = np.zeros(8, np.int32)
        with self.assertRaises(unicache.InvalidTensorType):
            self.execute(bad)


class CompileArguments(unittest.TestCase):
    def setUp(self):
        self.block = MatMulBlock(16, 8)

    def test_a_shape_of_the_wrong_rank_names_the_input_and_the_declared_shape(self):
        with self.assertRaises(unicache.InvalidArgument) as caught:
            self.block.partition.compile([(4, 16, 2), (16, 8), (8,)], cpu_engine())
        self.assertIn("input 0", str(caught.exception))
        self.assertIn("[-1, 16]", str(caught.exception))

    def test_a_declared_dimension_must_match(self):
        with self.assertRaises(unicache.InvalidArgument):
            self.block.partition.compile([(4, 15), (16, 8), (8,)], cpu_engine())

    def test_unknown_dimensions_and_negative_ones_are_refused_when_compiling(self):
        with self.assertRaises(unicache.InvalidArgument):
            self.block.partition.compile([(-1, 16), (16, 8), (8,)], cpu_engine())

    def test_the_wrong_number_of_shapes(self):
        with self.assertRaises(unicache.InvalidArgument) as caught:
            self.block.partition.compile([(4, 16)], cpu_engine())
        self.assertIn("expected 3 input shapes", str(caught.exception))

    def test_shapes_the_graph_cannot_take_are_compile_failed_with_the_c_message(self):
        g = unicache.Graph()
        a, b, y = g.add_tensor([-1, -1]), g.add_tensor([-1, -1]), g.add_tensor([-1, -1])
        g.add_op(OpKind.ADD, [a, b], [y])
        g.finalize()
        with self.assertRaises(unicache.CompileFailed) as caught:
            g.partitions[0].compile([(4, 3), (5, 2)], cpu_engine())
        self.assertEqual(caught.exception.status, unicache.Status.COMPILE_FAILED)
        self.assertTrue(caught.exception.message)

    def test_a_stream_of_another_engine_kind_is_refused(self):
        try:
            other = unicache.Engine.opencl_default()
        except unicache.Error as e:
            self.skipTest(f"no OpenCL engine: {e.message}")
        cp = self.block.partition.compile(self.block.shapes(2), cpu_engine())
        with self.assertRaises(unicache.InvalidArgument):
            cp.execute(other.stream(), [random((2, 16), 1)] + self.block.weights)


if __name__ == "__main__":
    unittest.main()
