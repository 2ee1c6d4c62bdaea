"""The JSON form of a graph: Graph.to_json and Graph.from_json through the C interface."""
import json
import unittest

import numpy as np

import unicache
from unicache import OpAttr, OpKind
from support import MatMulBlock, cpu_engine, random


def attention_graph() -> unicache.Graph:
    """Scores of q and k (a batched MatMul with k transposed), a Softmax, heads moved by a
    Transpose, and a LayerNorm with BERT's epsilon."""
    g = unicache.Graph()
    q, k = g.add_tensor([12, -1, 64]), g.add_tensor([12, -1, 64])
    scores, probs = g.add_tensor([12, -1, -1]), g.add_tensor([12, -1, -1])
    heads, moved = g.add_tensor([-1, 12, -1, 64]), g.add_tensor([-1, -1, 12, 64])
    x, gamma, beta, y = g.add_tensor([-1, 64]), g.add_tensor([64], True), g.add_tensor([64], True), g.add_tensor([-1, 64])
    g.add_op(OpKind.MATMUL, [q, k], [scores], transpose_b=True)
    g.add_op(OpKind.SOFTMAX, [scores], [probs])
    g.set_op_attr_ints(g.add_op(OpKind.TRANSPOSE, [heads], [moved]), OpAttr.PERMUTATION, [0, 2, 1, 3])
    g.set_op_attr(g.add_op(OpKind.LAYER_NORM, [x, gamma, beta], [y]), OpAttr.EPSILON, 1e-12)
    return g


class GraphJson(unittest.TestCase):
    def test_a_graph_round_trips_with_equal_fingerprints(self):
        for g in (MatMulBlock(16, 8, OpKind.ADD, OpKind.GELU_ERF).graph, attention_graph()):
            g.finalize()
            read = unicache.Graph.from_json(g.to_json())
            self.assertEqual([p.fingerprint for p in read.partitions], [p.fingerprint for p in g.partitions])
            self.assertEqual([p.inputs for p in read.partitions], [p.inputs for p in g.partitions])
            self.assertEqual(read.to_json(), g.to_json())

    def test_the_document_is_json_of_the_documented_schema(self):
        doc = json.loads(attention_graph().to_json())
        self.assertEqual((doc["format"], doc["version"]), ("unicache-graph", 1))
        self.assertEqual(doc["tensors"][0], {"id": 1, "shape": [12, -1, 64], "constant": False})
        self.assertEqual(doc["ops"][0], {"kind": "MatMul", "inputs": [1, 2], "outputs": [3],
                                         "transpose_a": False, "transpose_b": True})
        self.assertEqual(doc["ops"][2]["permutation"], [0, 2, 1, 3])
        self.assertEqual(doc["ops"][3]["epsilon"], 1e-12)
        self.assertEqual(doc["outputs"], [])
        self.assertNotIn("requests", doc)

    def test_requests_are_written_for_tensors_or_their_ids(self):
        block = MatMulBlock(16, 8)
        x = block.inputs[0]
        doc = json.loads(block.graph.to_json(requests=[{x: [4, 16]}, {x.id: (9, 16)}]))
        self.assertEqual(doc["requests"], [{str(x.id): [4, 16]}, {str(x.id): [9, 16]}])
        with self.assertRaises(unicache.InvalidGraph) as caught:
            block.graph.to_json(requests=[{x: [4, 15]}])
        self.assertIn(f"tensor {x.id}: [4,15] does not fit its declared shape [-1,16]", caught.exception.message)
        with self.assertRaises(unicache.InvalidGraph) as caught:
            block.graph.to_json(requests=[{}])
        self.assertIn("has no shape in the request", caught.exception.message)
        with self.assertRaises(unicache.InvalidArgument):
            block.graph.to_json(requests=[{x: [-1, 16]}])
        with self.assertRaises(unicache.InvalidArgument):
            block.graph.to_json(requests=[[4, 16]])
        self.assertIsInstance(unicache.Graph.from_json(block.graph.to_json(requests=[{x: [4, 16]}])), unicache.Graph)

    def test_malformed_documents_raise_invalid_graph_naming_the_place(self):
        doc = json.loads(MatMulBlock(16, 8).graph.to_json())
        doc["ops"][1]["inputs"][1] = 17
        with self.assertRaises(unicache.InvalidGraph) as caught:
            unicache.Graph.from_json(json.dumps(doc))
        self.assertEqual(caught.exception.status, unicache.Status.INVALID_GRAPH)
        self.assertIn("graph JSON: ops[1].inputs[1]: tensor 17 is not declared", caught.exception.message)
        for text, place in [("", "at byte 0: expected '{'"), ("[" * 10000, "at byte 0: expected '{'"),
                            ('{"format": "unicache-graph", "version": 1,', "at byte 42"),
                            ('{"format": "unicache-graph", "version": 2, "tensors": [], "ops": []}', "version 2"),
                            (b'{"format": "\xff"}', 'format: "\\xff" is not "unicache-graph"')]:
            with self.assertRaises(unicache.InvalidGraph) as caught:
                unicache.Graph.from_json(text)
            self.assertIn(place, caught.exception.message)
        with self.assertRaises(unicache.InvalidArgument):
            unicache.Graph.from_json(None)  # type: ignore[arg-type]

    def test_a_graph_read_from_json_compiles_and_computes_the_same(self):
        block = MatMulBlock(16, 8, OpKind.ADD, OpKind.RELU)
        engine = cpu_engine()
        read = unicache.Graph.from_json(block.graph.to_json())
        (part,) = read.partitions
        x = random((5, 16), 7)
        (out,) = part.compile(block.shapes(5), engine).execute(engine.stream(), [x] + block.weights)
        np.testing.assert_allclose(out, block.reference(x), rtol=1e-4, atol=1e-4)
        read.close()
        with self.assertRaises(unicache.InvalidHandle):
            read.to_json()


if __name__ == "__main__":
    unittest.main()
