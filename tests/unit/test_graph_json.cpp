// The JSON form of a graph: round trips keep every partition's fingerprint,
// requests give each partition's input shapes, and malformed or oversized
// documents are a graph_error naming the place, never a crash or a hang.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "unicache/graph.hpp"

namespace unicache {
namespace {

using shape = std::vector<std::int64_t>;

std::vector<std::string> fingerprints(const graph& g) {
  std::vector<std::string> out;
  for (const partition& p : g.partitions()) out.push_back(p.fingerprint());
  return out;
}

// The graph_error's message for reading `json`; "" if it reads.
std::string read_error(const std::string& json) {
  try {
    graph_from_json(json);
  } catch (const graph_error& e) {
    return e.what();
  }
  return "";
}

// x[-1,768] -> MatMul W1 -> Add b1 -> GELU -> MatMul W2 -> Add b2.
graph mlp() {
  graph g;
  auto x = g.tensor({-1, 768}), w1 = g.tensor({768, 3072}, tensor_property::constant);
  auto b1 = g.tensor({3072}, tensor_property::constant), h = g.tensor({-1, 3072}), hb = g.tensor({-1, 3072});
  auto a = g.tensor({-1, 3072}), w2 = g.tensor({3072, 768}, tensor_property::constant);
  auto b2 = g.tensor({768}, tensor_property::constant), y = g.tensor({-1, 768}), yb = g.tensor({-1, 768});
  g.add_op(op_kind::matmul, {x, w1}, {h});
  g.add_op(op_kind::add, {h, b1}, {hb});
  g.add_op(op_kind::gelu_erf, {hb}, {a});
  g.add_op(op_kind::matmul, {a, w2}, {y});
  g.add_op(op_kind::add, {b2, y}, {yb});
  g.finalize();
  return g;
}

// A BERT layer's ops: attention as batched 3-D MatMuls with a Softmax, heads
// moved with Transposes, the feed-forward block, a residual Add and a
// LayerNorm with BERT's epsilon. Inputs are tensors 1 to 5.
struct bert_layer {
  graph g;
  logical_tensor x, q, k, v, heads, w1, b1, h, hb, a, w2, b2, y, yb, r, gamma, beta, out, scores, probs, ctx,
      ctx_t, heads_t;
  bert_layer() {
    x = g.tensor({-1, 768});
    q = g.tensor({12, -1, 64});
    k = g.tensor({12, -1, 64});
    v = g.tensor({12, -1, 64});
    heads = g.tensor({-1, 12, -1, 64});
    w1 = g.tensor({768, 3072}, tensor_property::constant);
    b1 = g.tensor({3072}, tensor_property::constant);
    h = g.tensor({-1, 3072});
    hb = g.tensor({-1, 3072});
    a = g.tensor({-1, 3072});
    w2 = g.tensor({3072, 768}, tensor_property::constant);
    b2 = g.tensor({768}, tensor_property::constant);
    y = g.tensor({-1, 768});
    yb = g.tensor({-1, 768});
    r = g.tensor({-1, 768});
    gamma = g.tensor({768}, tensor_property::constant);
    beta = g.tensor({768}, tensor_property::constant);
    out = g.tensor({-1, 768});
    scores = g.tensor({12, -1, -1});
    probs = g.tensor({12, -1, -1});
    ctx = g.tensor({12, -1, 64});
    ctx_t = g.tensor({-1, 12, 64});
    heads_t = g.tensor({-1, -1, 12, 64});
    g.add_op(op_kind::matmul, {q, k}, {scores}, false, true);
    g.add_op(op_kind::softmax, {scores}, {probs});
    g.add_op(op_kind::matmul, {probs, v}, {ctx});
    const std::uint64_t perm3 = g.add_op(op_kind::transpose, {ctx}, {ctx_t});
    g.set_attribute(perm3, op_attribute::permutation, shape{1, 0, 2});
    const std::uint64_t perm4 = g.add_op(op_kind::transpose, {heads}, {heads_t});
    g.set_attribute(perm4, op_attribute::permutation, shape{0, 2, 1, 3});
    g.add_op(op_kind::matmul, {x, w1}, {h});
    g.add_op(op_kind::add, {h, b1}, {hb});
    g.add_op(op_kind::gelu_tanh, {hb}, {a});
    g.add_op(op_kind::matmul, {a, w2}, {y});
    g.add_op(op_kind::add, {y, b2}, {yb});
    g.add_op(op_kind::add, {yb, x}, {r});
    const std::uint64_t ln = g.add_op(op_kind::layer_norm, {r, gamma, beta}, {out});
    g.set_attribute(ln, op_attribute::epsilon, 1e-12f);
    g.mark_output(yb);
    g.finalize();
  }
  // The request for 8 tokens (2 sequences of 4 for the 4-D transpose).
  shape_request request() const {
    return {{x.id, {8, 768}}, {q.id, {12, 8, 64}}, {k.id, {12, 8, 64}}, {v.id, {12, 8, 64}}, {heads.id, {2, 12, 4, 64}}};
  }
};

TEST(GraphJson, AnMlpRoundTripsWithEqualFingerprints) {
  const graph g = mlp();
  const graph_document doc = graph_from_json(to_json(g));
  ASSERT_TRUE(doc.g.finalized());
  EXPECT_EQ(fingerprints(doc.g), fingerprints(g));
  EXPECT_EQ(doc.g.partitions().size(), 2u);
  EXPECT_TRUE(doc.requests.empty());
  EXPECT_EQ(to_json(doc.g), to_json(g)) << "what is read back writes the same text";
}

TEST(GraphJson, ABertLayerRoundTripsWithEqualFingerprintsAndAttributes) {
  const bert_layer layer;
  const graph_document doc = graph_from_json(to_json(layer.g));
  EXPECT_EQ(fingerprints(doc.g), fingerprints(layer.g));
  ASSERT_EQ(doc.g.ops().size(), layer.g.ops().size());
  for (std::size_t i = 0; i < doc.g.ops().size(); ++i) {
    const op &read = doc.g.ops()[i], &built = layer.g.ops()[i];
    EXPECT_EQ(read.kind, built.kind);
    EXPECT_EQ(read.inputs, built.inputs);
    EXPECT_EQ(read.transpose_b, built.transpose_b);
    EXPECT_EQ(read.epsilon, built.epsilon) << "epsilon is written so that it reads back as the same float";
    EXPECT_EQ(read.permutation, built.permutation);
  }
  EXPECT_EQ(doc.g.marked_outputs(), layer.g.marked_outputs());
}

TEST(GraphJson, ToJsonWritesTheDocumentedSchemaAndNoRequestsWithoutThem) {
  const std::string json = to_json(bert_layer().g);
  for (const char* part : {"\"format\": \"unicache-graph\"", "\"version\": 1", "{\"id\": 1, \"shape\": [-1, 768], \"constant\": false}",
                           "{\"kind\": \"MatMul\", \"inputs\": [2, 3], \"outputs\": [19], \"transpose_a\": false, \"transpose_b\": true}",
                           "\"kind\": \"LayerNorm\", \"inputs\": [15, 16, 17], \"outputs\": [18], \"epsilon\": 1e-12}",
                           "\"permutation\": [0, 2, 1, 3]", "\"kind\": \"GELU(tanh)\"", "\"outputs\": [14]"}) {
    EXPECT_NE(json.find(part), std::string::npos) << part << "\nin\n" << json;
  }
  EXPECT_EQ(json.find("requests"), std::string::npos);
  EXPECT_EQ(json.find("epsilon"), json.rfind("epsilon")) << "an attribute only where the kind has it";
}

TEST(GraphJson, ReadsAHandWrittenDocumentWithMembersInAnyOrder) {
  const graph_document doc = graph_from_json(R"( {
    "ops": [{"outputs": [2], "inputs": [1], "kind": "ReLU"}],
    "version": 1,
    "tensors": [{"shape": [-1, 4], "id": 1, "dtype": "f32"}, {"id": 2, "shape": [-1, 4], "constant": false}],
    "format": "unicache-graph",
    "requests": [{"1": [3, 4]}]
  } )");
  ASSERT_EQ(doc.g.partitions().size(), 1u);
  EXPECT_EQ(doc.g.partitions()[0].ops()[0].kind, op_kind::relu);
  ASSERT_EQ(doc.requests.size(), 1u);
  EXPECT_EQ(doc.requests[0].at(1), (shape{3, 4}));
}

TEST(GraphJson, EveryOpKindHasANameThatReadsBack) {
  graph g;
  auto a = g.tensor({-1, 4}), b = g.tensor({4}, tensor_property::constant);
  logical_tensor last = a;
  for (op_kind kind : {op_kind::multiply, op_kind::relu, op_kind::gelu_erf, op_kind::sigmoid, op_kind::tanh}) {
    auto next = g.tensor({-1, 4});
    if (is_binary(kind)) {
      g.add_op(kind, {last, b}, {next});
    } else {
      g.add_op(kind, {last}, {next});
    }
    last = next;
  }
  const graph_document doc = graph_from_json(to_json(g));
  ASSERT_EQ(doc.g.ops().size(), g.ops().size());
  for (std::size_t i = 0; i < g.ops().size(); ++i) EXPECT_EQ(doc.g.ops()[i].kind, g.ops()[i].kind);
  g.finalize();
  EXPECT_EQ(fingerprints(doc.g), fingerprints(g));
}

TEST(GraphJson, AttentionRoundTripsWithItsAttributes) {
  graph g;
  auto q = g.tensor({-1, -1, 12, 64}), k = g.tensor({-1, -1, 12, 64}), v = g.tensor({-1, -1, 12, 64});
  auto mask = g.tensor({-1, 1, 1, -1}), y = g.tensor({-1, -1, 12, 64}), z = g.tensor({-1, -1, 12, 64});
  const std::uint64_t a = g.add_op(op_kind::attention, {q, k, v, mask}, {y});
  g.set_attribute(a, op_attribute::scale, 0.125f);
  g.set_attribute(a, op_attribute::causal, std::vector<std::int64_t>{1});
  g.set_attribute(a, op_attribute::layout, std::vector<std::int64_t>{1});
  g.add_op(op_kind::attention, {y, k, v}, {z});  // the defaults
  const std::string text = to_json(g);
  EXPECT_NE(text.find("\"scale\": 0.125, \"causal\": true, \"layout\": \"blhd\""), std::string::npos) << text;
  const graph_document doc = graph_from_json(text);
  g.finalize();
  EXPECT_EQ(fingerprints(doc.g), fingerprints(g));
  const op& read = doc.g.ops()[0];
  EXPECT_EQ(read.scale, 0.125f);
  EXPECT_TRUE(read.causal);
  EXPECT_EQ(read.layout, attention_layout::blhd);
  EXPECT_EQ(doc.g.ops()[1].scale, 0.f);
  EXPECT_FALSE(doc.g.ops()[1].causal);
  EXPECT_EQ(doc.g.ops()[1].layout, attention_layout::bhld);
  const std::string wrong = text.substr(0, text.find("\"blhd\"")) + "\"bshd\"" + text.substr(text.find("\"blhd\"") + 6);
  try {
    graph_from_json(wrong);
    ADD_FAILURE() << "an unknown layout read";
  } catch (const graph_error& e) {
    EXPECT_NE(std::string(e.what()).find("ops[0].layout: \"bshd\" is not an attention layout (bhld, blhd)"),
              std::string::npos)
        << e.what();
  }
}

TEST(GraphJson, RequestsRoundTripAndGiveEachPartitionsInputShapesInOrder) {
  const bert_layer layer;
  const shape_request one = layer.request();
  shape_request two = one;
  two[layer.x.id] = {1, 768};
  const graph_document doc = graph_from_json(to_json(layer.g, {one, two}));
  ASSERT_EQ(doc.requests.size(), 2u);
  EXPECT_EQ(doc.requests[0], one);
  EXPECT_EQ(doc.requests[1], two);

  // Every tensor's shape for 8 tokens, as the layer computes it.
  std::map<std::uint64_t, shape> concrete(one.begin(), one.end());
  const auto& L = layer;
  for (auto [t, s] : std::vector<std::pair<logical_tensor, shape>>{
           {L.w1, {768, 3072}}, {L.b1, {3072}}, {L.h, {8, 3072}}, {L.hb, {8, 3072}}, {L.a, {8, 3072}},
           {L.w2, {3072, 768}}, {L.b2, {768}}, {L.y, {8, 768}}, {L.yb, {8, 768}}, {L.r, {8, 768}},
           {L.gamma, {768}}, {L.beta, {768}}, {L.scores, {12, 8, 8}}, {L.probs, {12, 8, 8}}, {L.ctx, {12, 8, 64}},
           {L.ctx_t, {8, 12, 64}}}) {
    concrete[t.id] = s;
  }
  const auto shapes = partition_input_shapes(doc.g, doc.requests[0]);
  const auto& parts = doc.g.partitions();
  ASSERT_EQ(shapes.size(), parts.size());
  for (std::size_t p = 0; p < parts.size(); ++p) {
    ASSERT_EQ(shapes[p].size(), parts[p].inputs().size()) << "partition " << p;
    for (std::size_t i = 0; i < shapes[p].size(); ++i) {
      EXPECT_EQ(shapes[p][i], concrete.at(parts[p].inputs()[i].id)) << "partition " << p << " input " << i;
    }
  }
  EXPECT_EQ(partition_input_shapes(doc.g, doc.requests[1])[0].size(), shapes[0].size());
}

TEST(GraphJson, PartitionInputShapesNamesTheTensorOfAMissingOrDisagreeingShape) {
  const bert_layer layer;
  auto error_for = [&](const shape_request& request) {
    try {
      partition_input_shapes(layer.g, request);
    } catch (const graph_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  shape_request missing = layer.request();
  missing.erase(layer.v.id);
  EXPECT_NE(error_for(missing).find("tensor 4, an input declared [12,-1,64], has no shape"), std::string::npos)
      << error_for(missing);
  shape_request misfit = layer.request();
  misfit[layer.x.id] = {8, 512};
  EXPECT_NE(error_for(misfit).find("tensor 1: [8,512] does not fit its declared shape [-1,768]"), std::string::npos)
      << error_for(misfit);
  shape_request unknown = layer.request();
  unknown[layer.x.id] = {-1, 768};
  EXPECT_NE(error_for(unknown).find("tensor 1: [-1,768] does not fit"), std::string::npos) << error_for(unknown);
  shape_request not_input = layer.request();
  not_input[layer.h.id] = {8, 3072};
  EXPECT_NE(error_for(not_input).find("tensor 8 is written by op 6 (MatMul)"), std::string::npos)
      << error_for(not_input);
  shape_request disagree = layer.request();
  disagree[layer.k.id] = {12, 5, 64};
  disagree[layer.v.id] = {12, 3, 64};  // probs [12,8,5] x v [12,3,64]: K differs
  EXPECT_NE(error_for(disagree).find("op 3 (MatMul) reading tensor 20, 4: MatMul inner dimensions differ"),
            std::string::npos)
      << error_for(disagree);
  graph unfinalized;
  unfinalized.tensor({2});
  EXPECT_THROW(partition_input_shapes(unfinalized, {}), graph_error);
}

TEST(GraphJson, ToJsonRefusesWhatTheReaderWouldRefuse) {
  graph rank9;
  rank9.tensor({1, 1, 1, 1, 1, 1, 1, 1, 1});
  EXPECT_THROW(to_json(rank9), graph_error);
  graph flagged;
  auto a = flagged.tensor({2}), b = flagged.tensor({2});
  flagged.add_op(op_kind::relu, {a}, {b}, true, false);
  EXPECT_THROW(to_json(flagged), graph_error);
  const bert_layer layer;
  EXPECT_THROW(to_json(layer.g, {shape_request{{layer.x.id, {8, 768}}}}), graph_error) << "q, k, v, heads missing";
}

// The start of a document with tensors 1 [-1,4] and 2 [-1,4]; `ops` and what follows complete it.
std::string document_with(const std::string& ops, const std::string& rest = "") {
  return R"({"format": "unicache-graph", "version": 1, "tensors": [{"id": 1, "shape": [-1, 4]}, )"
         R"({"id": 2, "shape": [-1, 4]}, {"id": 3, "shape": [4], "constant": true}], "ops": [)" +
         ops + "]" + rest + "}";
}

TEST(GraphJson, MalformedDocumentsThrowAGraphErrorNamingThePlace) {
  const std::string relu = R"({"kind": "ReLU", "inputs": [1], "outputs": [2]})";
  ASSERT_EQ(read_error(document_with(relu)), "");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {document_with(relu).substr(0, 60), "graph JSON: at byte 60: "},
      {"", "at byte 0: expected '{'"},
      {"[1]", "at byte 0: expected '{'"},
      {document_with(relu) + "x", "expected the end of the text, got 'x'"},
      {document_with(relu + ","), "ops[1]: expected an object, got no JSON value"},
      {document_with(R"({"kind": "ReLU", "inputs": "1", "outputs": [2]})"),
       "ops[0].inputs: expected an array, got a string (at byte"},
      {document_with(R"({"kind": "Conv", "inputs": [1], "outputs": [2]})"), "ops[0].kind: \"Conv\" is not an op kind (MatMul, Add"},
      {document_with(R"({"kind": "ReLU", "inputs": [17], "outputs": [2]})"), "graph JSON: ops[0].inputs[0]: tensor 17 is not declared"},
      {document_with(R"({"kind": "Add", "inputs": [1, 0], "outputs": [2]})"), "ops[0].inputs[1]: tensor 0 is not declared"},
      {R"({"format": "unicache-graph", "version": 1, "tensors": [{"id": 2, "shape": [1]}], "ops": []})",
       "tensors[0].id: 2, but the tensor at this position has id 1"},
      {document_with(R"({"kind": "ReLU", "inputs": [123456789012345678901234], "outputs": [2]})"),
       "123456789012345678901234 is out of range (a 64-bit integer)"},
      {document_with(R"({"kind": "ReLU", "inputs": [1.5], "outputs": [2]})"), "1.5 is not an integer"},
      {document_with(R"({"kind": "ReLU", "inputs": [01], "outputs": [2]})"), "not a JSON number: a leading zero"},
      {document_with(R"({"kind": "ReLU", "inputs": [1], "outputs": [2], "epsilon": 1})"),
       "ops[0].epsilon: ReLU has no epsilon (LayerNorm and RMSNorm have)"},
      {document_with(R"({"kind": "LayerNorm", "inputs": [1, 3, 3], "outputs": [2], "epsilon": NaN})"),
       "ops[0].epsilon: expected a number, got no JSON value"},
      {document_with(R"({"kind": "LayerNorm", "inputs": [1, 3, 3], "outputs": [2], "epsilon": 1e999})"),
       "1e999 is out of range (a 32-bit float)"},
      {document_with(R"({"kind": "LayerNorm", "inputs": [1, 3, 3], "outputs": [2], "epsilon": -1})"),
       "ops[0].epsilon: op 1 (LayerNorm): epsilon"},
      {document_with(R"({"kind": "Transpose", "inputs": [1], "outputs": [2]})"), "ops[0]: a Transpose needs \"permutation\""},
      {document_with(R"({"kind": "ReLU", "inputs": [1], "outputs": [2], "colour": 1})"), "ops[0]: unknown key \"colour\""},
      {document_with(R"({"kind": "ReLU", "kind": "ReLU", "inputs": [1], "outputs": [2]})"), "ops[0]: the key \"kind\" twice"},
      {document_with(R"({"inputs": [1], "outputs": [2]})"), "ops[0]: no \"kind\""},
      {document_with(R"({"kind": "MatMul", "inputs": [1, 2], "outputs": [2]})"), "graph JSON: op 1 (MatMul)"},
      {document_with(relu, R"(, "outputs": [9])"), "outputs[0]: tensor 9 is not declared"},
      {R"({"format": "unicache-graph", "version": 2, "tensors": [], "ops": []})", "version 2 is not supported"},
      {R"({"format": "onnx", "version": 1, "tensors": [], "ops": []})", "format: \"onnx\" is not \"unicache-graph\""},
      {R"({"format": "unicache-graph", "tensors": [], "ops": []})", "the document: no \"version\""},
      {R"({"format": "unicache-graph", "version": 1, "tensors": [{"id": 1, "shape": [0, 4]}], "ops": []})",
       "tensors[0].shape: tensor 1: bad dimension 0"},
      {R"({"format": "unicache-graph", "version": 1, "tensors": [{"id": 1, "shape": [1,1,1,1,1,1,1,1,1]}], "ops": []})",
       "tensors[0].shape: more than 8 dimensions"},
      {R"({"format": "unicache-graph", "version": 1, "tensors": [{"id": 1, "shape": [2], "dtype": "f16"}], "ops": []})",
       "tensors[0].dtype: \"f16\" is not a dtype"},
      {document_with(relu, R"(, "requests": [{"2": [3, 4]}])"), "requests[0]: tensor 2 is written by op 1 (ReLU)"},
      {document_with(relu, R"(, "requests": [{"1": [-1, 4]}])"), "requests[0]: tensor 1: [-1,4] does not fit"},
      {document_with(relu, R"(, "requests": [{}])"), "requests[0]: tensor 1, an input declared [-1,4], has no shape"},
      {document_with(relu, R"(, "requests": [{"x": [1, 4]}])"), "requests[0]: the key \"x\" is not a tensor id"},
      {document_with(relu, R"(, "requests": [{"1": [1, 4], "1": [2, 4]}])"), "requests[0]: tensor 1 twice"},
      {std::string("{\"format\": \"unicache-graph\x01\"}"), "a control character (byte 0x01) in a string"},
  };
  for (const auto& [json, want] : cases) {
    const std::string got = read_error(json);
    EXPECT_NE(got.find(want), std::string::npos) << "reading: " << json << "\nwant: " << want << "\ngot:  " << got;
    EXPECT_EQ(got.rfind("graph JSON: ", 0), 0u) << got;
  }
}

TEST(GraphJson, TenThousandNestedBracketsAreAnErrorNotAStackOverflow) {
  const std::string deep(10000, '[');
  EXPECT_NE(read_error(deep).find("at byte 0: expected '{'"), std::string::npos);
  const std::string in_request = document_with("", R"(, "requests": [{"1": )" + deep);
  EXPECT_NE(read_error(in_request).find("requests[0][\"1\"][0]: expected a number, got an array"), std::string::npos)
      << read_error(in_request);
  const std::string in_tensors = R"({"format": "unicache-graph", "version": 1, "tensors": )" + std::string(1'000'000, '[');
  EXPECT_NE(read_error(in_tensors).find("tensors[0]: expected an object, got an array"), std::string::npos);
}

TEST(GraphJson, AnInputAbove64MiBIsRefusedBeforeItIsRead) {
  const std::string big(kGraphJsonMaxBytes + (std::size_t{1} << 20), ' ');
  EXPECT_NE(read_error(big).find("graph JSON: 68157440 bytes, more than the limit of 67108864"), std::string::npos)
      << read_error(big);
  const std::string long_number = document_with(R"({"kind": "ReLU", "inputs": [)" + std::string(1000, '7') + "]}");
  EXPECT_NE(read_error(long_number).find("longer than 64 characters"), std::string::npos);
  const std::string long_string = R"({"format": ")" + std::string(1 << 20, 'a') + "\"}";
  EXPECT_NE(read_error(long_string).find("a string longer than 64 bytes"), std::string::npos);
}

// A chain of `n` ReLUs after a MatMul (one fused partition of n + 1 ops),
// then n Softmaxes (a partition each): large graphs read in time linear in
// their size (a quadratic step would take hours here).
TEST(GraphJson, AGraphOfHalfAMillionOpsReadsInSeconds) {
  constexpr std::size_t n = 250'000;
  graph g;
  auto x = g.tensor({-1, 4}), w = g.tensor({4, 4}, tensor_property::constant), t = g.tensor({-1, 4});
  g.add_op(op_kind::matmul, {x, w}, {t});
  for (std::size_t i = 0; i < 2 * n; ++i) {
    auto next = g.tensor({-1, 4});
    g.add_op(i < n ? op_kind::relu : op_kind::softmax, {t}, {next});
    t = next;
  }
  const std::string json = to_json(g);
  const auto start = std::chrono::steady_clock::now();
  const graph_document doc = graph_from_json(json);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(doc.g.partitions().size(), n + 1);
  EXPECT_EQ(partition_input_shapes(doc.g, {{x.id, {3, 4}}}).back(), (std::vector<shape>{{3, 4}}));
  EXPECT_LT(seconds, 60.0) << json.size() << " bytes";
}

}  // namespace
}  // namespace unicache
