"""The store's settings and statistics, and blobs, from Python."""
import os
import tempfile
import unittest

import unicache
from unicache import store


class StoreSettings(unittest.TestCase):
    def setUp(self):
        old = store.directory()
        self.addCleanup(store.set_directory, old)

    def test_a_new_directory_is_used_and_starts_empty(self):
        with tempfile.TemporaryDirectory() as directory:
            store.set_directory(directory)
            self.assertEqual(os.path.realpath(store.directory()), os.path.realpath(directory))
            self.assertEqual(store.stats(), store.StoreStats(0, 0, 0, 0))
            store.set_capacity_mb(64)
            store.set_size_eviction(True)

    def test_an_unusable_directory_turns_the_store_off_and_stats_say_why(self):
        with tempfile.NamedTemporaryFile() as a_file:
            below_a_file = os.path.join(a_file.name, "store")
            store.set_directory(below_a_file)
            with self.assertRaises(unicache.StoreError) as caught:
                store.stats()
        self.assertIn(below_a_file, caught.exception.message)

    def test_disabling_and_enabling(self):
        store.set_enabled(False)
        store.set_enabled(True)
        store.stats()

    def test_a_malformed_remote_url_changes_nothing_and_quotes_no_password(self):
        with self.assertRaises(unicache.InvalidArgument) as caught:
            store.set_remote("redis://:hunter2@cache.example:notaport")
        self.assertNotIn("hunter2", str(caught.exception))
        with self.assertRaises(unicache.InvalidArgument):
            store.set_remote("http://cache.example")
        store.set_remote(None)


class Blobs(unittest.TestCase):
    device = store.DeviceIdentity("platform", "device", "1.0", "driver 2")

    def test_a_blob_round_trips_and_has_a_stable_id(self):
        blob = store.serialize_blob(self.device, b"the key", b"\x00binary\xff")
        self.assertEqual(store.deserialize_blob(self.device, blob), (b"the key", b"\x00binary\xff"))
        blob_id = store.blob_id(self.device, b"the key")
        self.assertRegex(blob_id, r"^[0-9a-f]{32}$")
        self.assertEqual(blob_id, store.blob_id(self.device, b"the key"))

    def test_a_blob_of_another_device_or_truncated_is_refused(self):
        blob = store.serialize_blob(self.device, b"k", b"binary")
        other = store.DeviceIdentity("platform", "another device", "1.0", "driver 2")
        with self.assertRaises(unicache.InvalidArgument) as caught:
            store.deserialize_blob(other, blob)
        self.assertIn("another device", caught.exception.message)
        with self.assertRaises(unicache.InvalidArgument):
            store.deserialize_blob(self.device, blob[:-2])


if __name__ == "__main__":
    unittest.main()
