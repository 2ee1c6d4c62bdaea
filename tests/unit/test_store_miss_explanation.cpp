// Misses that explain themselves: a missed (device, key) against the nearest
// stored entry of the same kernel names each field that differs (backend,
// architecture, target, compiler, device and driver, unicache version,
// options, shape class, generated source, an old key's format), picks the
// entry with the fewest differences, and says nothing where no entry of the
// kernel is stored; a recorded miss is explained again offline by its id.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "store_test_support.hpp"
#include "temp_dir.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/kernel_path.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

using testing::temp_dir;

device_identity cuda(const std::string& arch = "sm_90", const std::string& target = "sm_90",
                     const std::string& compiler = "nvrtc 11080") {
  return {"CUDA", arch, target, compiler};
}

kernel_source gemm(const std::string& options = "-default-device", const std::string& shapes = "",
                   const std::string& body = "void gemm() {}") {
  kernel_source s;
  s.language = "cuda-c";
  s.kernel_name = "gemm";
  s.options = options;
  s.shape_class = shapes;
  s.source = body;
  return s;
}

class MissExplanation : public ::testing::Test {
 protected:
  void stored(const device_identity& device, const kernel_source& src) {
    ASSERT_TRUE(store_.put(device, src.store_key(), testing::binary_for(src.store_key(), 100)));
  }
  // The explanation's differences, joined: "architecture (stored sm_80, here sm_90); ...".
  std::string explained(const device_identity& device, const kernel_source& src) {
    const std::optional<miss_explanation> e = store_.explain_miss(device, src.store_key());
    if (!e) return "(none)";
    std::string out;
    for (const std::string& d : e->differences) out += (out.empty() ? "" : "; ") + d;
    return out;
  }

  temp_dir dir_{"unicache-explain-test"};
  kernel_store store_{testing::store_in(dir_.path())};
};

TEST_F(MissExplanation, NamesTheArchitectureTheTargetAndTheCompiler) {
  stored(cuda("sm_80", "sm_80"), gemm());
  EXPECT_EQ(explained(cuda(), gemm()), "architecture (stored sm_80, here sm_90); target (stored sm_80, here sm_90)");
  stored(cuda("sm_90", "sm_90", "nvrtc 11020"), gemm());
  EXPECT_EQ(explained(cuda(), gemm()), "compiler (stored nvrtc 11020, here nvrtc 11080)")
      << "the nearest entry: one field differs";
}

TEST_F(MissExplanation, NamesTheOptionsTheShapeClassAndTheGeneratedSource) {
  stored(cuda(), gemm("-lineinfo"));
  EXPECT_EQ(explained(cuda(), gemm()), "options (stored -lineinfo, here -default-device)");
  stored(cuda(), gemm("-default-device", "M=3 N=64 K=768"));
  EXPECT_EQ(explained(cuda(), gemm("-default-device", "M=5 N=64 K=768")),
            "shape class (stored M=3 N=64 K=768, here M=5 N=64 K=768)");
  stored(cuda(), gemm());
  EXPECT_EQ(explained(cuda(), gemm("-default-device", "", "void gemm() { /* tiles 64x64 */ }")),
            "generated source") << "the same fields, another kernel configuration";
}

TEST_F(MissExplanation, NamesTheDeviceAndDriverOfOtherBackendsAndTheBackendItself) {
  const device_identity v1{"NVIDIA CUDA", "NVIDIA H100", "OpenCL 3.0 CUDA", "560.35.03"};
  const device_identity v2{"NVIDIA CUDA", "NVIDIA H100", "OpenCL 3.0 CUDA", "580.65.06"};
  kernel_source cl = gemm();
  cl.language = "opencl-c";
  stored(v1, cl);
  EXPECT_EQ(explained(v2, cl), "driver (stored 560.35.03, here 580.65.06)");
  EXPECT_EQ(explained(cuda(), gemm()).substr(0, 48), "backend (stored NVIDIA CUDA opencl-c, here CUDA ")
      << "the same kernel of another backend is the nearest there is";
}

TEST_F(MissExplanation, NamesTheUnicacheVersionOfAnEntryAnotherBuildWrote) {
  // Another build's entry has a device directory of its own: here, one of
  // this build's, relabelled (and of other options, so that it is not the
  // missed entry itself).
  stored(cuda(), gemm("-O3"));
  // The entry's device directory as another unicache build describes it.
  for (const auto& dev : std::filesystem::directory_iterator(dir_.path() + "/v2")) {
    const std::string file = dev.path().string() + "/device.txt";
    if (!std::filesystem::exists(file)) continue;
    std::stringstream text;
    text << std::ifstream(file).rdbuf();
    std::string description = text.str();
    description = description.substr(0, description.rfind(" / ")) + " / unicache 0.1.0 (0123abc)\n";
    std::ofstream(file, std::ios::trunc) << description;
  }
  const std::string said = explained(cuda(), gemm());
  EXPECT_EQ(said.rfind("unicache version (stored 0.1.0 (0123abc), here ", 0), 0u) << said;
  EXPECT_NE(said.find("; options (stored -O3, here -default-device)"), std::string::npos) << said;
}

TEST_F(MissExplanation, AKeyAnOlderUnicacheWroteIsAnotherKeyFormat) {
  cache_key old;  // language, kernel name, options, source: no shape class
  old.add("cuda-c").add("gemm").add("-default-device").add("void gemm() {}");
  ASSERT_TRUE(store_.put(cuda(), std::string(old.bytes()), testing::binary_for("old", 100)));
  EXPECT_EQ(explained(cuda(), gemm()), "key format (stored by another unicache version)");
}

TEST_F(MissExplanation, NothingIsSaidWithoutAnEntryOfTheSameKernel) {
  kernel_source other = gemm();
  other.kernel_name = "softmax";
  stored(cuda(), other);
  EXPECT_EQ(explained(cuda(), gemm()), "(none)");
  EXPECT_FALSE(store_.explain_miss(cuda(), "not a kernel's key").has_value());
}

TEST_F(MissExplanation, TheLineNamesTheKernelBothIdsAndTheFields) {
  stored(cuda("sm_80", "sm_80"), gemm());
  const std::optional<miss_explanation> e = store_.explain_miss(cuda(), gemm().store_key());
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->blob_id, blob_id(cuda(), gemm().store_key()));
  EXPECT_EQ(e->nearest_blob_id, blob_id(cuda("sm_80", "sm_80"), gemm().store_key()));
  const std::string line = e->line();
  EXPECT_EQ(line.rfind("unicache: miss explained: cuda-c gemm (" + e->blob_id.substr(0, 16) + "): ", 0), 0u) << line;
  EXPECT_NE(line.find("differs in architecture (stored sm_80, here sm_90)"), std::string::npos) << line;
}

TEST_F(MissExplanation, StoredValuesArePrintedEscapedAndCut) {
  stored(cuda(), gemm(std::string("-D X=\x1b[2J") + std::string(200, 'o')));
  const std::string said = explained(cuda(), gemm());
  EXPECT_EQ(said.find('\x1b'), std::string::npos) << "escaped";
  EXPECT_LT(said.size(), 200u) << said;
}

TEST_F(MissExplanation, ARecordedMissIsExplainedAgainByItsIdAgainstTheStoreAsItIsThen) {
  stored(cuda("sm_80", "sm_80"), gemm());
  store_.record_miss(cuda(), gemm().store_key());
  const std::string id = blob_id(cuda(), gemm().store_key());
  const std::optional<miss_explanation> again = store_.explain_recorded_miss(id.substr(0, 16));
  ASSERT_TRUE(again.has_value()) << "found by the 16 digits the line shows";
  EXPECT_EQ(again->line(), store_.explain_miss(cuda(), gemm().store_key())->line()) << "the same line, offline";
  // The store changes: the explanation follows it.
  stored(cuda("sm_90", "sm_90", "nvrtc 11020"), gemm());
  EXPECT_NE(store_.explain_recorded_miss(id)->line().find("differs in compiler (stored nvrtc 11020"), std::string::npos);
  store_.clear();
  const std::optional<miss_explanation> none = store_.explain_recorded_miss(id);
  ASSERT_TRUE(none.has_value());
  EXPECT_NE(none->line().find("no entry of this kernel is stored"), std::string::npos) << none->line();
}

TEST_F(MissExplanation, RecordsAreBoundedAreNotEntriesAndBadIdsAreRefused) {
  for (int i = 0; i < 70; ++i) store_.record_miss(cuda(), gemm("-O" + std::to_string(i)).store_key());
  std::size_t records = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir_.path() + "/v2/misses")) records += f.path().extension() == ".miss";
  EXPECT_EQ(records, 64u) << "the newest 64 are kept";
  EXPECT_EQ(store_.stats(true).entries, 0u) << "records are not entries";
  EXPECT_TRUE(store_.verify(false).empty()) << "nor strays";
  EXPECT_FALSE(store_.explain_recorded_miss("0123456789abcdef").has_value());
  EXPECT_THROW(store_.explain_recorded_miss("xyz"), store_error);
  EXPECT_THROW(store_.explain_recorded_miss("0123"), store_error) << "too short to name one";
}

}  // namespace
}  // namespace unicache
