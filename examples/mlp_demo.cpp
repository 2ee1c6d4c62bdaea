// mlp_demo: what a graph frontend does with unicache.
//
// Builds a transformer FFN block, 768 -> 3072 (GELU) -> 768, with constant
// weights; partitions it (two fused MatMul+bias(+GELU) partitions); then
// runs it for several batch sizes, as a server does when requests of
// different lengths arrive. A repeated shape is one cache lookup. With
// shape-agnostic kernels (the default) one oneDNN primitive per partition
// serves every batch and reads the weights as they are; with
// UNICACHE_KERNEL_SHAPES=specialized each new batch size creates primitives,
// which pick their own weight layout, and each weight is packed once per
// layout into the constant tensor cache. Prints what the caches did.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "example_usage.hpp"
#include "unicache/cache.hpp"
#include "unicache/compiler.hpp"
#include "unicache/graph.hpp"
#include "unicache/onednn_cpu.hpp"
#include "unicache/specialization.hpp"

namespace {

const char* const kUsage =
    "usage: mlp_demo\n"
    "\n"
    "What a graph frontend does with unicache: builds a transformer FFN block,\n"
    "768 -> 3072 (GELU) -> 768, with constant weights, partitions it, and runs\n"
    "it on the oneDNN CPU backend for batch sizes 1, 8, 32, 8, 1, 128 and 32,\n"
    "as a server does when requests of different lengths arrive. Prints each\n"
    "batch's compile and execute times and what the kernel cache, the constant\n"
    "tensor cache and oneDNN did. Takes no options; UNICACHE_KERNEL_SHAPES\n"
    "chooses the kernels (docs/configuration.md).\n";


}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) return unicache::examples::answer_argument("mlp_demo", kUsage, argv[1]);
  using namespace unicache;
  using clock = std::chrono::steady_clock;
  constexpr std::int64_t kHidden = 768, kFfn = 3072;

  graph g;
  auto x = g.tensor({-1, kHidden});
  auto w1 = g.tensor({kHidden, kFfn}, tensor_property::constant);
  auto b1 = g.tensor({kFfn}, tensor_property::constant);
  auto h = g.tensor({-1, kFfn}), hb = g.tensor({-1, kFfn}), a = g.tensor({-1, kFfn});
  auto w2 = g.tensor({kFfn, kHidden}, tensor_property::constant);
  auto b2 = g.tensor({kHidden}, tensor_property::constant);
  auto y = g.tensor({-1, kHidden}), out = g.tensor({-1, kHidden});
  g.add_op(op_kind::matmul, {x, w1}, {h});
  g.add_op(op_kind::add, {h, b1}, {hb});
  g.add_op(op_kind::gelu_erf, {hb}, {a});
  g.add_op(op_kind::matmul, {a, w2}, {y});
  g.add_op(op_kind::add, {y, b2}, {out});
  g.finalize();
  std::printf("MLP 768 -> 3072 (GELU) -> 768: %zu partitions\n", g.partitions().size());
  for (const partition& p : g.partitions()) {
    std::printf("  partition %s: %zu ops fused, %zu inputs\n", p.fingerprint().c_str(), p.ops().size(), p.inputs().size());
  }

  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  auto random = [&](std::size_t n) {
    std::vector<float> v(n);
    for (auto& e : v) e = dist(rng);
    return v;
  };
  std::vector<float> w1v = random(kHidden * kFfn), b1v = random(kFfn), w2v = random(kFfn * kHidden), b2v = random(kHidden);

  engine eng = onednn_cpu::make_engine();
  stream strm = make_stream(eng);
  const partition& first = g.partitions()[0];
  const partition& second = g.partitions()[1];

  std::printf("\n%8s %12s %12s %12s\n", "batch", "compile us", "execute us", "out[0]");
  for (std::int64_t batch : {1, 8, 32, 8, 1, 128, 32}) {
    std::vector<float> xv = random(static_cast<std::size_t>(batch * kHidden));
    std::vector<float> av(static_cast<std::size_t>(batch * kFfn)), ov(static_cast<std::size_t>(batch * kHidden));
    const auto t0 = clock::now();
    compiled_partition c1 = compile(first, {{batch, kHidden}, {kHidden, kFfn}, {kFfn}}, eng);
    compiled_partition c2 = compile(second, {{batch, kFfn}, {kFfn, kHidden}, {kHidden}}, eng);
    const auto t1 = clock::now();
    c1.execute(strm, {{c1.inputs()[0], xv.data()}, {c1.inputs()[1], w1v.data()}, {c1.inputs()[2], b1v.data()}},
               {{c1.outputs()[0], av.data()}});
    c2.execute(strm, {{c2.inputs()[0], av.data()}, {c2.inputs()[1], w2v.data()}, {c2.inputs()[2], b2v.data()}},
               {{c2.outputs()[0], ov.data()}});
    const auto t2 = clock::now();
    std::printf("%8lld %12.1f %12.1f %12.5f\n", static_cast<long long>(batch),
                std::chrono::duration<double, std::micro>(t1 - t0).count(),
                std::chrono::duration<double, std::micro>(t2 - t1).count(), ov[0]);
  }

  const cache_stats kernels = kernel_cache().stats(eng.scope());
  const cache_stats weights = constant_tensor_cache().stats(eng.scope());
  std::printf("\nkernel cache (compiled partitions and oneDNN primitives): %llu misses, %llu hits, %llu entries\n",
              static_cast<unsigned long long>(kernels.misses), static_cast<unsigned long long>(kernels.hits),
              static_cast<unsigned long long>(kernels.entries));
  std::printf("constant tensor cache (packed weights): %llu packs, %llu reuses, %.1f MB\n",
              static_cast<unsigned long long>(weights.misses), static_cast<unsigned long long>(weights.hits),
              static_cast<double>(weights.bytes) / (1 << 20));
  const onednn_cpu::backend_stats backend = onednn_cpu::stats();
  std::printf("oneDNN: %llu primitives created, %llu weights packed (kernel shapes: %s)\n",
              static_cast<unsigned long long>(backend.primitives_created),
              static_cast<unsigned long long>(backend.weights_packed),
              std::string(to_string(current_kernel_shapes())).c_str());
  if (current_kernel_shapes() == kernel_shapes::adaptive) {
    wait_for_specializations();
    const specialization_stats specialized = specialization::stats();
    std::printf("adaptive kernels: %llu shape classes, %llu specialized in the background, %llu runs on them\n",
                static_cast<unsigned long long>(specialized.classes), static_cast<unsigned long long>(specialized.ready),
                static_cast<unsigned long long>(specialized.specialized_executions));
    std::printf("(every batch size runs at once on one runtime-dims matmul per partition; a size class used\n"
                " enough to repay a build gets primitives of its own, which pack the weights once)\n");
  } else if (current_kernel_shapes() == kernel_shapes::agnostic && backend.weights_packed == 0) {
    std::printf("(four distinct batch sizes; a repeated size costs a lookup. One runtime-dims matmul per\n"
                " partition serves every batch and reads the weights in the layout given, so nothing is\n"
                " packed; UNICACHE_KERNEL_SHAPES=specialized builds per-batch primitives that pack them)\n");
  } else if (current_kernel_shapes() == kernel_shapes::agnostic) {
    std::printf("(four distinct batch sizes; a repeated size costs a lookup. One runtime-dims matmul per\n"
                " partition serves every batch; on this CPU it wants its own weight layout, so each\n"
                " weight is packed once and reused for every batch)\n");
  } else {
    std::printf("(four distinct batch sizes: primitives per size; a repeated size costs a lookup. Each\n"
                " weight is packed once per layout the primitives choose, which rarely depends on the batch)\n");
  }
  return 0;
}
