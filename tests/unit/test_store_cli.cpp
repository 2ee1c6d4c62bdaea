// The unicache-store tool, run as a user runs it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "store/entry_format.hpp"
#include "store_test_support.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;
namespace fs = std::filesystem;

using run_result = command_result;

run_result tool(const std::string& args) {
  return run_command(std::string("UNICACHE_PERSISTENT_CACHE_DIR= ") + UNICACHE_STORE_TOOL + " " + args + " 2>&1");
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
  EXPECT_NE(r.out.find("entries:          4 (recorded)"), std::string::npos) << "from the records:\n" << r.out;
  r = tool(d + " stats --recount");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("entries:          4\n"), std::string::npos) << "counted on disk:\n" << r.out;
  EXPECT_NE(r.out.find("temporary files:  0"), std::string::npos) << r.out;

  r = tool(d + " list");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 5) << "a device line and a line per entry:\n" << r.out;
  EXPECT_NE(r.out.find("\"k0\""), std::string::npos) << r.out;

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
  r = tool(d + " list");
  EXPECT_NE(r.out.find("BAD: "), std::string::npos) << r.out;
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

// The OpenCL backend's keys, as program.cpp writes them.
std::string opencl_key(const std::string& kernel) {
  cache_key key;
  key.add("opencl-c").add(kernel).add("-cl-fast-relaxed-math").add("__kernel void " + kernel + "() {}");
  return std::string(key.bytes());
}

TEST(StoreTool, ListSaysWhatEachEntryIsGroupedByDevice) {
  temp_dir dir;
  {
    kernel_store store(store_in(dir.path()));
    ASSERT_TRUE(store.put(gpu_a(), opencl_key("gemm"), binary_for("gemm", 70000)));
    ASSERT_TRUE(store.put(gpu_a(), "opencl-engine-info/1", binary_for("info", 300)));
    ASSERT_TRUE(store.put(pocl_cpu(), opencl_key("softmax"), binary_for("softmax", 5000)));
  }
  const run_result r = tool("--dir " + dir.path() + " list");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 5) << "two device lines, three entries:\n" << r.out;
  EXPECT_NE(r.out.find("NVIDIA CUDA / NVIDIA H200 / OpenCL 3.0 CUDA / 560.35.03"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Portable Computing Language / cpu-x86-64-znver3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("70000 B  opencl-c gemm\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("5000 B  opencl-c softmax\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("300 B  \"opencl-engine-info/1\"\n"), std::string::npos) << r.out;
}

TEST(StoreTool, KeysAndNamesFromDiskAreNeverPrintedRaw) {
  temp_dir dir;
  {
    kernel_store store(store_in(dir.path()));
    ASSERT_TRUE(store.put(gpu_a(), "\x1b[2J\x1b]0;owned\x07\nfake line", binary_for("a", 10)));
    ASSERT_TRUE(store.put(gpu_a(), opencl_key("k\r\x1b[31mred"), binary_for("b", 10)));
  }
  // A stray file whose name is made to rewrite the terminal.
  const std::string key_dir = fs::path(entry_files(dir.path())[0]).parent_path().string();
  std::ofstream(key_dir + "/\x1b[2Jevil\nname") << "x";
  for (const char* command : {" list", " list --json", " verify"}) {
    const run_result r = tool("--dir " + dir.path() + command);
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << command << ":\n" << r.out;
    EXPECT_EQ(r.out.find('\r'), std::string::npos) << command;
    EXPECT_EQ(r.out.find('\x07'), std::string::npos) << command;
    EXPECT_EQ(r.out.find("\nfake line"), std::string::npos) << command;
  }
  const run_result verify = tool("--dir " + dir.path() + " verify");
  EXPECT_EQ(verify.status, 1);
  EXPECT_NE(verify.out.find("\"\\x1b[2Jevil\\nname\": a regular file that the store never writes"), std::string::npos)
      << verify.out;
  EXPECT_EQ(tool("--dir " + dir.path() + " verify --fix").status, 0);
  EXPECT_EQ(tool("--dir " + dir.path() + " verify").status, 0);
}

TEST(StoreTool, ListJsonIsValidJsonThatScriptsCanRead) {
  if (std::system("python3 -c pass > /dev/null 2>&1") != 0) GTEST_SKIP() << "no python3 to parse the JSON with";
  temp_dir dir;
  {
    kernel_store store(store_in(dir.path()));
    ASSERT_TRUE(store.put(gpu_a(), opencl_key("gemm"), binary_for("gemm", 70000)));
    ASSERT_TRUE(store.put(gpu_a(), "quote\" back\\slash \x01\xff", binary_for("q", 10)));
    ASSERT_TRUE(store.put(pocl_cpu(), opencl_key("a\"b\n"), binary_for("c", 20)));
  }
  // One entry damaged: it is listed as invalid, with its problem.
  std::ofstream(entry_files(dir.path())[0], std::ios::trunc) << "garbage";
  const char* check =
      "import json, sys\n"
      "d = json.load(sys.stdin)\n"
      "e = d['entries']\n"
      "assert len(e) == 3, e\n"
      "good = [x for x in e if x['valid']]\n"
      "assert len(good) == 2, e\n"
      "assert all(x['problem'] for x in e if not x['valid']), e\n"
      "assert all(len(x['device_hash']) == 32 and x['last_use'].endswith('Z') for x in e), e\n"
      "assert d['directory'].endswith('unicache-test-' + d['directory'][-6:]), d\n"
      "kinds = sorted((x['kind'], x['name'], x['key_preview']) for x in good)\n"
      "known = {('opencl-c', 'gemm', ''): 70000, ('', '', '\"quote\\\\\" back\\\\\\\\slash \\\\x01\\\\xff\"'): 10,\n"
      "         ('opencl-c', '\"a\\\\\"b\\\\n\"', ''): 20}\n"
      "for x in good:\n"
      "    k = (x['kind'], x['name'], x['key_preview'])\n"
      "    assert k in known and x['binary_bytes'] == known[k], (k, x)\n"
      "    assert 'NVIDIA H200' in x['device'] or 'Portable Computing Language' in x['device'], x\n"
      "print('ok')\n";
  const std::string script = dir.path() + "/check.py";
  std::ofstream(script) << check;
  const run_result r = tool("--dir " + dir.path() + " list --json | python3 " + script);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("ok"), std::string::npos) << r.out;
}

TEST(StoreTool, HelpOnEveryCommandAndUsageErrorsExitTwo) {
  for (const char* command : {"stats", "list", "verify", "prune", "clear", "export", "import", "explain", "precompile",
                              "help"}) {
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
  EXPECT_EQ(tool("--dir /tmp verify --json").status, 2) << "--json belongs to list";
}

TEST(StoreTool, UnusableStoreExitsOne) {
  temp_dir dir;
  std::ofstream(dir.path() + "/file") << "x";
  const run_result r = tool("--dir " + dir.path() + "/file stats");
  EXPECT_EQ(r.status, 1) << r.out;
}

TEST(StoreTool, ExplainPrintsARecordedMissAgainstTheStoreAsItIsNow) {
  temp_dir dir;
  const device_identity here{"CUDA", "sm_90", "sm_90", "nvrtc 13000"}, there{"CUDA", "sm_80", "sm_80", "nvrtc 13000"};
  cache_key key;
  key.add("cuda-c").add("gemm").add("-default-device").add("").add("void gemm() {}");
  const std::string k(key.bytes());
  {
    kernel_store store(store_in(dir.path()));
    ASSERT_TRUE(store.put(there, k, binary_for("g", 100)));
    store.record_miss(here, k);
  }
  const std::string id = blob_id(here, k).substr(0, 16);
  const run_result r = tool("--dir " + dir.path() + " explain " + id);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("unicache: miss explained: cuda-c gemm (" + id + "): the nearest stored entry"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("architecture (stored sm_80, here sm_90)"), std::string::npos) << r.out;
  EXPECT_EQ(tool("--dir " + dir.path() + " explain 00000000deadbeef").status, 1) << "no such miss";
  EXPECT_EQ(tool("--dir " + dir.path() + " explain $'\\x1b[2J'").status, 2) << "not an id";
  EXPECT_EQ(tool("--dir " + dir.path() + " explain").status, 2) << "no id";
}

}  // namespace
}  // namespace unicache
