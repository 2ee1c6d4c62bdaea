// The persistent path across processes: a fresh process probes its device
// and builds its kernels from source, and stores both; the next process with
// the same store builds nothing; with the store off, it builds again.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace {

std::string run_first_run(const std::string& environment, const std::string& args = "") {
  const std::string command = "env -u UNICACHE_PERSISTENT_CACHE -u UNICACHE_OPENCL_DEVICE " + environment + " " +
                              UNICACHE_OPENCL_FIRST_RUN + " " + args + " 2>&1";
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return "popen failed";
  std::array<char, 512> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe)) out += buffer.data();
  const int status = pclose(pipe);
  return status == 0 ? out : "exit status " + std::to_string(status) + ": " + out;
}

struct OpenclProcesses : ::testing::Test {
  std::string dir;
  void SetUp() override {
    char tmpl[] = "/tmp/unicache-opencl-processes-XXXXXX";
    dir = ::mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::string with_store() const { return "UNICACHE_PERSISTENT_CACHE_DIR=" + dir; }
};

TEST_F(OpenclProcesses, TheSecondProcessLoadsEveryKernelFromTheStore) {
  const std::string first = run_first_run(with_store());
  EXPECT_NE(first.find("probes=1 from_source=2 from_binary=0 stored=2 rejected=0"), std::string::npos)
      << "the probe, the GEMM and the weight packer, built; the kernels stored\n" << first;
  const std::string second = run_first_run(with_store());
  EXPECT_NE(second.find("probes=0 from_source=0 from_binary=2 stored=0 rejected=0"), std::string::npos) << second;
  for (const std::string* out : {&first, &second}) {
    const auto at = out->find("max_error=");
    ASSERT_NE(at, std::string::npos) << *out;
    EXPECT_LT(std::stod(out->substr(at + 10)), 1e-4) << *out;
  }
}

// Adaptive: the first process times the GEMM candidates of the class and
// stores the choice and the binaries; the second builds nothing, and its
// class is specialized at its first use from what the store holds.
TEST_F(OpenclProcesses, TheSecondProcessStartsSpecializedFromTheStore) {
  const std::string first = run_first_run(with_store(), "--adaptive");
  EXPECT_NE(first.find("specialized ready=1 specialized_executions=1 failed=0"), std::string::npos) << first;
  const std::string second = run_first_run(with_store(), "--adaptive");
  EXPECT_NE(second.find("probes=0 from_source=0"), std::string::npos) << "nothing built\n" << second;
  EXPECT_NE(second.find("specialized ready=1 specialized_executions=1 failed=0"), std::string::npos) << second;
  for (const std::string* out : {&first, &second}) {
    const auto at = out->find("max_error=");
    ASSERT_NE(at, std::string::npos) << *out;
    EXPECT_LT(std::stod(out->substr(at + 10)), 1e-4) << *out;
  }
}

TEST_F(OpenclProcesses, WithTheStoreOffEveryProcessBuilds) {
  run_first_run(with_store());
  const std::string off = run_first_run(with_store() + " UNICACHE_PERSISTENT_CACHE=0");
  EXPECT_NE(off.find("probes=1 from_source=2 from_binary=0 stored=0"), std::string::npos) << off;
}

}  // namespace
