// bench_cpu_matmul_kernels: what the CPU backend's adaptive kernels can gain.
// For the matmuls of bench_dynamic_shapes' BERT layer (H x H, H x F, F x H,
// each with a bias and GELU), and M from 24 to 3000, it times four oneDNN
// kernels on the same data, and prints each as a ratio to the first:
//   runtime dims   one primitive with M = DNNL_RUNTIME_DIM_VAL and the
//                  weight as given (what adaptive mode's generic kernel runs)
//   per shape      a primitive for exactly M rows, weight packed once into
//                  the layout it picks (format_tag::any)
//   chunked        adaptive mode's specialized kernel: a primitive for the
//                  class's rows (M rounded down to 1/16 of its power of
//                  two, at least 16), the remaining rows on runtime dims
//   chunked+pad    the same, the remaining rows copied onto a second
//                  primitive of one class step of rows
// Each figure is the best of five rounds of five calls after three warm-up
// calls, on every core the process may use (OMP_NUM_THREADS to change).
//
// --shapes FILE times whole requests instead, at the M of a trace (the rows
// per request that bench_dynamic_shapes --shapes-out writes): the layer's six
// matmuls in order (Q, K and V from the input, the output projection from V,
// the FFN with GELU and back), each output the next one's input, at the 5%,
// 10%, ..., 95% quantiles of the trace's M, with
//   runtime dims   every matmul on the runtime-dims primitive
//   per shape      every matmul on a primitive for its M, built and its
//                  weight packed before timing starts: no compile at all,
//                  what no specialized kernel can beat with these primitives
//   inner product  the same with oneDNN's inner product (bias its own input)
//   chunked        adaptive mode's specialized kernel, every class ready
// The kernels take turns at each M, in an order that rotates each round:
// each times three requests after an untimed one, and the best of five
// such rounds is its figure. It prints
// each as a ratio to
// runtime dims per M, at the median (the 45-55% quantiles together) and over
// all quantiles together.
//
//   bench_cpu_matmul_kernels [--hidden H] [--ffn F] [--shapes FILE]
#include <dnnl.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct kernel {
  dnnl::primitive prim;
  dnnl::memory weight;        // in the primitive's layout
  bool inner_product = false;  // bias as the primitive's own input, not a post-op
};

// A fused matmul + bias (+ GELU) for `m` rows (DNNL_RUNTIME_DIM_VAL: any).
kernel make(const dnnl::engine& eng, dnnl::stream& strm, std::int64_t m, std::int64_t k, std::int64_t n,
            bool packed, std::vector<float>& w, bool gelu = true) {
  const dnnl::memory::desc a({m, k}, dt::f32, tag::ab), c({m, n}, dt::f32, tag::ab);
  const dnnl::memory::desc b({k, n}, dt::f32, packed ? tag::any : tag::ab), bias({1, n}, dt::f32, tag::ab);
  dnnl::post_ops ops;
  ops.append_binary(dnnl::algorithm::binary_add, bias);
  if (gelu) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
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

// The same matmul as an inner product for `m` rows: weights N x K (the K x N
// weight read transposed), packed once; the bias is its own input.
kernel make_inner_product(const dnnl::engine& eng, dnnl::stream& strm, std::int64_t m, std::int64_t k, std::int64_t n,
                          bool gelu, std::vector<float>& w) {
  const dnnl::memory::desc src({m, k}, dt::f32, tag::ab), dst({m, n}, dt::f32, tag::ab);
  const dnnl::memory::desc weights({n, k}, dt::f32, tag::any), bias({n}, dt::f32, tag::a);
  dnnl::post_ops ops;
  if (gelu) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  const dnnl::inner_product_forward::primitive_desc pd(
      dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_inference, src, weights, bias, dst), attr, eng);
  dnnl::memory user({{n, k}, dt::f32, tag::ba}, eng, w.data());
  dnnl::memory weight(pd.weights_desc(), eng);
  dnnl::reorder(user, weight).execute(strm, user, weight);
  strm.wait();
  return {dnnl::inner_product_forward(pd), weight, true};
}

void run(const dnnl::engine& eng, dnnl::stream& strm, const kernel& kern, std::int64_t rows, std::int64_t k,
         std::int64_t n, float* a, float* c, float* bias) {
  dnnl::memory am({{rows, k}, dt::f32, tag::ab}, eng, a), cm({{rows, n}, dt::f32, tag::ab}, eng, c);
  if (kern.inner_product) {
    dnnl::memory bm({{n}, dt::f32, tag::a}, eng, bias);
    kern.prim.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, kern.weight}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, cm}});
    return;
  }
  dnnl::memory bm({{1, n}, dt::f32, tag::ab}, eng, bias);
  kern.prim.execute(strm, {{DNNL_ARG_SRC, am},
                           {DNNL_ARG_WEIGHTS, kern.weight},
                           {DNNL_ARG_DST, cm},
                           {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, bm}});
}

// The rows of one class step of adaptive mode for M rows (1/16 of M's power of
// two, at least 16); a class's primitive has M rounded down to a multiple.
std::int64_t class_step(std::int64_t m) {
  const int bits = std::bit_width(static_cast<std::uint64_t>(m));
  return std::max<std::int64_t>(16, std::int64_t{1} << std::max(0, bits - 4));
}

template <typename F>
double best_ms(dnnl::stream& strm, F&& f, int rounds = 5, int calls = 5, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) f();
  strm.wait();
  double best = 1e300;
  for (int round = 0; round < rounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) f();
    strm.wait();
    best = std::min(best,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / calls);
  }
  return best;
}

// One matmul configuration of the layer, with every kernel --shapes times
// (per-M kernels built on first use, before timing).
struct layer_matmul {
  std::int64_t k, n;
  bool gelu;
  std::vector<float> w, bias;
  kernel runtime;
  std::map<std::pair<int, std::int64_t>, kernel> per_m;  // (kind, rows)

  enum kind { per_shape, inner_product };
  const kernel& for_rows(const dnnl::engine& eng, dnnl::stream& strm, kind which, std::int64_t m) {
    auto it = per_m.find({which, m});
    if (it == per_m.end()) {
      it = per_m.emplace(std::pair{which, m}, which == per_shape ? make(eng, strm, m, k, n, true, w, gelu)
                                                                 : make_inner_product(eng, strm, m, k, n, gelu, w))
               .first;
    }
    return it->second;
  }
};

// The trace's M per request, as bench_dynamic_shapes --shapes-out writes it
// (one number of 1..65536 per line, # comments). Empty, with a message, if
// the file cannot be read or a line is not such a number.
std::vector<std::int64_t> read_rows(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "bench_cpu_matmul_kernels: cannot read %s\n", path.c_str());
    return {};
  }
  std::vector<std::int64_t> rows;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    char* end = nullptr;
    const long long m = std::strtoll(line.c_str(), &end, 10);
    if (end == line.c_str() || *end != '\0' || m < 1 || m > 65536) {
      std::fprintf(stderr, "bench_cpu_matmul_kernels: %s:%d is not a row count of 1..65536\n", path.c_str(), number);
      return {};
    }
    rows.push_back(m);
  }
  if (rows.empty()) {
    std::fprintf(stderr, "bench_cpu_matmul_kernels: %s has no rows per request (bench_dynamic_shapes --shapes-out)\n",
                 path.c_str());
  }
  return rows;
}

int time_requests(std::int64_t hidden, std::int64_t ffn, const std::string& path) {
  std::vector<std::int64_t> trace = read_rows(path);
  if (trace.empty()) return 2;
  std::sort(trace.begin(), trace.end());
  std::vector<std::int64_t> quantiles;  // 5%, 10%, ..., 95%
  for (int q = 1; q < 20; ++q) quantiles.push_back(trace[trace.size() * q / 20]);
  const std::int64_t max_m = quantiles.back();

  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  std::vector<layer_matmul> mm;
  for (const auto& [k, n, gelu] : {std::tuple{hidden, hidden, false}, std::tuple{hidden, ffn, true},
                                   std::tuple{ffn, hidden, false}}) {
    layer_matmul x{k, n, gelu, std::vector<float>(static_cast<std::size_t>(k * n)),
                   std::vector<float>(static_cast<std::size_t>(n), 0.1f), {}, {}};
    for (std::size_t i = 0; i < x.w.size(); ++i) x.w[i] = static_cast<float>(i % 13) * 0.01f - 0.06f;
    x.runtime = make(eng, strm, DNNL_RUNTIME_DIM_VAL, k, n, false, x.w, gelu);
    mm.push_back(std::move(x));
  }
  const auto buffer = [&](std::int64_t columns) { return std::vector<float>(static_cast<std::size_t>(max_m * columns)); };
  std::vector<float> input = buffer(hidden), q = buffer(hidden), k = buffer(hidden), v = buffer(hidden);
  std::vector<float> o = buffer(hidden), h = buffer(ffn), y = buffer(hidden);
  for (std::size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>(i % 7) * 0.1f - 0.3f;

  enum strategy { runtime_dims, per_shape, inner_product, chunked, kStrategies };
  const char* names[kStrategies] = {"runtime dims", "per shape", "inner product", "chunked"};
  const auto matmul = [&](strategy s, layer_matmul& x, std::int64_t m, float* a, float* c) {
    switch (s) {
      case runtime_dims:
        return run(eng, strm, x.runtime, m, x.k, x.n, a, c, x.bias.data());
      case per_shape:
      case inner_product:
        return run(eng, strm,
                   x.for_rows(eng, strm, s == per_shape ? layer_matmul::per_shape : layer_matmul::inner_product, m),
                   m, x.k, x.n, a, c, x.bias.data());
      default: {
        const std::int64_t step = class_step(m), rows = m / step * step;
        if (rows == 0) return run(eng, strm, x.runtime, m, x.k, x.n, a, c, x.bias.data());
        run(eng, strm, x.for_rows(eng, strm, layer_matmul::per_shape, rows), rows, x.k, x.n, a, c, x.bias.data());
        if (rows < m) run(eng, strm, x.runtime, m - rows, x.k, x.n, a + rows * x.k, c + rows * x.n, x.bias.data());
      }
    }
  };
  const auto request = [&](strategy s, std::int64_t m) {
    matmul(s, mm[0], m, input.data(), q.data());
    matmul(s, mm[0], m, input.data(), k.data());
    matmul(s, mm[0], m, input.data(), v.data());
    matmul(s, mm[0], m, v.data(), o.data());
    matmul(s, mm[1], m, o.data(), h.data());
    matmul(s, mm[2], m, h.data(), y.data());
  };
  std::vector<std::array<double, kStrategies>> best(quantiles.size());
  for (auto& b : best) b.fill(1e300);
  for (const std::int64_t m : quantiles) {
    for (int s = 0; s < kStrategies; ++s) request(static_cast<strategy>(s), m);  // builds and warms up
  }
  strm.wait();
  for (int round = 0; round < 5; ++round) {
    for (std::size_t i = 0; i < quantiles.size(); ++i) {
      for (int turn = 0; turn < kStrategies; ++turn) {
        const int s = (turn + round) % kStrategies;  // each kernel goes first in some round
        best[i][s] = std::min(best[i][s], best_ms(
            strm, [&] { request(static_cast<strategy>(s), quantiles[i]); }, /*rounds=*/1, /*calls=*/3, /*warmup=*/1));
      }
    }
  }
  std::printf("%-8s %6s %10s", "quantile", "M", "rt ms");
  for (int s = 1; s < kStrategies; ++s) std::printf(" %14s", names[s]);
  std::printf("\n");
  std::array<double, kStrategies> all{}, median{};
  for (std::size_t i = 0; i < quantiles.size(); ++i) {
    std::printf("%7zu%% %6lld %10.3f", (i + 1) * 5, static_cast<long long>(quantiles[i]), best[i][0]);
    for (int s = 1; s < kStrategies; ++s) std::printf(" %13.3fx", best[i][s] / best[i][0]);
    std::printf("\n");
    for (int s = 0; s < kStrategies; ++s) {
      all[s] += best[i][s];
      if (i >= 8 && i <= 10) median[s] += best[i][s];  // the 45%, 50% and 55% quantiles
    }
  }
  std::printf("%-15s %10s", "median (45-55%)", "");
  for (int s = 1; s < kStrategies; ++s) std::printf(" %13.3fx", median[s] / median[0]);
  std::printf("\n%-15s %10s", "all quantiles", "");
  for (int s = 1; s < kStrategies; ++s) std::printf(" %13.3fx", all[s] / all[0]);
  std::printf("\n");
  return 0;
}

const char* const kUsage =
    "usage: bench_cpu_matmul_kernels [--hidden H] [--ffn F] [--shapes FILE]\n"
    "\n"
    "What the CPU backend's adaptive kernels can gain: for the matmuls of\n"
    "bench_dynamic_shapes' BERT layer (H x H, H x F, F x H, with bias and GELU)\n"
    "and M from 24 to 3000, times four oneDNN kernels on the same data (runtime\n"
    "dims, per shape, chunked, chunked+pad) and prints each as a ratio to the\n"
    "first. OMP_NUM_THREADS sets the cores.\n"
    "\n"
    "  --hidden H     the layer's hidden size, 1..16384 (default 768)\n"
    "  --ffn F        its FFN size, 1..16384 (default 3072)\n"
    "  --shapes FILE  time whole requests instead, at the rows per request of\n"
    "                 a trace (bench_dynamic_shapes --shapes-out writes one)\n";

}  // namespace

int main(int argc, char** argv) {
  std::int64_t hidden = 768, ffn = 3072;
  std::string shapes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--shapes" && i + 1 < argc && argv[i + 1][0] != '\0') {
      shapes = argv[++i];
    } else if ((a == "--hidden" || a == "--ffn") && i + 1 < argc) {
      const long v = std::strtol(argv[++i], nullptr, 10);
      if (v < 1 || v > 16384) {
        std::fprintf(stderr, "bench_cpu_matmul_kernels: %s must be 1..16384\n", a.c_str());
        return 2;
      }
      (a == "--hidden" ? hidden : ffn) = v;
    } else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      std::fputs(kUsage, stderr);
      return 2;
    }
  }
  if (!shapes.empty()) return time_requests(hidden, ffn, shapes);
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
      const std::int64_t step = class_step(m);
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
