// The process-wide caches read the environment once, at first use, so each
// case runs a fresh process (cache_env_probe) with its own environment.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

struct run_result {
  std::string out;  // stdout and stderr together
  int status = -1;
};

run_result run_probe(const std::string& environment) {
  const std::string command = "env -u ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY "
                              "-u ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE -u UNICACHE_VERBOSE "
                              "-u UNICACHE_KERNEL_CACHE_CAPACITY -u UNICACHE_KERNEL_CACHE -u UNICACHE_KERNEL_SHAPES -u UNICACHE_SPECIALIZE_THREADS -u UNICACHE_SPECIALIZE_MAX -u UNICACHE_SPECIALIZE_THRESHOLD " +
                              environment + " " + UNICACHE_ENV_PROBE + " 2>&1";
  run_result r;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 512> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe)) r.out += buffer.data();
  r.status = pclose(pipe);
  return r;
}

TEST(DefaultCaches, UseDocumentedDefaultsWithoutEnvironment) {
  const run_result r = run_probe("");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("constant cpu=2048:DEFAULT gpu=1024:DEFAULT enabled=1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kernel cpu=256:DEFAULT gpu=256:DEFAULT enabled=1"), std::string::npos) << r.out;
}

TEST(DefaultCaches, KernelShapesDefaultToAdaptiveAndFollowTheEnvironment) {
  run_result r = run_probe("");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("kernel_shapes=adaptive"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("specialize threads=1 max=32 threshold=1\n"), std::string::npos) << r.out;
  r = run_probe("UNICACHE_KERNEL_SHAPES=agnostic UNICACHE_SPECIALIZE_THREADS=4 UNICACHE_SPECIALIZE_MAX=0 "
                "UNICACHE_SPECIALIZE_THRESHOLD=0.25");
  EXPECT_NE(r.out.find("kernel_shapes=agnostic"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("specialize threads=4 max=0 threshold=0.25"), std::string::npos) << r.out;
  r = run_probe("UNICACHE_SPECIALIZE_THREADS=-1 UNICACHE_SPECIALIZE_MAX=100000 UNICACHE_SPECIALIZE_THRESHOLD=1e3");
  EXPECT_NE(r.out.find("specialize threads=1 max=32 threshold=1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ignoring UNICACHE_SPECIALIZE_THRESHOLD=\"1e3\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ignoring UNICACHE_SPECIALIZE_THREADS=\"-1\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ignoring UNICACHE_SPECIALIZE_MAX=\"100000\""), std::string::npos) << r.out;
  r = run_probe("UNICACHE_KERNEL_SHAPES=Specialized");
  EXPECT_NE(r.out.find("kernel_shapes=specialized"), std::string::npos) << r.out;
  r = run_probe("UNICACHE_KERNEL_SHAPES=per-shape");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("kernel_shapes=adaptive"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ignoring UNICACHE_KERNEL_SHAPES=\"per-shape\""), std::string::npos) << r.out;
}

TEST(DefaultCaches, ReadTheEnvironmentAndTheApiOverridesIt) {
  const run_result r = run_probe(
      "ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY='cpu:10240:NO_EVICT;gpu:2048:LRU' "
      "UNICACHE_KERNEL_CACHE_CAPACITY='gpu:64:cost'");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("constant cpu=10240:NO_EVICT gpu=2048:LRU enabled=1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kernel cpu=256:DEFAULT gpu=64:COST enabled=1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("after api cpu=1 misses=2 evictions=0"), std::string::npos)
      << "NO_EVICT from the environment stays: the second MB is refused, not evicted\n"
      << r.out;
}

TEST(DefaultCaches, MalformedEnvironmentWarnsOnceAndRunsWithDefaults) {
  const run_result r = run_probe("ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY='cpu:-5'");
  ASSERT_EQ(r.status, 0) << "a bad value must never abort\n" << r.out;
  EXPECT_NE(r.out.find("unicache: ignoring ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY=\"cpu:-5\": bad token \"-5\""),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("constant cpu=2048:DEFAULT"), std::string::npos) << r.out;
}

TEST(DefaultCaches, DisabledByEnvironment) {
  const run_result r = run_probe("ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE=0");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("constant cpu=2048:DEFAULT gpu=1024:DEFAULT enabled=0"), std::string::npos) << r.out;
}

TEST(DefaultCaches, VerbosePrintsOneLinePerMissAndPerEviction) {
  const run_result r = run_probe("UNICACHE_VERBOSE=1 ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY=cpu:1:LRU");
  ASSERT_EQ(r.status, 0) << r.out;
  auto count = [&](const std::string& needle) {
    int n = 0;
    for (std::size_t at = r.out.find(needle); at != std::string::npos; at = r.out.find(needle, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("unicache_verbose,constant_tensor_cache,miss,cpu:0:0x0,owner=probe_backend,"), 2) << r.out;
  EXPECT_EQ(count("unicache_verbose,constant_tensor_cache,evict,cpu:0:0x0,owner=probe_backend,"), 1) << r.out;
  EXPECT_NE(r.out.find("reason=capacity"), std::string::npos) << r.out;
}

}  // namespace
