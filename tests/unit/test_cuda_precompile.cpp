// Kernels built ahead of time, with NVRTC and no GPU (here and in CI): an
// offline CUDA engine compiles a graph's partitions for sm_80 and sm_90 and
// precompile() stores every kernel under the identity a GPU of that
// architecture has (so such a machine hits them); a graph without requests
// gets both split-K variants of its generic GEMM; an offline engine runs
// nothing; and `unicache-store precompile --out` writes a bundle that
// imports into an empty store, refusing bad options and inputs.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "cuda_internal.hpp"
#include "store_test_support.hpp"
#include "temp_dir.hpp"
#include "unicache/compiler.hpp"
#include "unicache/cuda.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;

// Every test process gets a store of its own, set before first use.
const std::string& store_dir() {
  static const temp_dir dir("unicache-precompile-test");
  static const bool set = ::setenv("UNICACHE_PERSISTENT_CACHE_DIR", dir.path().c_str(), 1) == 0;
  (void)set;
  return dir.path();
}
const bool store_configured = !store_dir().empty();

std::string nvrtc_missing() {
  std::string why;
  return cuda::detail::nvrtc(&why) ? "" : why;
}

// gpu_demo's MLP block: MatMul+bias+GELU, then MatMul+bias.
graph mlp() {
  graph g;
  auto x = g.tensor({-1, 768});
  auto w1 = g.tensor({768, 3072}, tensor_property::constant), b1 = g.tensor({3072}, tensor_property::constant);
  auto h = g.tensor({-1, 3072}), hb = g.tensor({-1, 3072}), a = g.tensor({-1, 3072});
  auto w2 = g.tensor({3072, 768}, tensor_property::constant), b2 = g.tensor({768}, tensor_property::constant);
  auto y = g.tensor({-1, 768}), out = g.tensor({-1, 768});
  g.add_op(op_kind::matmul, {x, w1}, {h});
  g.add_op(op_kind::add, {h, b1}, {hb});
  g.add_op(op_kind::gelu_erf, {hb}, {a});
  g.add_op(op_kind::matmul, {a, w2}, {y});
  g.add_op(op_kind::add, {y, b2}, {out});
  g.finalize();
  return g;
}

class Precompile : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = nvrtc_missing(); !why.empty()) GTEST_SKIP() << "NVRTC: " << why;
    ASSERT_TRUE(store_configured);
    ASSERT_TRUE(kernel_store::instance().enabled());
    kernel_store::instance().clear();
  }
};

TEST_F(Precompile, StoresEveryKernelUnderTheIdentityOfADeviceOfThatArchitecture) {
  const graph g = mlp();
  for (const auto& [major, sms] : {std::pair{8, 108}, std::pair{9, 132}}) {
    if (major == 9 && cuda::detail::nvrtc_version() < 11080) continue;  // NVRTC 11.8 knows sm_90
    const engine e = cuda::make_offline_engine(major, 0, sms);
    const device_identity id = e.get_backend()->identity(e);
    cuda::device_info real;  // what an engine on such a GPU reports
    real.device_name = "NVIDIA H100 PCIe";
    real.compute_major = major;
    real.driver_version = 13000;
    real.nvrtc_version = cuda::detail::nvrtc_version();
    real.target = cuda::detail::compile_target(major, 0);
    EXPECT_EQ(id, cuda::detail::code_identity(real));

    const precompile_report r = precompile(g, {{{1, {8, 768}}}, {{1, {32, 768}}}}, e);
    EXPECT_EQ(r.compiles, 4u) << "two partitions, two requests";
    EXPECT_GE(r.kernels, 3u) << "the two GEMMs and the weight packer at least";
    EXPECT_EQ(r.stored + r.already_stored, r.kernels);
    // The store has each, as a cubin for this architecture.
    kernel_cache().clear();
    const compiled_partition cp = compile(g.partitions()[0], {{8, 768}, {768, 3072}, {3072}}, e);
    for (const kernel_binary& k : cp.kernel_binaries()) {
      const auto stored = kernel_store::instance().get(id, k.key);
      ASSERT_TRUE(stored.has_value());
      EXPECT_EQ(*stored, k.binary);
      EXPECT_EQ(std::string(stored->begin(), stored->begin() + 4), "\x7f" "ELF") << "a cubin";
    }
    const precompile_report again = precompile(g, {{{1, {8, 768}}}}, e);
    EXPECT_EQ(again.stored, 0u);
    EXPECT_EQ(again.already_stored, again.kernels) << "a second run finds them stored";
  }
}

TEST_F(Precompile, WithoutRequestsBothSplitKVariantsOfAGenericGemmAreBuilt) {
  const engine e = cuda::make_offline_engine(8, 0, 108);
  const precompile_report none = precompile(mlp(), {}, e);
  kernel_store::instance().clear();
  const precompile_report one_size = precompile(mlp(), {{{1, {4096, 768}}}}, e);
  EXPECT_EQ(none.compiles, 4u) << "each unknown dim as 1 and as 4096";
  EXPECT_GT(none.kernels, one_size.kernels) << "one row shares K out (a split GEMM and its reduction)";
}

TEST_F(Precompile, AnOfflineEngineCompilesButRunsNothing) {
  const engine e = cuda::make_offline_engine(8, 0, 108);
  EXPECT_THROW((void)make_stream(e), cuda::cuda_error);
  EXPECT_THROW(cuda::make_offline_engine(8, 0, 0), cuda::cuda_error) << "the SM count decides split-K";
  EXPECT_THROW(cuda::make_offline_engine(1, 0, 108), cuda::cuda_error) << "no sm_10";
  const graph g;
  EXPECT_THROW(precompile(g, {}, e), graph_error) << "not finalized";
}

// --- The tool ------------------------------------------------------------------

command_result tool(const std::string& args) {
  return run_command(std::string("UNICACHE_PERSISTENT_CACHE_DIR= ") + UNICACHE_STORE_TOOL + " " + args + " 2>&1");
}

TEST_F(Precompile, TheToolWritesABundleThatImportsIntoAnEmptyStore) {
  const temp_dir dir("unicache-precompile-tool");
  const std::string graph_file = dir.path() + "/mlp.json", bundle = dir.path() + "/mlp.bundle";
  const graph g = mlp();
  std::ofstream(graph_file) << to_json(g, {{{1, {8, 768}}}});
  const command_result made = tool("precompile " + graph_file + " --cuda-arch sm_80 --out " + bundle);
  ASSERT_EQ(made.status, 0) << made.out;
  EXPECT_NE(made.out.find("sm_80 (108 SMs): 2 compiles"), std::string::npos) << made.out;
  EXPECT_NE(made.out.find("exported "), std::string::npos) << made.out;
  const command_result imported = tool("--dir " + dir.path() + "/fleet import " + bundle);
  ASSERT_EQ(imported.status, 0) << imported.out;
  const command_result listed = tool("--dir " + dir.path() + "/fleet list");
  EXPECT_NE(listed.out.find("CUDA / sm_80 / sm_80 / nvrtc "), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("cuda-c gemm"), std::string::npos) << listed.out;
}

TEST_F(Precompile, TheToolRefusesBadArchitecturesCountsAndGraphFiles) {
  const temp_dir dir("unicache-precompile-bad");
  const std::string graph_file = dir.path() + "/mlp.json";
  std::ofstream(graph_file) << to_json(mlp());
  const std::string out = " --out " + dir.path() + "/b";
  EXPECT_EQ(tool("precompile " + graph_file + " --cuda-arch sm9" + out).status, 2);
  EXPECT_EQ(tool("precompile " + graph_file + " --cuda-arch sm_75" + out).status, 2) << "no usual SM count";
  EXPECT_EQ(tool("precompile " + graph_file + " --cuda-arch sm_80 --sm-count 0" + out).status, 2);
  EXPECT_EQ(tool("precompile " + graph_file + out).status, 2) << "no --cuda-arch";
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const command_result from_fifo = tool("precompile " + fifo + " --cuda-arch sm_80" + out);
  EXPECT_EQ(from_fifo.status, 1) << "a FIFO is not read (and never blocks): " << from_fifo.out;
  std::ofstream(dir.path() + "/broken.json") << "{\"format\": \"unicache-graph\", \"version\": 1, \"tensors\": [";
  const command_result broken = tool("precompile " + dir.path() + "/broken.json --cuda-arch sm_80" + out);
  EXPECT_EQ(broken.status, 1);
  EXPECT_NE(broken.out.find("graph JSON: "), std::string::npos) << broken.out;
}

}  // namespace
}  // namespace unicache
