#include "unicache/graph.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <limits>
#include <optional>
#include <set>
#include <utility>

#include "unicache/op_geometry.hpp"

namespace unicache {
namespace {

using shape = std::vector<std::int64_t>;

// The MLP of the example: x[-1,768] -> MatMul W1 -> Add b1 -> GELU -> MatMul W2 -> Add b2.
struct mlp {
  graph g;
  logical_tensor x, w1, b1, h, hb, a, w2, b2, y, yb;
  explicit mlp(int unrelated_tensors_first = 0) {
    for (int i = 0; i < unrelated_tensors_first; ++i) g.tensor({3});
    x = g.tensor({-1, 768});
    w1 = g.tensor({768, 3072}, tensor_property::constant);
    b1 = g.tensor({3072}, tensor_property::constant);
    h = g.tensor({-1, 3072});
    hb = g.tensor({-1, 3072});
    a = g.tensor({-1, 3072});
    w2 = g.tensor({3072, 768}, tensor_property::constant);
    b2 = g.tensor({768}, tensor_property::constant);
    y = g.tensor({-1, 768});
    yb = g.tensor({-1, 768});
    g.add_op(op_kind::matmul, {x, w1}, {h});
    g.add_op(op_kind::add, {h, b1}, {hb});
    g.add_op(op_kind::gelu_erf, {hb}, {a});
    g.add_op(op_kind::matmul, {a, w2}, {y});
    g.add_op(op_kind::add, {b2, y}, {yb});
    g.finalize();
  }
};

std::string finalize_error(graph& g) {
  try {
    g.finalize();
  } catch (const graph_error& e) {
    return e.what();
  }
  return "";
}

TEST(Graph, FusesMatMulBinaryEltwiseChainsIntoOnePartitionEach) {
  mlp m;
  const auto& parts = m.g.partitions();
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].pattern(), partition::kind::fused_matmul);
  EXPECT_EQ(parts[0].ops().size(), 3u);
  EXPECT_EQ(parts[1].ops().size(), 2u);
  // Inputs: A, B, then each post-op operand.
  ASSERT_EQ(parts[0].inputs().size(), 3u);
  EXPECT_EQ(parts[0].inputs()[0].id, m.x.id);
  EXPECT_EQ(parts[0].inputs()[1].id, m.w1.id);
  EXPECT_EQ(parts[0].inputs()[2].id, m.b1.id);
  EXPECT_EQ(parts[1].inputs()[2].id, m.b2.id) << "the operand of Add(b2, y) is b2, wherever it stands";
  EXPECT_EQ(parts[1].outputs()[0].id, m.yb.id);
}

TEST(Graph, EveryOpLandsInExactlyOnePartition) {
  graph g;
  auto x = g.tensor({4, 8}), w = g.tensor({8, 8}), t1 = g.tensor({4, 8}), t2 = g.tensor({4, 8}),
       t3 = g.tensor({4, 8}), t4 = g.tensor({4, 8}), t5 = g.tensor({4, 8});
  g.add_op(op_kind::matmul, {x, w}, {t1});
  g.add_op(op_kind::relu, {t1}, {t2});
  g.add_op(op_kind::add, {t2, x}, {t3});  // binary after eltwise: not fused
  g.add_op(op_kind::softmax, {t3}, {t4});
  g.add_op(op_kind::multiply, {t4, t4}, {t5});
  g.finalize();
  std::multiset<std::uint64_t> seen;
  for (const auto& p : g.partitions()) {
    for (const auto& o : p.ops()) seen.insert(o.id);
  }
  EXPECT_EQ(seen, (std::multiset<std::uint64_t>{1, 2, 3, 4, 5}));
  ASSERT_EQ(g.partitions().size(), 4u);
  EXPECT_EQ(g.partitions()[0].ops().size(), 2u) << "MatMul + ReLU";
  EXPECT_EQ(g.partitions()[1].pattern(), partition::kind::binary);
  EXPECT_EQ(g.partitions()[2].pattern(), partition::kind::softmax);
}

TEST(Graph, AnIntermediateUsedOutsideTheChainEndsTheFusion) {
  graph g;
  auto x = g.tensor({2, 3}), w = g.tensor({3, 4}), mm = g.tensor({2, 4}), r = g.tensor({2, 4}), s = g.tensor({2, 4});
  g.add_op(op_kind::matmul, {x, w}, {mm});
  g.add_op(op_kind::relu, {mm}, {r});
  g.add_op(op_kind::sigmoid, {mm}, {s});  // mm has two readers
  g.finalize();
  EXPECT_EQ(g.partitions().size(), 3u);
  EXPECT_EQ(g.partitions()[0].ops().size(), 1u);
}

// A frontend that reads the MatMul's output itself (a torch op between
// partitions) gets it as a partition's output: the chain ends there.
TEST(Graph, AMarkedOutputEndsTheFusedChain) {
  graph g;
  auto x = g.tensor({-1, 8}), w = g.tensor({8, 4}, tensor_property::constant), b = g.tensor({4});
  auto mm = g.tensor({-1, 4}), s = g.tensor({-1, 4}), y = g.tensor({-1, 4});
  g.add_op(op_kind::matmul, {x, w}, {mm});
  g.add_op(op_kind::add, {mm, b}, {s});
  g.add_op(op_kind::relu, {s}, {y});
  g.finalize();
  ASSERT_EQ(g.partitions().size(), 1u);
  g.mark_output(s);
  g.finalize();
  ASSERT_EQ(g.partitions().size(), 2u);
  EXPECT_EQ(g.partitions()[0].outputs()[0].id, s.id);
  EXPECT_EQ(g.partitions()[0].ops().size(), 2u);
  EXPECT_EQ(g.partitions()[1].pattern(), partition::kind::eltwise);
  logical_tensor ghost{99, data_type::f32, {4}, tensor_property::variable};
  EXPECT_THROW(g.mark_output(ghost), graph_error);
}

TEST(Graph, PartitionsComeInDependencyOrder) {
  // The fused chain's Add reads a tensor produced by an op that comes after
  // the MatMul in op order: that op's partition must run first.
  graph g;
  auto x = g.tensor({2, 3}), w = g.tensor({3, 4}), mm = g.tensor({2, 4});
  auto z = g.tensor({2, 4}), zr = g.tensor({2, 4}), out = g.tensor({2, 4});
  g.add_op(op_kind::matmul, {x, w}, {mm});
  g.add_op(op_kind::relu, {z}, {zr});
  g.add_op(op_kind::add, {mm, zr}, {out});
  g.finalize();
  ASSERT_EQ(g.partitions().size(), 2u);
  EXPECT_EQ(g.partitions()[0].ops()[0].kind, op_kind::relu);
  EXPECT_EQ(g.partitions()[1].ops().size(), 2u);
}

TEST(Graph, FingerprintIsTheSameForTheSameGraphWhateverTheTensorIds) {
  mlp a, b, shifted(5);
  for (std::size_t i = 0; i < a.g.partitions().size(); ++i) {
    EXPECT_EQ(a.g.partitions()[i].fingerprint(), b.g.partitions()[i].fingerprint());
    EXPECT_EQ(a.g.partitions()[i].fingerprint(), shifted.g.partitions()[i].fingerprint());
    EXPECT_EQ(a.g.partitions()[i].fingerprint().size(), 32u);
  }
  EXPECT_NE(a.g.partitions()[0].fingerprint(), a.g.partitions()[1].fingerprint());
}

TEST(Graph, FingerprintIsTheSameInAnotherProcess) {
  mlp here;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    mlp there;
    const std::string fp = there.g.partitions()[0].fingerprint();
    (void)!::write(fds[1], fp.data(), fp.size());
    ::_exit(0);
  }
  char buf[64] = {};
  const ssize_t n = ::read(fds[0], buf, sizeof buf);
  ::waitpid(pid, nullptr, 0);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0), here.g.partitions()[0].fingerprint());
}

TEST(Graph, FingerprintChangesWithStructure) {
  auto fp = [](bool transpose_b, std::int64_t k, tensor_property wp, op_kind post) {
    graph g;
    auto x = g.tensor({-1, k}), w = g.tensor(transpose_b ? std::vector<std::int64_t>{16, k} : std::vector<std::int64_t>{k, 16}, wp);
    auto mm = g.tensor({-1, 16}), o = g.tensor({-1, 16});
    g.add_op(op_kind::matmul, {x, w}, {mm}, false, transpose_b);
    g.add_op(post, {mm}, {o});
    g.finalize();
    return g.partitions()[0].fingerprint();
  };
  const std::string base = fp(false, 8, tensor_property::constant, op_kind::relu);
  EXPECT_NE(base, fp(true, 8, tensor_property::constant, op_kind::relu));
  EXPECT_NE(base, fp(false, 9, tensor_property::constant, op_kind::relu));
  EXPECT_NE(base, fp(false, 8, tensor_property::variable, op_kind::relu));
  EXPECT_NE(base, fp(false, 8, tensor_property::constant, op_kind::gelu_tanh));
}

TEST(GraphValidation, UnknownInputNamesOpAndTensor) {
  graph g;
  auto y = g.tensor({2});
  logical_tensor ghost{99, data_type::f32, {2}, tensor_property::variable};
  g.add_op(op_kind::relu, {ghost}, {y});
  const std::string err = finalize_error(g);
  EXPECT_NE(err.find("op 1 (ReLU)"), std::string::npos) << err;
  EXPECT_NE(err.find("tensor 99"), std::string::npos) << err;
}

TEST(GraphValidation, CycleIsRejected) {
  graph g;
  auto a = g.tensor({2}), b = g.tensor({2});
  g.add_op(op_kind::relu, {a}, {b});
  g.add_op(op_kind::tanh, {b}, {a});
  const std::string err = finalize_error(g);
  EXPECT_NE(err.find("cycle"), std::string::npos) << err;
  EXPECT_NE(err.find("op "), std::string::npos) << err;
}

TEST(GraphValidation, ShapeMismatchesNameTheOpAndShapes) {
  {
    graph g;
    auto x = g.tensor({4, 5}), w = g.tensor({6, 7}), y = g.tensor({4, 7});
    g.add_op(op_kind::matmul, {x, w}, {y});
    const std::string err = finalize_error(g);
    EXPECT_NE(err.find("op 1 (MatMul)"), std::string::npos) << err;
    EXPECT_NE(err.find("[4,5]"), std::string::npos) << err;
  }
  {
    graph g;
    auto a = g.tensor({4, 5}), b = g.tensor({3, 5}), y = g.tensor({4, 5});
    g.add_op(op_kind::add, {a, b}, {y});
    EXPECT_NE(finalize_error(g).find("do not broadcast"), std::string::npos);
  }
  {
    graph g;
    auto a = g.tensor({4, 5}), y = g.tensor({4, 6});
    g.add_op(op_kind::sigmoid, {a}, {y});
    const std::string err = finalize_error(g);
    EXPECT_NE(err.find("output tensor 2"), std::string::npos) << err;
  }
  {
    graph g;  // -1 agrees with anything
    auto x = g.tensor({-1, 5}), w = g.tensor({5, -1}), y = g.tensor({3, 7});
    g.add_op(op_kind::matmul, {x, w}, {y});
    EXPECT_EQ(finalize_error(g), "");
  }
}

TEST(GraphValidation, WrongArityDoubleWriterAndConstantOutputAreRejected) {
  {
    graph g;
    auto a = g.tensor({2}), y = g.tensor({2});
    g.add_op(op_kind::add, {a}, {y});
    EXPECT_NE(finalize_error(g).find("takes 2 input(s)"), std::string::npos);
  }
  {
    graph g;
    auto a = g.tensor({2}), y = g.tensor({2});
    g.add_op(op_kind::relu, {a}, {y});
    g.add_op(op_kind::tanh, {a}, {y});
    EXPECT_NE(finalize_error(g).find("writes too"), std::string::npos);
  }
  {
    graph g;
    auto a = g.tensor({2}), y = g.tensor({2}, tensor_property::constant);
    g.add_op(op_kind::relu, {a}, {y});
    EXPECT_NE(finalize_error(g).find("constant"), std::string::npos);
  }
  graph g;
  EXPECT_THROW(g.tensor({0, 3}), graph_error);
  EXPECT_THROW(g.tensor({-2}), graph_error);
  EXPECT_THROW(g.partitions(), graph_error) << "partitions() before finalize()";
}

// A LayerNorm block as a transformer has it: its own partition, of kind
// layer_norm, reading x, gamma and beta in that order.
TEST(GraphLayerNorm, IsAPartitionOfItsOwnReadingXGammaAndBeta) {
  graph g;
  auto x = g.tensor({-1, -1, 768}), gamma = g.tensor({768}, tensor_property::constant);
  auto beta = g.tensor({768}, tensor_property::constant), y = g.tensor({-1, -1, 768});
  g.set_attribute(g.add_op(op_kind::layer_norm, {x, gamma, beta}, {y}), op_attribute::epsilon, 1e-12f);
  g.finalize();
  ASSERT_EQ(g.partitions().size(), 1u);
  const partition& p = g.partitions()[0];
  EXPECT_EQ(p.pattern(), partition::kind::layer_norm);
  ASSERT_EQ(p.inputs().size(), 3u);
  EXPECT_EQ(p.inputs()[1].id, gamma.id);
  EXPECT_EQ(p.inputs()[2].id, beta.id);
  EXPECT_EQ(p.ops()[0].epsilon, 1e-12f);
}

TEST(GraphLayerNorm, EpsilonIsPartOfTheFingerprint) {
  auto fp = [](std::optional<float> epsilon) {
    graph g;
    auto x = g.tensor({-1, 8}), gamma = g.tensor({8}), beta = g.tensor({8}), y = g.tensor({-1, 8});
    const std::uint64_t id = g.add_op(op_kind::layer_norm, {x, gamma, beta}, {y});
    if (epsilon) g.set_attribute(id, op_attribute::epsilon, *epsilon);
    g.finalize();
    return g.partitions()[0].fingerprint();
  };
  EXPECT_EQ(fp(std::nullopt), fp(kDefaultLayerNormEpsilon));
  EXPECT_NE(fp(std::nullopt), fp(1e-12f));
}

TEST(GraphLayerNorm, BadParametersAndEpsilonsNameTheOp) {
  {
    graph g;  // gamma of the wrong length
    auto x = g.tensor({4, 8}), gamma = g.tensor({7}), beta = g.tensor({8}), y = g.tensor({4, 8});
    g.add_op(op_kind::layer_norm, {x, gamma, beta}, {y});
    const std::string err = finalize_error(g);
    EXPECT_NE(err.find("op 1 (LayerNorm): gamma (tensor 2) has shape [7]"), std::string::npos) << err;
  }
  {
    graph g;  // beta of rank 2
    auto x = g.tensor({4, 8}), gamma = g.tensor({8}), beta = g.tensor({1, 8}), y = g.tensor({4, 8});
    g.add_op(op_kind::layer_norm, {x, gamma, beta}, {y});
    EXPECT_NE(finalize_error(g).find("beta (tensor 3)"), std::string::npos);
  }
  {
    graph g;  // without beta
    auto x = g.tensor({4, 8}), gamma = g.tensor({8}), y = g.tensor({4, 8});
    g.add_op(op_kind::layer_norm, {x, gamma}, {y});
    EXPECT_NE(finalize_error(g).find("takes 3 input(s)"), std::string::npos);
  }
  graph g;
  auto x = g.tensor({4, 8}), gamma = g.tensor({8}), beta = g.tensor({8}), y = g.tensor({4, 8}), z = g.tensor({4, 8});
  const std::uint64_t ln = g.add_op(op_kind::layer_norm, {x, gamma, beta}, {y});
  const std::uint64_t relu = g.add_op(op_kind::relu, {y}, {z});
  EXPECT_THROW(g.set_attribute(ln, op_attribute::epsilon, -1e-5f), graph_error);
  EXPECT_THROW(g.set_attribute(ln, op_attribute::epsilon, std::numeric_limits<float>::quiet_NaN()), graph_error);
  EXPECT_THROW(g.set_attribute(ln, op_attribute::epsilon, std::numeric_limits<float>::infinity()), graph_error);
  EXPECT_THROW(g.set_attribute(relu, op_attribute::epsilon, 1e-5f), graph_error);
  EXPECT_THROW(g.set_attribute(99, op_attribute::epsilon, 1e-5f), graph_error);
  g.set_attribute(ln, op_attribute::epsilon, 0.f);  // allowed: torch's LayerNorm takes eps=0 too
  g.finalize();
  EXPECT_EQ(g.partitions()[0].ops()[0].epsilon, 0.f) << "a rejected value changed nothing";
}

// Llama's RMSNorm: a partition of its own reading x and gamma, its epsilon
// in the fingerprint, a wrong gamma or a beta named; the eltwise Sqrt, Rsqrt
// and SiLU fuse after a MatMul as the other eltwise ops do.
TEST(GraphRmsNorm, IsAPartitionOfItsOwnReadingXAndGamma) {
  auto build = [](float epsilon, std::int64_t gamma_length, bool with_beta) {
    auto g = std::make_unique<graph>();
    auto x = g->tensor({-1, 8}), gamma = g->tensor({gamma_length}, tensor_property::constant), y = g->tensor({-1, 8});
    std::vector<logical_tensor> in{x, gamma};
    if (with_beta) in.push_back(g->tensor({8}));
    g->set_attribute(g->add_op(op_kind::rms_norm, in, {y}), op_attribute::epsilon, epsilon);
    return g;
  };
  auto g = build(1e-6f, 8, false);
  g->finalize();
  ASSERT_EQ(g->partitions().size(), 1u);
  EXPECT_EQ(g->partitions()[0].pattern(), partition::kind::rms_norm);
  EXPECT_EQ(g->partitions()[0].inputs().size(), 2u);
  EXPECT_EQ(g->partitions()[0].ops()[0].epsilon, 1e-6f);
  auto other = build(1e-5f, 8, false);
  other->finalize();
  EXPECT_NE(g->partitions()[0].fingerprint(), other->partitions()[0].fingerprint());
  const std::string wrong_gamma = finalize_error(*build(1e-6f, 7, false));
  EXPECT_NE(wrong_gamma.find("op 1 (RMSNorm): gamma (tensor 2) has shape [7]"), std::string::npos) << wrong_gamma;
  EXPECT_NE(finalize_error(*build(1e-6f, 8, true)).find("takes 2 input(s)"), std::string::npos);

  graph chain;
  auto x = chain.tensor({-1, 16}), w = chain.tensor({16, 8}, tensor_property::constant);
  auto mm = chain.tensor({-1, 8}), s = chain.tensor({-1, 8}), r = chain.tensor({-1, 8});
  chain.add_op(op_kind::matmul, {x, w}, {mm});
  chain.add_op(op_kind::silu, {mm}, {s});
  chain.add_op(op_kind::sqrt, {s}, {r});
  chain.finalize();
  ASSERT_EQ(chain.partitions().size(), 1u) << "MatMul -> SiLU -> Sqrt is one fused partition";
}

// Attention's head split as a frontend maps it: a partition of its own,
// whose output shape is the input's permuted (-1 dims too), and whose
// permutation is part of the fingerprint.
TEST(GraphTranspose, IsAPartitionOfItsOwnWithThePermutedShape) {
  auto build = [](std::vector<std::int64_t> permutation, std::vector<std::int64_t> out_shape) {
    graph g;
    auto x = g.tensor({-1, -1, 12, 64}), y = g.tensor(std::move(out_shape));
    g.set_attribute(g.add_op(op_kind::transpose, {x}, {y}), op_attribute::permutation, permutation);
    g.finalize();
    return g;
  };
  const graph heads = build({0, 2, 1, 3}, {-1, 12, -1, 64});
  ASSERT_EQ(heads.partitions().size(), 1u);
  const partition& p = heads.partitions()[0];
  EXPECT_EQ(p.pattern(), partition::kind::transpose);
  EXPECT_EQ(p.ops()[0].permutation, (std::vector<std::int64_t>{0, 2, 1, 3}));
  EXPECT_NE(p.fingerprint(), build({0, 1, 2, 3}, {-1, -1, 12, 64}).partitions()[0].fingerprint());
  EXPECT_EQ(p.fingerprint(), build({0, 2, 1, 3}, {-1, 12, -1, 64}).partitions()[0].fingerprint());
  EXPECT_EQ(transpose_output_shape({2, 3, 5}, {2, 0, 1}, "t"), (std::vector<std::int64_t>{5, 2, 3}));
}

TEST(GraphTranspose, BadPermutationsAndOutputsNameTheOp) {
  for (const std::vector<std::int64_t>& bad : std::vector<std::vector<std::int64_t>>{
           {0, 1, 2}, {0, 1, 1, 3}, {0, 1, 2, 4}, {-1, 0, 1, 2}, {}, {0, 2, 1, 3, 4}}) {
    graph g;
    auto x = g.tensor({2, 3, 4, 5}), y = g.tensor({2, 4, 3, 5});
    g.set_attribute(g.add_op(op_kind::transpose, {x}, {y}), op_attribute::permutation, bad);
    const std::string err = finalize_error(g);
    EXPECT_NE(err.find("op 1 (Transpose): permutation " + shape_to_string(bad) + " is not one of the axes of [2,3,4,5]"),
              std::string::npos)
        << err;
  }
  {
    graph g;  // the output's shape is not the permuted input's
    auto x = g.tensor({2, 3, 4, 5}), y = g.tensor({2, 3, 4, 5});
    g.set_attribute(g.add_op(op_kind::transpose, {x}, {y}), op_attribute::permutation, {0, 2, 1, 3});
    EXPECT_NE(finalize_error(g).find("produces [2,4,3,5]"), std::string::npos);
  }
  {
    graph g;  // never given a permutation
    auto x = g.tensor({2, 3}), y = g.tensor({3, 2});
    g.add_op(op_kind::transpose, {x}, {y});
    EXPECT_NE(finalize_error(g).find("permutation [] is not one of the axes"), std::string::npos);
  }
  graph g;
  auto x = g.tensor({2, 3}), y = g.tensor({3, 2}), z = g.tensor({3, 2});
  const std::uint64_t t = g.add_op(op_kind::transpose, {x}, {y});
  const std::uint64_t relu = g.add_op(op_kind::relu, {y}, {z});
  EXPECT_THROW(g.set_attribute(relu, op_attribute::permutation, {1, 0}), graph_error);
  EXPECT_THROW(g.set_attribute(t, op_attribute::epsilon, 1e-5f), graph_error);
  EXPECT_THROW(g.set_attribute(t, op_attribute::epsilon, std::vector<std::int64_t>{1, 0}), graph_error);
  EXPECT_THROW(g.set_attribute(t, op_attribute::permutation, std::vector<std::int64_t>(7, 0)), graph_error);
  EXPECT_THROW(g.set_attribute(99, op_attribute::permutation, {1, 0}), graph_error);
  g.set_attribute(t, op_attribute::permutation, {1, 0});
  g.finalize();
  EXPECT_EQ(g.partitions()[0].pattern(), partition::kind::transpose);
}

// Attention: a partition of its own reading Q, K, V and a mask; its
// output's shape from either layout; scale, causal and layout part of the
// fingerprint.
TEST(GraphAttention, IsAPartitionOfItsOwnInEitherLayout) {
  auto build = [](attention_layout layout, bool causal, float scale) {
    graph g;
    const bool blhd = layout == attention_layout::blhd;
    auto q = g.tensor(blhd ? shape{-1, -1, 12, 64} : shape{-1, 12, -1, 64});
    auto k = g.tensor(blhd ? shape{-1, -1, 12, 64} : shape{-1, 12, -1, 64});
    auto v = g.tensor(blhd ? shape{-1, -1, 12, 32} : shape{-1, 12, -1, 32});
    auto mask = g.tensor({-1, 1, 1, -1}), y = g.tensor(blhd ? shape{-1, -1, 12, 32} : shape{-1, 12, -1, 32});
    const std::uint64_t op = g.add_op(op_kind::attention, {q, k, v, mask}, {y});
    g.set_attribute(op, op_attribute::layout, std::vector<std::int64_t>{blhd ? 1 : 0});
    g.set_attribute(op, op_attribute::causal, std::vector<std::int64_t>{causal ? 1 : 0});
    if (scale != 0.f) g.set_attribute(op, op_attribute::scale, scale);
    g.finalize();
    return g;
  };
  const graph bhld = build(attention_layout::bhld, false, 0.f);
  ASSERT_EQ(bhld.partitions().size(), 1u);
  const partition& p = bhld.partitions()[0];
  EXPECT_EQ(p.pattern(), partition::kind::attention);
  EXPECT_EQ(p.inputs().size(), 4u);
  const std::string fp = p.fingerprint();
  EXPECT_EQ(fp, build(attention_layout::bhld, false, 0.f).partitions()[0].fingerprint());
  EXPECT_NE(fp, build(attention_layout::bhld, true, 0.f).partitions()[0].fingerprint());
  EXPECT_NE(fp, build(attention_layout::bhld, false, 0.5f).partitions()[0].fingerprint());
  EXPECT_EQ(build(attention_layout::blhd, false, 0.f).partitions()[0].ops()[0].layout, attention_layout::blhd);
  const shape q{2, 5, 3, 8}, k{2, 7, 3, 8}, v{2, 7, 3, 4}, m{2, 1, 5, 7};
  EXPECT_EQ(attention_output_shape({&q, &k, &v, &m}, attention_layout::blhd, "a"), (shape{2, 5, 3, 4}));
  const shape q3{6, 5, 8}, k3{6, 7, 8}, v3{6, 7, 4};
  EXPECT_EQ(attention_output_shape({&q3, &k3, &v3}, attention_layout::bhld, "a"), (shape{6, 5, 4}));
}

TEST(GraphAttention, ShapesThatDoNotAgreeAndBadAttributesNameTheOp) {
  struct bad_case {
    shape q, k, v, mask;  // mask empty: none
    attention_layout layout;
    const char* says;
  };
  for (const bad_case& c : {
           bad_case{{2, 3, 5, 8}, {2, 3, 7, 4}, {2, 3, 7, 8}, {}, attention_layout::bhld, "different head sizes"},
           bad_case{{2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 6, 8}, {}, attention_layout::bhld, "different lengths"},
           bad_case{{2, 3, 5, 8}, {2, 4, 7, 8}, {2, 4, 7, 8}, {}, attention_layout::bhld, "batch or head dims differ"},
           bad_case{{5, 8}, {7, 8}, {7, 8}, {}, attention_layout::bhld, "rank 3 or 4"},
           bad_case{{3, 5, 8}, {3, 7, 8}, {3, 7, 8}, {}, attention_layout::blhd, "needs rank-4"},
           bad_case{{2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 8}, {2, 1, 5, 6}, attention_layout::bhld,
                    "mask does not broadcast to the scores [2,3,5,7]"},
           bad_case{{2, 5, 3, 8}, {2, 7, 3, 8}, {2, 7, 3, 8}, {1, 3, 7, 7}, attention_layout::blhd,
                    "mask does not broadcast to the scores [2,3,5,7]"}}) {
    graph g;
    std::vector<logical_tensor> in{g.tensor(c.q), g.tensor(c.k), g.tensor(c.v)};
    if (!c.mask.empty()) in.push_back(g.tensor(c.mask));
    const std::uint64_t op = g.add_op(op_kind::attention, in, {g.tensor(c.q)});
    g.set_attribute(op, op_attribute::layout, std::vector<std::int64_t>{static_cast<std::int64_t>(c.layout)});
    const std::string err = finalize_error(g);
    EXPECT_NE(err.find("op 1 (Attention)"), std::string::npos) << err;
    EXPECT_NE(err.find(c.says), std::string::npos) << err;
  }
  graph g;
  auto q = g.tensor({2, 3, 5, 8}), y = g.tensor({2, 3, 5, 8}), z = g.tensor({2, 3, 5, 8});
  const std::uint64_t two = g.add_op(op_kind::attention, {q, q}, {y});
  EXPECT_NE(finalize_error(g).find("takes 3 or 4 inputs (Q, K, V, an optional mask)"), std::string::npos);
  const std::uint64_t relu = g.add_op(op_kind::relu, {y}, {z});
  EXPECT_THROW(g.set_attribute(relu, op_attribute::scale, 0.5f), graph_error);
  EXPECT_THROW(g.set_attribute(relu, op_attribute::causal, std::vector<std::int64_t>{1}), graph_error);
  for (float bad : {0.f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) EXPECT_THROW(g.set_attribute(two, op_attribute::scale, bad), graph_error);
  for (const std::vector<std::int64_t>& bad : std::vector<std::vector<std::int64_t>>{{}, {2}, {-1}, {0, 1}}) {
    EXPECT_THROW(g.set_attribute(two, op_attribute::causal, bad), graph_error);
    EXPECT_THROW(g.set_attribute(two, op_attribute::layout, bad), graph_error);
  }
  EXPECT_THROW(g.set_attribute(two, op_attribute::epsilon, 1e-5f), graph_error);
}

// The copy the backends run for a Transpose: axes of 1 dropped, neighbours
// that read one run of input merged.
TEST(GraphTranspose, ThePlanMergesRunsAndDropsAxesOfOne) {
  auto plan = [](std::vector<std::int64_t> shape, std::vector<std::int64_t> permutation) {
    const transpose_plan p = plan_transpose(shape, permutation);
    return std::pair{p.dims, p.strides};
  };
  using v = std::vector<std::int64_t>;
  EXPECT_EQ(plan({2, 7, 12, 64}, {0, 2, 1, 3}), std::pair(v{2, 12, 7, 64}, v{7 * 12 * 64, 64, 12 * 64, 1}));
  EXPECT_EQ(plan({2, 3, 4}, {0, 1, 2}), std::pair(v{24}, v{1})) << "the identity is one run";
  EXPECT_EQ(plan({2, 3, 4, 5}, {2, 3, 0, 1}), std::pair(v{20, 6}, v{1, 20})) << "two runs swapped";
  EXPECT_EQ(plan({1, 1, 1}, {2, 0, 1}), std::pair(v{1}, v{1}));
  EXPECT_EQ(plan({4, 1, 5}, {2, 1, 0}), std::pair(v{5, 4}, v{1, 5}));
  EXPECT_EQ(plan({3, 1, 4}, {0, 2, 1}), std::pair(v{12}, v{1})) << "moving an axis of 1 moves nothing";
}

TEST(GraphShapes, BroadcastAndMatMulRules) {
  EXPECT_EQ(broadcast_shape({4, 1, 3}, {5, 1}, "t"), (std::vector<std::int64_t>{4, 5, 3}));
  EXPECT_EQ(broadcast_shape({3}, {2, 3}, "t"), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(matmul_output_shape({2, 3}, {3, 4}, false, false, "t"), (std::vector<std::int64_t>{2, 4}));
  EXPECT_EQ(matmul_output_shape({3, 2}, {4, 3}, true, true, "t"), (std::vector<std::int64_t>{2, 4}));
  EXPECT_EQ(matmul_output_shape({5, 2, 3}, {3, 4}, false, false, "t"), (std::vector<std::int64_t>{5, 2, 4}));
  EXPECT_THROW(matmul_output_shape({2}, {2, 3}, false, false, "t"), graph_error);
}

}  // namespace
}  // namespace unicache
