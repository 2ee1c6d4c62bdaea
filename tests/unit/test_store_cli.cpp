// The unicache-store tool, run as a user runs it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>

#include "store/entry_format.hpp"
#include "store_test_support.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;

struct run_result {
  int status = -1;
  std::string out;
};

run_result tool(const std::string& args) {
  const std::string command = std::string("UNICACHE_PERSISTENT_CACHE_DIR= ") + UNICACHE_STORE_TOOL + " " + args + " 2>&1";
  run_result r;
  FILE* pipe = ::popen(command.c_str(), "r");
  std::array<char, 512> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe)) r.out += buf.data();
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(StoreTool, StatsListVerifyPruneClear) {
  temp_dir dir;
  {
    kernel_store store(store_in(dir.path()));
    for (int i = 0; i < 4; ++i) store.put(gpu_a(), "k" + std::to_string(i), binary_for("k", 1000));
  }
  const std::string d = "--dir " + dir.path();
  run_result r = tool(d + " stats");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("entries:          4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("devices:          1"), std::string::npos) << r.out;

  r = tool(d + " list");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 4) << r.out;
  EXPECT_NE(r.out.find("ok"), std::string::npos);

  r = tool(d + " verify");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("0 bad entries"), std::string::npos);

  // Break one entry: verify fails (exit 1) until --fix removes it.
  const auto files = entry_files(dir.path());
  ASSERT_EQ(files.size(), 4u);
  std::ofstream(files[0], std::ios::binary | std::ios::trunc) << "garbage";
  r = tool(d + " verify");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("bad " + files[0]), std::string::npos) << r.out;
  r = tool(d + " verify --fix");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(tool(d + " verify").status, 0);

  r = tool(d + " prune --max-size 0");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("3 entries removed"), std::string::npos) << r.out;

  kernel_store(store_in(dir.path())).put(gpu_a(), "again", binary_for("a", 10));
  EXPECT_EQ(tool(d + " clear").status, 0);
  EXPECT_EQ(entry_files(dir.path()).size(), 0u);
}

TEST(StoreTool, HelpOnEveryCommandAndUsageErrorsExitTwo) {
  for (const char* command : {"stats", "list", "verify", "prune", "clear", "help"}) {
    const run_result r = tool(std::string(command) + " --help");
    EXPECT_EQ(r.status, 0) << command;
    EXPECT_NE(r.out.find("usage: unicache-store"), std::string::npos) << command << "\n" << r.out;
  }
  EXPECT_EQ(tool("--help").status, 0);
  EXPECT_EQ(tool("").status, 2);
  EXPECT_EQ(tool("frobnicate").status, 2);
  EXPECT_EQ(tool("--dir /tmp prune").status, 2) << "prune needs an option";
  EXPECT_EQ(tool("--dir /tmp prune --max-size lots").status, 2);
  EXPECT_EQ(tool("--dir /tmp stats --bogus").status, 2);
}

TEST(StoreTool, UnusableStoreExitsOne) {
  temp_dir dir;
  std::ofstream(dir.path() + "/file") << "x";
  const run_result r = tool("--dir " + dir.path() + "/file stats");
  EXPECT_EQ(r.status, 1) << r.out;
}

}  // namespace
}  // namespace unicache
