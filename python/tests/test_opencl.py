"""The default OpenCL device (PoCL on a machine without a GPU), through OpenCLBuffer.
Skipped, with the reason, in a build without the OpenCL backend or on a machine without a device."""
import unittest

import numpy as np

import unicache
from unicache import OpKind, OpenCLBuffer
from support import MatMulBlock, opencl_engine, random


class OpenCL(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.engine = opencl_engine()
        cls.stream = cls.engine.stream()

    def test_matmul_add_gelu_matches_numpy_at_several_batch_sizes(self):
        block = MatMulBlock(64, 32, OpKind.ADD, OpKind.GELU_ERF)
        weights = [OpenCLBuffer(self.engine, w) for w in block.weights]
        for m in (1, 7, 33):
            with self.subTest(m=m):
                x = random((m, 64), m)
                cp = block.partition.compile(block.shapes(m), self.engine)
                with OpenCLBuffer(self.engine, x) as xb, OpenCLBuffer(self.engine, nbytes=m * 32 * 4) as yb:
                    cp.execute(self.stream, [xb] + weights, [yb])
                    self.stream.wait()
                    out = yb.to_numpy(self.stream, (m, 32))
                np.testing.assert_allclose(out, block.reference(x), rtol=1e-4, atol=1e-4)

    def test_a_buffer_round_trips_host_data(self):
        data = random((5, 3), 1)
        with OpenCLBuffer(self.engine, nbytes=data.nbytes) as buffer:
            buffer.write(self.stream, data)
            back = np.zeros_like(data)
            self.assertIs(buffer.read_into(self.stream, back), back)
        np.testing.assert_array_equal(back, data)

    def test_host_arrays_are_refused_on_an_opencl_engine(self):
        block = MatMulBlock(16, 8)
        cp = block.partition.compile(block.shapes(2), self.engine)
        with self.assertRaises(unicache.InvalidTensorType) as caught:
            cp.execute(self.stream, [random((2, 16), 1)] + block.weights, [np.zeros((2, 8), np.float32)])
        self.assertIn("OpenCLBuffer", str(caught.exception))

    def test_a_buffer_too_small_for_the_shape_is_refused(self):
        block = MatMulBlock(16, 8, binary=None, post=None)
        cp = block.partition.compile(block.shapes(2), self.engine)
        with OpenCLBuffer(self.engine, nbytes=4) as small, OpenCLBuffer(self.engine, block.weights[0]) as w:
            with self.assertRaises(unicache.InvalidArgument) as caught:
                cp.execute(self.stream, [small, w], [small])
        self.assertIn("input 0", str(caught.exception))

    def test_a_buffer_outlives_a_closed_engine_and_releases_cleanly(self):
        engine = unicache.Engine.opencl_default()
        buffer, stream = OpenCLBuffer(engine, random((4,), 2)), engine.stream()
        engine.close()
        np.testing.assert_array_equal(buffer.to_numpy(stream), random((4,), 2))
        buffer.close()
        with self.assertRaises(unicache.InvalidHandle):
            buffer.pointer

    def test_engine_handles_and_cache_blob(self):
        device, context = self.engine.native_handles()
        self.assertTrue(device and context)
        self.assertTrue(self.stream.native_handle())
        blob = self.engine.cache_blob()
        self.assertGreater(len(blob), 0)
        again = unicache.Engine.opencl(device, context, cache_blob=blob)
        self.assertEqual(again.backend, unicache.Backend.OPENCL)

    def test_a_compiled_partitions_blob_compiles_it_again(self):
        block = MatMulBlock(32, 16)
        cp = block.partition.compile(block.shapes(4), self.engine)
        blob = cp.cache_blob()
        again = block.partition.compile(block.shapes(4), self.engine, cache_blob=blob)
        self.assertEqual(again.cache_blob_id(), cp.cache_blob_id())
        with self.assertRaises(unicache.CompileFailed):
            block.partition.compile(block.shapes(4), self.engine, cache_blob=b"not a blob")


if __name__ == "__main__":
    unittest.main()
