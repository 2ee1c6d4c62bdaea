// bench_gemm_tiles: the generated GEMM kernel alone, for each of a list of
// tiles at each of a list of shapes, timed on the device (events around a
// run of launches): what the GPU backends' tile choices are made from.
//
// Each shape is a MatMul with a constant (packed) B and a bias Add, as a
// fused Linear runs it (and a GELU after it with --gelu); a split-K tile
// counts its gemm_reduce launch. With --batch N each shape is instead N
// products of variable operands with no post-op, as attention's MatMuls
// run (--transpose-b: B is N x K, as Q times K's transpose reads K;
// --bias rows|full: an Add after it of an M x N operand shared by the batch,
// as a causal or uniform mask's bias, or of one per product, as a mask that
// differs over the batch is read once expanded over the heads). The
// default shapes are the matmuls of a BERT-base layer (N x K of 768 x 768, 3072 x 768, 768 x 3072) at the
// quantiles of bench_dynamic_shapes' rows, and 4096^3; the default tiles
// are the backend's generic ones and every specialization candidate.
//
//   bench_gemm_tiles [--backend cuda|opencl] [--shapes MxNxK,...]
//                    [--tiles BMxBNxBK/RMxRN[/splitS],...] [--reps N] [--gelu]
//                    [--batch N [--transpose-b] [--bias rows|full]] [--print-source]
//
// Output: one line per shape and tiles,
//   RESULT backend=cuda batch=0 m=594 n=768 k=768 tiles=64x128x16/8x8 us=21.4 tflops=32.7 best=1
// (best=1 on the fastest tiles of the shape), and a first line naming the device.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gpu_backends.hpp"
#include "unicache/compiler.hpp"
#include "unicache/gpu.hpp"
#include "unicache/kernel_generator.hpp"

namespace {

using namespace unicache;
namespace k = unicache::gpu::kernels;

// A RESULT line's bias field, by layout::bias.
constexpr const char* kBiasField[] = {"", " bias=rows", " bias=full"};

struct shape {
  long m, n, k;
};

// Batched products of variable operands (attention's), or (batch 0) the
// fused Linear with a packed constant B and a bias.
struct layout {
  long batch = 0;
  bool transpose_b = false;
  int bias = 0;  // an Add after the product: 0 none, 1 of an M x N operand, 2 of a batch x M x N one
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= s.size()) {
    const std::size_t next = std::min(s.find(sep, at), s.size());
    if (next > at) out.push_back(s.substr(at, next - at));
    at = next + 1;
  }
  return out;
}

std::optional<shape> parse_shape(const std::string& s) {
  shape out{};
  int used = 0;
  if (std::sscanf(s.c_str(), "%ldx%ldx%ld%n", &out.m, &out.n, &out.k, &used) != 3 ||
      used != static_cast<int>(s.size())) {
    return std::nullopt;
  }
  if (out.m < 1 || out.n < 1 || out.k < 1 || out.m > (1L << 20) || out.n > (1L << 20) || out.k > (1L << 20)) {
    return std::nullopt;
  }
  return out;
}

// Tiles the kernel generator accepts (it throws compile_error for others).
std::optional<k::gemm_tiles> parse_tiles(const std::string& s) {
  k::gemm_tiles t;
  int used = 0;
  if (std::sscanf(s.c_str(), "%dx%dx%d/%dx%d%n", &t.bm, &t.bn, &t.bk, &t.rm, &t.rn, &used) != 5) return std::nullopt;
  if (used != static_cast<int>(s.size())) {
    int more = 0;
    if (std::sscanf(s.c_str() + used, "/split%d%n", &t.split_k, &more) != 1 ||
        used + more != static_cast<int>(s.size())) {
      return std::nullopt;
    }
  }
  try {
    k::gemm_config c;
    c.tiles = t;
    k::gemm_source(k::dialect::cuda_c, c);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return t;
}

// The device time of one GEMM (and its split-K sum) at `sh` with `t`:
// the best of three runs of `reps` launches between two events.
template <class Backend>
double time_us(const engine& e, const stream& s, const gpu::device& d, const shape& sh, const k::gemm_tiles& t,
               bool gelu, int reps, const layout& batched = {}) {
  k::gemm_config c;
  const bool linear = batched.batch == 0;
  c.packed_b = linear;
  c.transpose_b = batched.transpose_b;
  if (linear) c.chain = {op_kind::add};
  if (linear && gelu) c.chain.push_back(op_kind::gelu_erf);
  if (!linear && batched.bias) c.chain = {op_kind::add};
  c.tiles = t;
  if (!linear && t.split_k > 1) throw std::runtime_error("split-K is for one product, not a batch");
  const std::shared_ptr<const kernel> gemm = gpu::get_program(e, k::gemm_source(d.dialect(), c), {});
  const int wg = d.facts(e).vector_work_group;
  std::shared_ptr<const kernel> reduce;
  if (t.split_k > 1) reduce = gpu::get_program(e, k::gemm_reduce_source(d.dialect(), c, wg), {});

  const long kp = linear ? static_cast<long>(k::round_up(sh.k, t.bk)) : sh.k;
  const long np = linear ? static_cast<long>(k::round_up(sh.n, t.bn)) : sh.n;
  const long count = linear ? 1 : batched.batch;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  auto random = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
  };
  gpu_backends::buffers<Backend> mem(e);
  void* a = mem.upload(random(static_cast<std::size_t>(count * sh.m * sh.k)));
  void* b = mem.upload(random(static_cast<std::size_t>(count * kp * np)));
  const long bias_values = linear ? sh.n : batched.bias == 2 ? count * sh.m * sh.n : batched.bias ? sh.m * sh.n : 1;
  void* bias = mem.upload(random(static_cast<std::size_t>(bias_values)));
  void* out = mem.make(static_cast<std::size_t>(count * sh.m * sh.n) * sizeof(float));
  void* work = t.split_k > 1 ? mem.make(static_cast<std::size_t>(t.split_k * sh.m * sh.n) * sizeof(float)) : out;

  gpu::kernel_args args;
  args.add(a).add(b).add(work);
  args.add(std::int32_t(sh.m)).add(std::int32_t(sh.n)).add(std::int32_t(sh.k));
  args.add(std::int64_t{sh.k}).add(std::int64_t{batched.transpose_b ? sh.k : np}).add(std::int64_t{sh.n});
  if (linear) {
    args.add(std::int64_t{0}).add(std::int64_t{0}).add(std::int64_t{sh.m * sh.n});
    args.add(bias).add(std::int64_t{0}).add(std::int64_t{0}).add(std::int64_t{1});
  } else {
    args.add(std::int64_t{sh.m * sh.k}).add(std::int64_t{sh.k * sh.n}).add(std::int64_t{sh.m * sh.n});
    if (batched.bias) {
      args.add(bias).add(std::int64_t{batched.bias == 2 ? sh.m * sh.n : 0}).add(std::int64_t{sh.n}).add(std::int64_t{1});
    }
  }
  gpu::launch_dims dims;
  dims.global = {k::round_up(sh.n, t.bn) / t.rn, k::round_up(sh.m, t.bm) / t.rm,
                 static_cast<std::size_t>(count * t.split_k)};
  dims.local = {static_cast<std::size_t>(t.local_x()), static_cast<std::size_t>(t.local_y()), 1};
  gpu::kernel_args reduce_args;
  reduce_args.add(work).add(out).add(std::int32_t(sh.m)).add(std::int32_t(sh.n)).add(std::int64_t{sh.n});
  reduce_args.add(bias).add(std::int64_t{0}).add(std::int64_t{0}).add(std::int64_t{1});
  gpu::launch_dims reduce_dims;
  reduce_dims.global = {k::round_up(sh.m * sh.n, wg), 1, 1};
  reduce_dims.local = {static_cast<std::size_t>(wg), 1, 1};

  auto once = [&] {
    d.launch(*gemm, s, args, dims);
    if (reduce) d.launch(*reduce, s, reduce_args, reduce_dims);
  };
  // Warm-up, then enough launches per run for 2 ms of device time (a clock
  // that has ramped up, and event resolution far below the run).
  for (int i = 0; i < 3; ++i) once();
  d.wait(s);
  {
    const std::shared_ptr<const gpu::event> start = d.record_timed(s);
    once();
    const std::shared_ptr<const gpu::event> stop = d.record_timed(s);
    d.wait(s);
    const std::optional<std::uint64_t> ns = start && stop ? stop->ns_since(*start) : std::nullopt;
    if (ns && *ns > 0) reps = std::max(reps, static_cast<int>(std::min<std::uint64_t>(2'000'000 / *ns, 10'000)));
  }
  double best = std::numeric_limits<double>::infinity();
  for (int run = 0; run < 3; ++run) {
    const std::shared_ptr<const gpu::event> start = d.record_timed(s);
    for (int i = 0; i < reps; ++i) once();
    const std::shared_ptr<const gpu::event> stop = d.record_timed(s);
    d.wait(s);
    if (!start || !stop) throw std::runtime_error("this stream cannot time its work");
    const std::optional<std::uint64_t> ns = stop->ns_since(*start);
    if (!ns) throw std::runtime_error("no device time between the events");
    best = std::min(best, static_cast<double>(*ns) / 1e3 / reps);
  }
  return best;
}

template <class Backend>
int run(const std::vector<shape>& shapes, std::vector<k::gemm_tiles> tiles, bool gelu, int reps,
        const layout& batched) {
  const engine e = Backend::make_engine();
  const stream s = make_stream(e);
  const gpu::device* d = gpu::device_of(e.get_backend());
  if (!d) throw std::runtime_error("not a GPU backend of the core");
  std::printf("# %s: %s\n", Backend::name, Backend::device(e).c_str());
  const k::gemm_tiles generic = d->facts(e).gemm;
  // The device busy for about half a second first: its clocks up before the first timing.
  if (!shapes.empty()) {
    k::gemm_tiles warm = tiles.empty() ? generic : tiles.front();
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(500)) {
      time_us<Backend>(e, s, *d, {1024, 1024, 1024}, warm, gelu, 1);
    }
  }
  for (const shape& sh : shapes) {
    std::vector<k::gemm_tiles> list = tiles;
    if (list.empty() && batched.batch > 0) list = {generic};  // no class, no candidates
    if (list.empty()) {
      // The generic tiles and the candidates of the shape's class.
      graph g;
      auto a = g.tensor({-1, sh.k}), b = g.tensor({sh.k, sh.n}, tensor_property::constant);
      auto bias = g.tensor({1, sh.n}, tensor_property::constant), mm = g.tensor({-1, sh.n}), c = g.tensor({-1, sh.n});
      g.add_op(op_kind::matmul, {a, b}, {mm});
      g.add_op(op_kind::add, {mm, bias}, {c});
      g.finalize();
      const partition& p = g.partitions()[0];
      auto lt = [](std::vector<std::int64_t> shape, tensor_property property) {
        return logical_tensor{.shape = std::move(shape), .property = property};
      };
      const std::vector<logical_tensor> in{lt({sh.m, sh.k}, tensor_property::variable),
                                           lt({sh.k, sh.n}, tensor_property::constant),
                                           lt({1, sh.n}, tensor_property::constant)};
      const k::gemm_problem problem(p, in, {lt({sh.m, sh.n}, tensor_property::variable)}, generic,
                                    kernel_shapes::adaptive);
      list = k::gemm_candidates(problem, generic);
    }
    struct row {
      k::gemm_tiles t;
      double us;
      std::string error;
    };
    std::vector<row> rows;
    for (const k::gemm_tiles& t : list) {
      try {
        rows.push_back({t, time_us<Backend>(e, s, *d, sh, t, gelu, reps, batched), ""});
      } catch (const std::exception& err) {
        rows.push_back({t, 0, err.what()});
      }
    }
    double best = std::numeric_limits<double>::infinity();
    for (const row& r : rows) {
      if (r.error.empty()) best = std::min(best, r.us);
    }
    for (const row& r : rows) {
      if (!r.error.empty()) {
        std::printf("RESULT backend=%s batch=%ld%s%s m=%ld n=%ld k=%ld tiles=%s error=\"%s\"\n", Backend::name,
                    batched.batch, batched.transpose_b ? " transpose_b=1" : "", kBiasField[batched.bias], sh.m, sh.n,
                    sh.k,
                    k::to_string(r.t).c_str(), r.error.c_str());
        continue;
      }
      const double tflops = 2.0 * std::max(batched.batch, 1L) * sh.m * sh.n * sh.k / (r.us * 1e-6) / 1e12;
      std::printf("RESULT backend=%s batch=%ld%s%s m=%ld n=%ld k=%ld tiles=%s us=%.2f tflops=%.2f best=%d%s\n",
                  Backend::name, batched.batch, batched.transpose_b ? " transpose_b=1" : "", kBiasField[batched.bias],
                  sh.m, sh.n, sh.k,
                  k::to_string(r.t).c_str(), r.us, tflops, r.us == best ? 1 : 0,
                  r.t == generic ? " generic=1" : "");
    }
    std::fflush(stdout);
  }
  return 0;
}

const char* const kUsage =
    "usage: bench_gemm_tiles [--backend cuda|opencl] [--shapes MxNxK,...] [--tiles BMxBNxBK/RMxRN[/splitS],...]\n"
    "                        [--reps N] [--gelu] [--batch N [--transpose-b] [--bias rows|full]] [--print-source]\n"
    "Times the generated GEMM (constant packed B, bias Add) on the device for each tiles at each shape.\n"
    "--batch N: N products of variable operands each, no post-op (attention's MatMuls; batch 0 in the\n"
    "output is the Linear); --transpose-b: B is N x K; --bias: an Add after it of an M x N operand (rows)\n"
    "or of a batch x M x N one (full). Default tiles then: the generic ones.\n"
    "Default shapes: M in 72,240,594,1024,1592,2870 by N x K in 768x768, 3072x768, 768x3072, and 4096^3;\n"
    "default tiles: the backend's generic ones and the specialization candidates of each shape.\n"
    "--print-source prints the first tiles' GEMM source in the backend's dialect and exits.\n";

}  // namespace

int main(int argc, char** argv) {
  std::string backend = "cuda";
  std::vector<shape> shapes;
  std::vector<k::gemm_tiles> tiles;
  int reps = 20;
  bool gelu = false;
  bool print_source = false;
  layout batched;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_gemm_tiles: %s needs a value\n%s", arg.c_str(), kUsage);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--backend") {
      backend = value();
      if (backend != "cuda" && backend != "opencl") {
        std::fprintf(stderr, "bench_gemm_tiles: --backend is cuda or opencl, not '%s'\n", backend.c_str());
        return 2;
      }
    } else if (arg == "--shapes") {
      for (const std::string& s : split(value(), ',')) {
        const std::optional<shape> sh = parse_shape(s);
        if (!sh) {
          std::fprintf(stderr, "bench_gemm_tiles: bad shape '%s' (MxNxK, each 1..1048576)\n", s.c_str());
          return 2;
        }
        shapes.push_back(*sh);
      }
    } else if (arg == "--tiles") {
      for (const std::string& s : split(value(), ',')) {
        const std::optional<k::gemm_tiles> t = parse_tiles(s);
        if (!t) {
          std::fprintf(stderr,
                       "bench_gemm_tiles: bad tiles '%s' (BMxBNxBK/RMxRN[/splitS], as the kernel generator accepts "
                       "them: RM and RN multiples of 4 dividing BM and BN, BK a multiple of 4, split 1 to 64)\n",
                       s.c_str());
          return 2;
        }
        tiles.push_back(*t);
      }
    } else if (arg == "--reps") {
      const std::string v = value();
      char* end = nullptr;
      const long r = std::strtol(v.c_str(), &end, 10);
      reps = v.empty() || *end != '\0' ? 0 : static_cast<int>(std::clamp(r, 0L, 1000000L));
      if (reps < 1 || reps > 100000) {
        std::fprintf(stderr, "bench_gemm_tiles: --reps must be 1..100000\n");
        return 2;
      }
    } else if (arg == "--gelu") {
      gelu = true;
    } else if (arg == "--batch") {
      const std::string v = value();
      char* end = nullptr;
      const long b = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || b < 1 || b > 65535) {
        std::fprintf(stderr, "bench_gemm_tiles: --batch must be 1..65535\n");
        return 2;
      }
      batched.batch = b;
    } else if (arg == "--transpose-b") {
      batched.transpose_b = true;
    } else if (arg == "--bias") {
      const std::string v = value();
      if (v != "rows" && v != "full") {
        std::fprintf(stderr, "bench_gemm_tiles: --bias is rows or full, not '%s'\n", v.c_str());
        return 2;
      }
      batched.bias = v == "rows" ? 1 : 2;
    } else if (arg == "--print-source") {
      print_source = true;
    } else {
      std::fprintf(stderr, "bench_gemm_tiles: unknown option %s\n%s", arg.c_str(), kUsage);
      return 2;
    }
  }
  if ((batched.transpose_b || batched.bias) && batched.batch == 0) {
    std::fprintf(stderr, "bench_gemm_tiles: --transpose-b and --bias are for --batch products\n");
    return 2;
  }
  if (print_source) {
    // The first tiles' GEMM in the backend's dialect, for a compiler's own report.
    k::gemm_config c;
    c.packed_b = true;
    c.chain = {op_kind::add};
    if (gelu) c.chain.push_back(op_kind::gelu_erf);
    if (!tiles.empty()) c.tiles = tiles.front();
    std::fputs(k::gemm_source(backend == "opencl" ? k::dialect::opencl_c : k::dialect::cuda_c, c).source.c_str(), stdout);
    return 0;
  }
  if (shapes.empty()) {
    for (const auto& nk : std::vector<std::pair<long, long>>{{768, 768}, {3072, 768}, {768, 3072}}) {
      for (long m : {72L, 240L, 594L, 1024L, 1592L, 2870L}) shapes.push_back({m, nk.first, nk.second});
    }
    shapes.push_back({4096, 4096, 4096});
  }
  try {
#if UNICACHE_GPU_WITH_CUDA
    if (backend == "cuda") return run<gpu_backends::cuda_backend>(shapes, tiles, gelu, reps, batched);
#endif
#if UNICACHE_GPU_WITH_OPENCL
    if (backend == "opencl") return run<gpu_backends::opencl_backend>(shapes, tiles, gelu, reps, batched);
#endif
    std::fprintf(stderr, "bench_gemm_tiles: backend '%s' is not built\n", backend.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm_tiles: %s\n", e.what());
    return 1;
  }
}
