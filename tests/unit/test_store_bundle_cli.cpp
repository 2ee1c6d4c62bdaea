// unicache-store export and import, run as a user runs them.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "store_test_support.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;
namespace fs = std::filesystem;

command_result tool(const std::string& args) {
  return run_command(std::string("UNICACHE_PERSISTENT_CACHE_DIR= ") + UNICACHE_STORE_TOOL + " " + args + " 2>&1");
}

std::string kernel_key(const std::string& kind, int i) {
  cache_key key;
  key.add(kind).add("kernel" + std::to_string(i)).add("source " + std::to_string(i));
  return std::string(key.bytes());
}

// A store of four cuda-c and two opencl-c entries.
void fill(const std::string& dir) {
  kernel_store store(store_in(dir));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(store.put(gpu_a(), kernel_key("cuda-c", i), binary_for("c", 100)));
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(store.put(pocl_cpu(), kernel_key("opencl-c", i), binary_for("o", 100)));
}

TEST(StoreBundleTool, ExportThenImportPrintASummaryAndExitZero) {
  temp_dir dir;
  fill(dir.path() + "/a");
  const std::string bundle = dir.path() + "/kernels.ucbundle";
  command_result r = tool("--dir " + dir.path() + "/a export --out " + bundle);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("exported 6 entries to " + bundle + " ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("), 0 refused\n"), std::string::npos) << r.out;

  r = tool("--dir " + dir.path() + "/b import " + bundle);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "imported 6 of 6 records from " + bundle + ": 0 already present, 0 refused\n");
  r = tool("--dir " + dir.path() + "/b import " + bundle);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("imported 0 of 6 records from " + bundle + ": 6 already present"), std::string::npos) << r.out;
  EXPECT_EQ(kernel_store(store_in(dir.path() + "/b")).stats().entries, 6u);
}

TEST(StoreBundleTool, ExportFiltersByKindDeviceAndAge) {
  temp_dir dir;
  fill(dir.path() + "/a");
  const std::string d = "--dir " + dir.path() + "/a export --out " + dir.path() + "/k.ucbundle";
  EXPECT_NE(tool(d + " --kind cuda-c").out.find("exported 4 entries"), std::string::npos);
  EXPECT_NE(tool(d + " --device 'Portable Computing'").out.find("exported 2 entries"), std::string::npos);
  EXPECT_NE(tool(d + " --kind cuda-c --device PoCL").out.find("exported 0 entries"), std::string::npos);
  EXPECT_NE(tool(d + " --newer-than 1").out.find("exported 6 entries"), std::string::npos);
}

TEST(StoreBundleTool, ImportPrintsALinePerRefusedRecordAndExitsOne) {
  temp_dir dir;
  fill(dir.path() + "/a");
  const std::string key = dir.path() + "/fleet.key";
  std::ofstream(key) << "the fleet's secret, 32 bytes....";
  ::chmod(key.c_str(), 0600);
  const std::string bundle = dir.path() + "/k.ucbundle";
  ASSERT_EQ(tool("--dir " + dir.path() + "/a export --out " + bundle).status, 0);
  // Unsigned records, imported with a secret: each refused.
  const command_result r = tool("--dir " + dir.path() + "/b import " + bundle + " --secret-file " + key);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("refused: record 1: not signed\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("refused: record 6: not signed\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("imported 0 of 6 records from " + bundle + ": 0 already present, 6 refused\n"),
            std::string::npos)
      << r.out;
  // Signed with it, they go in.
  ASSERT_EQ(tool("--dir " + dir.path() + "/a export --out " + bundle + " --secret-file " + key).status, 0);
  EXPECT_EQ(tool("--dir " + dir.path() + "/b import " + bundle + " --secret-file " + key).status, 0);
}

TEST(StoreBundleTool, AnUnusableBundleExitsOneAndImportsNothing) {
  temp_dir dir;
  fill(dir.path() + "/a");
  const std::string bundle = dir.path() + "/k.ucbundle";
  ASSERT_EQ(tool("--dir " + dir.path() + "/a export --out " + bundle).status, 0);
  fs::resize_file(bundle, fs::file_size(bundle) - 1);
  command_result r = tool("--dir " + dir.path() + "/b import " + bundle);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("is truncated (it does not end with its trailer); nothing imported"), std::string::npos)
      << r.out;
  ASSERT_EQ(::mkfifo((dir.path() + "/fifo").c_str(), 0600), 0);
  r = tool("--dir " + dir.path() + "/b import " + dir.path() + "/fifo");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("is not a regular file"), std::string::npos) << r.out;
  r = tool("--dir " + dir.path() + "/a export --out " + dir.path() + "/no/such/dir/k.ucbundle");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("cannot write the bundle"), std::string::npos) << r.out;
  EXPECT_EQ(kernel_store(store_in(dir.path() + "/b")).stats().entries, 0u);
}

TEST(StoreBundleTool, MissingOrBadOptionsAreUsageErrors) {
  temp_dir dir;
  const std::string d = "--dir " + dir.path();
  for (const std::string& args : {d + " export", d + " import", d + " export --out f --newer-than x",
                                  d + " export --out f --newer-than 0", d + " import a b", d + " export --out f --fix",
                                  std::string("--remote redis://localhost:1 export --out f")}) {
    const command_result r = tool(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("usage: unicache-store"), std::string::npos) << args << "\n" << r.out;
  }
  const command_result r =
      tool(d + " export --out " + dir.path() + "/k.ucbundle --secret-file " + dir.path() + "/none");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("secret file"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir.path() + "/k.ucbundle"));
}

}  // namespace
}  // namespace unicache
