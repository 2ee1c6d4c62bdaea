"""Tensors from other libraries, without a copy: torch, DLPack, array interfaces, buffers, pointers."""
import array
import unittest

import numpy as np

import unicache
from support import MatMulBlock, cpu_engine, random

try:
    import torch
except ImportError:
    torch = None


class ArrayInterfaceOnly:
    """An array-like known to unicache only by __array_interface__."""

    def __init__(self, a):
        self._a = a
        self.__array_interface__ = a.__array_interface__


class DLPackOnly:
    """An array-like known to unicache only by DLPack."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, stream=None):
        return self._a.__dlpack__()

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class HostTensors(unittest.TestCase):
    def setUp(self):
        self.block = MatMulBlock(16, 8)
        self.cp = self.block.partition.compile(self.block.shapes(3), cpu_engine())
        self.x = random((3, 16), 4)
        self.want = self.block.reference(self.x)

    def run_with(self, wrap):
        out = np.zeros((3, 8), np.float32)
        self.cp.execute(cpu_engine().stream(), [wrap(self.x)] + [wrap(w) for w in self.block.weights], [wrap(out)])
        np.testing.assert_allclose(out, self.want, rtol=1e-4, atol=1e-4)

    def test_objects_with_an_array_interface(self):
        self.run_with(ArrayInterfaceOnly)

    @unittest.skipUnless(hasattr(np.ndarray, "__dlpack__"), "numpy exports no DLPack before 1.22")
    def test_dlpack_producers(self):
        self.run_with(DLPackOnly)

    def test_raw_pointers_the_caller_vouches_for(self):
        self.run_with(lambda a: a.ctypes.data)

    def test_tensors_with_versions(self):
        self.run_with(lambda a: unicache.Tensor(a, version=7))

    def test_writable_float_buffers_without_numpy(self):
        def shaped(values, shape):  # array.array is flat: a memoryview gives it the compiled shape
            return memoryview(array.array("f", values)).cast("B").cast("f", shape)

        inputs = [shaped(a.ravel().tolist(), a.shape) for a in [self.x] + self.block.weights]
        out = shaped([0.0] * 24, (3, 8))
        self.cp.execute(cpu_engine().stream(), inputs, [out])
        np.testing.assert_allclose(np.array(out.tolist()), self.want, rtol=1e-4, atol=1e-4)

    def test_no_copy_is_made_of_outputs(self):
        out = np.zeros((3, 8), np.float32)
        (returned,) = self.cp.execute(cpu_engine().stream(), [self.x] + self.block.weights, [out])
        self.assertIs(returned, out)
        self.assertTrue(np.any(out != 0))


@unittest.skipIf(torch is None, "torch is not installed (Debian: python3-torch)")
class TorchCpuTensors(unittest.TestCase):
    def setUp(self):
        cpu_engine()  # skips in a build without the CPU backend
        self.block = MatMulBlock(32, 16)
        self.weights = [torch.from_numpy(w) for w in self.block.weights]

    def test_torch_tensors_in_and_out_match_numpy(self):
        engine = unicache.Engine.for_torch_device("cpu")
        stream = engine.stream()
        for m in (1, 9, 64):
            x = torch.randn(m, 32)
            cp = self.block.partition.compile([tuple(x.shape)] + [tuple(w.shape) for w in self.weights], engine)
            (out,) = cp.execute(stream, [x] + self.weights)  # outputs allocated as torch tensors
            self.assertIsInstance(out, torch.Tensor)
            np.testing.assert_allclose(out.numpy(), self.block.reference(x.numpy()), rtol=1e-4, atol=1e-4)
            given = torch.empty(m, 16)
            cp.execute(stream, [x] + self.weights, [given])
            self.assertTrue(torch.equal(given, out))

    def test_a_float64_or_non_contiguous_torch_tensor_is_refused(self):
        cp = self.block.partition.compile(self.block.shapes(4), cpu_engine())
        stream = cpu_engine().stream()
        with self.assertRaises(unicache.InvalidTensorType) as caught:
            cp.execute(stream, [torch.randn(4, 32, dtype=torch.float64)] + self.weights)
        self.assertIn("torch.float32", str(caught.exception))
        with self.assertRaises(unicache.InvalidArgument) as caught:
            cp.execute(stream, [torch.randn(32, 4).t()] + self.weights)
        self.assertIn("contiguous", str(caught.exception))

    def test_a_tensor_requiring_grad_is_read_as_it_is(self):
        cp = self.block.partition.compile(self.block.shapes(2), cpu_engine())
        x = torch.randn(2, 32, requires_grad=True)
        (out,) = cp.execute(cpu_engine().stream(), [x] + self.weights)
        np.testing.assert_allclose(out.numpy(), self.block.reference(x.detach().numpy()), rtol=1e-4, atol=1e-4)


if __name__ == "__main__":
    unittest.main()
