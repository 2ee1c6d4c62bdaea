// One process's first run of a fused MatMul+bias+GELU partition on the
// default OpenCL device: prints how its kernels were obtained and how far
// the result is from the reference. test_opencl_processes runs it twice
// against one store directory. With --adaptive it runs the partition twice in
// adaptive mode with a class hot at its first use (waiting for the background
// in between), and prints what specialization did as well.
#include <cmath>
#include <cstdio>
#include <string>

#include "mlp_partition.hpp"
#include "unicache/compiler.hpp"
#include "unicache/graph.hpp"
#include "unicache/opencl.hpp"
#include "unicache/specialization.hpp"

int main(int argc, char** argv) {
  using namespace unicache;
  const std::string arg = argc > 1 ? argv[1] : "";
  if (!arg.empty() && arg != "--adaptive") {
    const bool help = arg == "--help" || arg == "-h";
    std::fputs("usage: opencl_first_run [--adaptive]\nOne process's first run of MatMul+bias+GELU on the default OpenCL device: how\n"
               "its kernels were obtained, and the error against the reference. Run by test_opencl_processes.\n",
               help ? stdout : stderr);
    return help ? 0 : 2;
  }
  const bool adaptive = arg == "--adaptive";
  try {
    if (adaptive) {
      set_kernel_shapes(kernel_shapes::adaptive);
      specialize_settings eager = current_specialize_settings();
      eager.threshold = 0;
      set_specialize_settings(eager);
    }
    const std::int64_t m = 33, k = 64, n = 48;
    graph g = testing::mlp_graph(k, n, /*constant_weight=*/true);
    engine eng = opencl::make_engine();
    stream strm = make_stream(eng);
    const auto xv = testing::random_data({m, k}, 1), wv = testing::random_data({k, n}, 2), bv = testing::random_data({n}, 3);
    cl_mem xb = opencl::make_buffer(eng, xv.size() * 4, xv.data()), wb = opencl::make_buffer(eng, wv.size() * 4, wv.data());
    cl_mem bb = opencl::make_buffer(eng, bv.size() * 4, bv.data()), yb = opencl::make_buffer(eng, m * n * 4);
    compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}, {n}}, eng);
    for (int run = 0; run < (adaptive ? 2 : 1); ++run) {
      cp.execute(strm, {{cp.inputs()[0], xb}, {cp.inputs()[1], wb}, {cp.inputs()[2], bb}}, {{cp.outputs()[0], yb}});
      wait_for_specializations();
    }
    std::vector<float> got(static_cast<std::size_t>(m * n));
    opencl::read_buffer(strm, yb, got.data(), got.size() * 4);
    const auto want = testing::mlp_reference(xv, wv, bv, m, k, n);
    double max_error = 0;
    for (std::size_t i = 0; i < got.size(); ++i) max_error = std::max(max_error, std::abs(double(got[i]) - want[i]));
    for (cl_mem mem : {xb, wb, bb, yb}) clReleaseMemObject(mem);
    const opencl::backend_stats st = opencl::stats();
    std::printf("probes=%llu from_source=%llu from_binary=%llu stored=%llu rejected=%llu max_error=%.3g\n",
                static_cast<unsigned long long>(st.probe_builds),
                static_cast<unsigned long long>(st.programs_from_source),
                static_cast<unsigned long long>(st.programs_from_binary),
                static_cast<unsigned long long>(st.binaries_stored),
                static_cast<unsigned long long>(st.binaries_rejected), max_error);
    if (adaptive) {
      const specialization_stats t = specialization::stats();
      std::printf("specialized ready=%llu specialized_executions=%llu failed=%llu\n", static_cast<unsigned long long>(t.ready),
                  static_cast<unsigned long long>(t.specialized_executions), static_cast<unsigned long long>(t.failed));
    }
    return 0;
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
}
