"""The CUDA engine, through CudaBuffer and (where torch has CUDA) torch CUDA tensors.
Skipped unless unicache_cuda_available says a driver and a device are there."""
import unittest

import numpy as np

import unicache
from unicache import CudaBuffer, OpKind
from support import MatMulBlock, random

try:
    import torch
except ImportError:
    torch = None


class Cuda(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        available, reason = unicache.cuda_available()
        if not available:
            raise unittest.SkipTest(f"CUDA is not available: {reason}")
        cls.engine = unicache.Engine.cuda(0)
        cls.stream = cls.engine.stream()

    def test_matmul_add_relu_matches_numpy_through_cuda_buffers(self):
        block = MatMulBlock(64, 32, OpKind.ADD, OpKind.RELU)
        weights = [CudaBuffer(self.engine, w) for w in block.weights]
        for m in (1, 7, 33, 128):
            with self.subTest(m=m):
                x = random((m, 64), m)
                cp = block.partition.compile(block.shapes(m), self.engine)
                xb, yb = CudaBuffer(self.engine, x), CudaBuffer(self.engine, nbytes=m * 32 * 4)
                cp.execute(self.stream, [xb] + weights, [yb])
                self.stream.wait()
                np.testing.assert_allclose(yb.to_numpy(self.stream, (m, 32)), block.reference(x), rtol=1e-3,
                                           atol=1e-3)
                xb.close()
                yb.close()

    def test_host_arrays_are_refused_on_a_cuda_engine(self):
        block = MatMulBlock(16, 8)
        cp = block.partition.compile(block.shapes(2), self.engine)
        with self.assertRaises(unicache.InvalidTensorType):
            cp.execute(self.stream, [random((2, 16), 1)] + block.weights, [np.zeros((2, 8), np.float32)])

    def test_torch_cuda_tensors_on_torchs_stream(self):
        if torch is None or not torch.cuda.is_available():
            self.skipTest("torch with CUDA is not installed")
        block = MatMulBlock(64, 32)
        engine = unicache.Engine.for_torch_device("cuda:0")
        stream = engine.stream(torch.cuda.current_stream())
        weights = [torch.from_numpy(w).cuda() for w in block.weights]
        x = torch.randn(9, 64, device="cuda")
        (out,) = block.partition.compile(block.shapes(9), engine).execute(stream, [x] + weights)
        stream.wait()
        np.testing.assert_allclose(out.cpu().numpy(), block.reference(x.cpu().numpy()), rtol=1e-3, atol=1e-3)


if __name__ == "__main__":
    unittest.main()
