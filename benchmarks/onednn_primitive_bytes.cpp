// onednn_primitive_bytes: how much memory a oneDNN primitive holds, which
// oneDNN does not report: the resident-memory growth of 200 primitives held
// at once (oneDNN's own primitive cache off), after one made first (the
// library's one-time costs are not a primitive's). The oneDNN backend counts
// its kernel-cache entries with these figures (backends/onednn_cpu/src/primitives.hpp).
//
//   onednn_primitive_bytes          matmuls for 200 shapes (bias + GELU)
//   onednn_primitive_bytes runtime  matmuls with runtime dimensions
//   onednn_primitive_bytes eltwise  GELU eltwise primitives
#include <cstdio>
#include <fstream>
#include <string_view>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

namespace {

using namespace dnnl;

long resident_kb() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return resident * 4;
}

const char* const kUsage =
    "usage: onednn_primitive_bytes [shape|runtime|eltwise]\n"
    "\n"
    "How much memory a oneDNN primitive holds, which oneDNN does not report:\n"
    "the resident-memory growth of 200 primitives held at once (oneDNN's own\n"
    "primitive cache off), after one made first.\n"
    "\n"
    "  shape    matmuls + bias + GELU for 200 shapes (the default)\n"
    "  runtime  matmuls with runtime dimensions\n"
    "  eltwise  GELU eltwise primitives\n";

}  // namespace

int main(int argc, char** argv) {
  const std::string_view kind = argc > 1 ? argv[1] : "shape";
  if (kind == "--help" || kind == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (argc > 2 || (kind != "shape" && kind != "runtime" && kind != "eltwise")) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const bool runtime = kind == "runtime";
  const bool eltwise = kind == "eltwise";
  set_primitive_cache_capacity(0);
  engine eng(engine::kind::cpu, 0);
  auto make = [&](int i) -> primitive {
    if (eltwise) {
      memory::desc d({16 + i, 3072}, memory::data_type::f32, memory::format_tag::ab);
      return eltwise_forward(eltwise_forward::primitive_desc(
          eltwise_forward::desc(prop_kind::forward_inference, algorithm::eltwise_gelu_tanh, d, 0.f, 0.f), eng));
    }
    // The BERT layer's projections: K 768, N 768 or 3072, M per request.
    const memory::dim m = runtime ? DNNL_RUNTIME_DIM_VAL : 16 + i;
    const memory::dim k = runtime ? 256 + 64 * (i % 64) : 768;
    const memory::dim n = i % 2 ? 768 : 3072;
    memory::desc a({m, k}, memory::data_type::f32, memory::format_tag::ab);
    memory::desc b({k, n}, memory::data_type::f32, runtime ? memory::format_tag::ab : memory::format_tag::any);
    memory::desc bias({1, n}, memory::data_type::f32, memory::format_tag::ab);
    memory::desc c({m, n}, memory::data_type::f32, memory::format_tag::ab);
    post_ops ops;
    ops.append_binary(algorithm::binary_add, bias);
    ops.append_eltwise(1.f, algorithm::eltwise_gelu_tanh, 0.f, 0.f);
    primitive_attr attr;
    attr.set_post_ops(ops);
    return matmul(matmul::primitive_desc(matmul::desc(a, b, c), attr, eng));
  };
  constexpr int kCount = 200;
  std::vector<primitive> held;
  held.push_back(make(kCount));
  const long before = resident_kb();
  for (int i = 0; i < kCount; ++i) held.push_back(make(i));
  const long grown = resident_kb() - before;
  std::printf("%.*s: %d primitives, resident +%ld KB, %.1f KB each\n", static_cast<int>(kind.size()), kind.data(), kCount,
              grown, grown / double(kCount));
  return 0;
}
