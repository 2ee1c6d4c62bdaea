"""The caches seen from Python: a repeated shape is a lookup, a constant is packed once,
capacities and policies round-trip, evictions reach a callback."""
import os
import unittest

import numpy as np

import unicache
from unicache import Cache, EngineKind, OpKind, Owner, Policy, Tensor
from support import MatMulBlock, cpu_engine, random


def kernel_stats() -> unicache.CacheStats:
    return unicache.cache_stats(Cache.KERNEL)


def constant_stats() -> unicache.CacheStats:
    return unicache.cache_stats(Cache.CONSTANT_TENSOR)


class KernelCache(unittest.TestCase):
    def test_compiling_a_shape_again_is_a_hit_not_an_insert(self):
        block = MatMulBlock(24, 40, OpKind.ADD, OpKind.GELU_TANH)
        engine = cpu_engine()
        first = block.partition.compile(block.shapes(9), engine)
        before = kernel_stats()
        again = block.partition.compile(block.shapes(9), engine)
        delta = kernel_stats() - before
        self.assertEqual((delta.inserts, delta.misses), (0, 0))
        self.assertGreaterEqual(delta.hits, 1)
        self.assertEqual(first.cache_blob_id(), again.cache_blob_id())

    @unittest.skipUnless(os.environ.get("UNICACHE_KERNEL_SHAPES", "adaptive").lower() in ("adaptive", "agnostic"),
                         "kernels are shape-agnostic only in the adaptive and agnostic modes")
    def test_new_batch_sizes_share_the_partitions_kernels(self):
        block = MatMulBlock(24, 40)
        ids = {block.partition.compile(block.shapes(m), cpu_engine()).cache_blob_id() for m in (1, 2, 50, 300)}
        self.assertEqual(len(ids), 1)
        self.assertEqual(block.partition.cache_blob_id(block.shapes(77), cpu_engine()), ids.pop())


class ConstantTensorCache(unittest.TestCase):
    def test_a_constant_weight_is_packed_once_and_again_after_a_version_bump(self):
        # 48 x 24 is used by no other test: its first shape gets a primitive of its
        # own, which packs the weight into the layout it picked.
        block = MatMulBlock(48, 24, binary=None, post=None)
        engine, stream = cpu_engine(), cpu_engine().stream()
        weights = block.weights[0]
        cp = block.partition.compile(block.shapes(5), engine)
        before = constant_stats()
        for i in range(20):
            x = random((5, 48), i)
            (out,) = cp.execute(stream, [x, Tensor(weights, version=1)])
        np.testing.assert_allclose(out, x @ weights, rtol=1e-4, atol=1e-4)
        self.assertEqual((constant_stats() - before).inserts, 1)

        weights *= 2  # in place: same address, new contents, a new version
        (out,) = cp.execute(stream, [x, Tensor(weights, version=2)])
        np.testing.assert_allclose(out, x @ weights, rtol=1e-4, atol=1e-4)
        self.assertEqual((constant_stats() - before).inserts, 2)

    def test_tensor_versions_are_unsigned_64_bit(self):
        Tensor(np.zeros(1, np.float32), version=2 ** 64 - 1)
        for bad in (-1, 2 ** 64):
            with self.assertRaises(unicache.InvalidArgument):
                Tensor(np.zeros(1, np.float32), version=bad)


class Settings(unittest.TestCase):
    def test_capacity_and_policy_round_trip(self):
        old = unicache.get_cache_capacity(Cache.KERNEL, EngineKind.GPU)
        self.addCleanup(unicache.set_cache_capacity, Cache.KERNEL, EngineKind.GPU, *old)
        unicache.set_cache_capacity(Cache.KERNEL, EngineKind.GPU, 300, Policy.LRU)
        self.assertEqual(unicache.get_cache_capacity(Cache.KERNEL, EngineKind.GPU), (300, Policy.LRU))

    def test_onednn_graphs_constant_cache_names(self):
        old = unicache.get_constant_tensor_cache_capacity(EngineKind.GPU)
        self.addCleanup(unicache.set_constant_tensor_cache_capacity, EngineKind.GPU, old)
        unicache.set_constant_tensor_cache_capacity(EngineKind.GPU, 123)
        self.assertEqual(unicache.get_constant_tensor_cache_capacity(EngineKind.GPU), 123)

    def test_kernel_cache_capacity(self):
        old = unicache.get_kernel_cache_capacity()
        self.addCleanup(unicache.set_kernel_cache_capacity, old)
        unicache.set_kernel_cache_capacity(old + 1)
        self.assertEqual(unicache.get_kernel_cache_capacity(), old + 1)

    def test_bad_settings_raise_the_libraries_errors(self):
        with self.assertRaises(unicache.CacheError):
            unicache.set_cache_capacity(Cache.KERNEL, EngineKind.CPU, 2 ** 60)
        with self.assertRaises(unicache.InvalidArgument) as caught:
            unicache.set_cache_capacity(Cache.KERNEL, EngineKind.CPU, 10, 99)
        self.assertIn("policy", caught.exception.message)

    def test_stats_subtract_counter_by_counter(self):
        a, b = unicache.CacheStats(hits=5, entries=2), unicache.CacheStats(hits=2, entries=3)
        self.assertEqual(a - b, unicache.CacheStats(hits=3, entries=-1))


class EvictionCallbacks(unittest.TestCase):
    def test_shrinking_the_constant_cache_calls_back_with_the_evicted_entry(self):
        events = []
        subscription = unicache.add_eviction_callback(Cache.CONSTANT_TENSOR, Owner.ONEDNN_CPU, events.append)
        self.addCleanup(subscription.remove)
        block = MatMulBlock(56, 20, binary=None, post=None)  # a size of its own: packed (see above)
        cp = block.partition.compile(block.shapes(3), cpu_engine())
        cp.execute(cpu_engine().stream(), [random((3, 56), 1)] + block.weights)
        old = unicache.get_cache_capacity(Cache.CONSTANT_TENSOR, EngineKind.CPU)
        unicache.set_cache_capacity(Cache.CONSTANT_TENSOR, EngineKind.CPU, 0, old.policy)
        unicache.set_cache_capacity(Cache.CONSTANT_TENSOR, EngineKind.CPU, *old)
        self.assertGreaterEqual(len(events), 1)
        self.assertEqual((events[0].kind, events[0].owner_id), (EngineKind.CPU, Owner.ONEDNN_CPU))
        self.assertGreater(len(events[0].key), 0)

    def test_removing_twice_is_an_invalid_argument(self):
        subscription = unicache.add_eviction_callback(Cache.KERNEL, Owner.COMPILED_PARTITION, lambda e: None)
        subscription.remove()
        with self.assertRaises(unicache.InvalidArgument):
            subscription.remove()


if __name__ == "__main__":
    unittest.main()
