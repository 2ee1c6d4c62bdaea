// bench_cpu_matmul_kernels: what the CPU backend's tiered kernels can gain.
// For the matmuls of bench_dynamic_shapes' BERT layer (H x H, H x F, F x H,
// each with a bias and GELU), and M from 24 to 3000, it times four oneDNN
// kernels on the same data, and prints each as a ratio to the first:
//   runtime dims   one primitive with M = DNNL_RUNTIME_DIM_VAL and the
//                  weight as given (what tiered mode's generic kernel runs)
//   per shape      a primitive for exactly M rows, weight packed once into
//                  the layout it picks (format_tag::any)
//   chunked        tiered mode's specialized kernel: a primitive for the
//                  class's rows (M rounded down to 1/16 of its power of
//                  two, at least 16), the remaining rows on runtime dims
//   chunked+pad    the same, the remaining rows copied onto a second
//                  primitive of one class step of rows
// Each figure is the best of five rounds of five calls after three warm-up
// calls, on every core the process may use (OMP_NUM_THREADS to change).
//
//   bench_cpu_matmul_kernels [--hidden H] [--ffn F]
#include <dnnl.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct kernel {
  dnnl::matmul prim;
  dnnl::memory weight;  // in the primitive's layout
};

// A fused matmul + bias + GELU for `m` rows (DNNL_RUNTIME_DIM_VAL: any).
kernel make(const dnnl::engine& eng, dnnl::stream& strm, std::int64_t m, std::int64_t k, std::int64_t n,
            bool packed, std::vector<float>& w) {
  const dnnl::memory::desc a({m, k}, dt::f32, tag::ab), c({m, n}, dt::f32, tag::ab);
  const dnnl::memory::desc b({k, n}, dt::f32, packed ? tag::any : tag::ab), bias({1, n}, dt::f32, tag::ab);
  dnnl::post_ops ops;
  ops.append_binary(dnnl::algorithm::binary_add, bias);
  ops.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, eng);
  dnnl::memory user({{k, n}, dt::f32, tag::ab}, eng, w.data());
  if (pd.weights_desc() == user.get_desc()) return {dnnl::matmul(pd), user};
  dnnl::memory weight(pd.weights_desc(), eng);
  dnnl::reorder(user, weight).execute(strm, user, weight);
  strm.wait();
  return {dnnl::matmul(pd), weight};
}

void run(const dnnl::engine& eng, dnnl::stream& strm, const kernel& kern, std::int64_t rows, std::int64_t k,
         std::int64_t n, float* a, float* c, float* bias) {
  dnnl::memory am({{rows, k}, dt::f32, tag::ab}, eng, a), cm({{rows, n}, dt::f32, tag::ab}, eng, c);
  dnnl::memory bm({{1, n}, dt::f32, tag::ab}, eng, bias);
  kern.prim.execute(strm, {{DNNL_ARG_SRC, am},
                           {DNNL_ARG_WEIGHTS, kern.weight},
                           {DNNL_ARG_DST, cm},
                           {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, bm}});
}

template <typename F>
double best_ms(dnnl::stream& strm, F&& f) {
  for (int i = 0; i < 3; ++i) f();
  strm.wait();
  double best = 1e300;
  for (int round = 0; round < 5; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; ++i) f();
    strm.wait();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / 5);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t hidden = 768, ffn = 3072;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--hidden" || a == "--ffn") && i + 1 < argc) {
      const long v = std::strtol(argv[++i], nullptr, 10);
      if (v < 1 || v > 16384) {
        std::fprintf(stderr, "bench_cpu_matmul_kernels: %s must be 1..16384\n", a.c_str());
        return 2;
      }
      (a == "--hidden" ? hidden : ffn) = v;
    } else {
      std::fprintf(stderr, "usage: bench_cpu_matmul_kernels [--hidden H] [--ffn F]\n");
      return 2;
    }
  }
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  constexpr std::int64_t kMaxRows = 3000;
  std::printf("%-16s %6s %8s %8s %17s %17s %17s\n", "K x N", "M", "rows", "rt ms", "per shape", "chunked",
              "chunked+pad");
  for (const auto& [k, n] : {std::pair{hidden, hidden}, std::pair{hidden, ffn}, std::pair{ffn, hidden}}) {
    std::vector<float> w(static_cast<std::size_t>(k * n)), bias(static_cast<std::size_t>(n), 0.1f);
    std::vector<float> a(static_cast<std::size_t>(kMaxRows * k)), c(static_cast<std::size_t>(kMaxRows * n));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 13) * 0.01f - 0.06f;
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) * 0.1f - 0.3f;
    const kernel runtime = make(eng, strm, DNNL_RUNTIME_DIM_VAL, k, n, false, w);
    for (const std::int64_t m : {24, 48, 100, 200, 400, 788, 1500, 3000}) {
      const int bits = std::bit_width(static_cast<std::uint64_t>(m));
      const std::int64_t step = std::max<std::int64_t>(16, std::int64_t{1} << std::max(0, bits - 4));
      const std::int64_t rows = m / step * step, rest = m - rows;
      const kernel shape = make(eng, strm, m, k, n, true, w);
      const kernel fixed = make(eng, strm, rows, k, n, true, w);
      const kernel padded = make(eng, strm, step, k, n, true, w);
      std::vector<float> scratch(static_cast<std::size_t>(step * (k + n)));
      const double rt = best_ms(strm, [&] { run(eng, strm, runtime, m, k, n, a.data(), c.data(), bias.data()); });
      const double ps = best_ms(strm, [&] { run(eng, strm, shape, m, k, n, a.data(), c.data(), bias.data()); });
      const double ch = best_ms(strm, [&] {
        run(eng, strm, fixed, rows, k, n, a.data(), c.data(), bias.data());
        if (rest) run(eng, strm, runtime, rest, k, n, a.data() + rows * k, c.data() + rows * n, bias.data());
      });
      const double pad = best_ms(strm, [&] {
        run(eng, strm, fixed, rows, k, n, a.data(), c.data(), bias.data());
        if (!rest) return;
        std::copy(a.data() + rows * k, a.data() + m * k, scratch.data());
        run(eng, strm, padded, step, k, n, scratch.data(), scratch.data() + step * k, bias.data());
        strm.wait();
        std::copy(scratch.data() + step * k, scratch.data() + step * k + rest * n, c.data() + rows * n);
      });
      const std::string kn = std::to_string(k) + " x " + std::to_string(n);
      std::printf("%-16s %6lld %8lld %8.3f %8.3f (%5.2fx) %8.3f (%5.2fx) %8.3f (%5.2fx)\n", kn.c_str(),
                  static_cast<long long>(m), static_cast<long long>(rows), rt, ps, ps / rt, ch, ch / rt, pad,
                  pad / rt);
    }
  }
  return 0;
}
