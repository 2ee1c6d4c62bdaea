// The oneDNN CPU backend, as an outside project uses it: one MatMul.
#include <cstdio>
#include <vector>

#include <unicache/compiler.hpp>
#include <unicache/graph.hpp>
#include <unicache/onednn_cpu.hpp>

int main() {
  unicache::graph g;
  auto x = g.tensor({-1, 2});
  auto w = g.tensor({2, 2});
  auto y = g.tensor({-1, 2});
  g.add_op(unicache::op_kind::matmul, {x, w}, {y});
  g.finalize();
  unicache::engine eng = unicache::onednn_cpu::make_engine();
  unicache::stream strm = unicache::make_stream(eng);
  unicache::compiled_partition cp = unicache::compile(g.partitions()[0], {{1, 2}, {2, 2}}, eng);
  std::vector<float> xv{1, 2}, wv{3, 4, 5, 6}, yv(2);
  cp.execute(strm, {{cp.inputs()[0], xv.data()}, {cp.inputs()[1], wv.data()}}, {{cp.outputs()[0], yv.data()}});
  const bool ok = yv[0] == 13 && yv[1] == 16;  // [1 2] x [[3 4] [5 6]]
  std::printf("consumer_onednn_cpu: %s (%g %g)\n", ok ? "ok" : "wrong", yv[0], yv[1]);
  return ok ? 0 : 1;
}
