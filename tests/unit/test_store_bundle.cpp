// Store bundles: export_bundle and import_bundle on real stores, and bundles
// damaged the ways files get damaged (cut short, a flipped byte, another
// secret, a FIFO or a link in the bundle's place).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "store/bundle_format.hpp"
#include "store/entry_format.hpp"
#include "store/entry_signing.hpp"
#include "store_test_support.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;
namespace fs = std::filesystem;

// A key that describes itself, as the GPU backends' keys do.
std::string kernel_key(const std::string& kind, int i) {
  cache_key key;
  key.add(kind).add("kernel" + std::to_string(i)).add("-O3").add("source of kernel " + std::to_string(i));
  return std::string(key.bytes());
}

byte_vector read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return byte_vector(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, byte_span bytes, std::size_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(bytes.data()),
                                                                static_cast<std::streamsize>(size));
}

// A secret file as the remote tier reads one: private, 16 bytes or more.
std::string secret_file(const std::string& dir, const std::string& name, const std::string& secret) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << secret;
  ::chmod(path.c_str(), 0600);
  return path;
}

// Where each record of the bundle `bytes` begins.
std::vector<std::size_t> record_offsets(const byte_vector& bytes) {
  std::vector<std::size_t> out;
  const std::size_t end = bytes.size() - detail::kBundleTrailerBytes;
  for (std::size_t at = detail::kBundleHeaderBytes; at < end;) {
    const auto h = detail::read_record_header(byte_span(bytes).subspan(at));
    if (!h) break;
    out.push_back(at);
    at += static_cast<std::size_t>(h->record_bytes());
  }
  return out;
}

// A store of `entries` entries on two devices, half of them cuda-c, and its bundle.
struct exported_store {
  explicit exported_store(int entries) : count(entries) {
    kernel_store store(store_in(dir.path()));
    for (int i = 0; i < entries; ++i) {
      const std::string key = key_of(i);
      EXPECT_TRUE(store.put(device_of(i), key, binary_of(i)));
    }
    const bundle_report r = store.export_bundle(bundle_path(), {});
    EXPECT_EQ(r.records, static_cast<std::uint64_t>(entries));
    EXPECT_TRUE(r.refused.empty());
    bundle = read_file(bundle_path());
    EXPECT_EQ(r.bytes, bundle.size());
  }
  std::string bundle_path() const { return dir.path() + "/all.ucbundle"; }
  static std::string key_of(int i) { return kernel_key(i % 2 ? "cuda-c" : "opencl-c", i); }
  static device_identity device_of(int i) { return i % 3 ? gpu_a() : pocl_cpu(); }
  static byte_vector binary_of(int i) { return binary_for(key_of(i), 200 + static_cast<std::size_t>(i % 50)); }

  temp_dir dir{"unicache-bundle-source"};
  int count;
  byte_vector bundle;
};

// `bytes` with `change` applied, written to a file in `dir`.
template <typename Change>
std::string changed_bundle(const temp_dir& dir, byte_vector bytes, Change change) {
  change(bytes);
  const std::string path = dir.path() + "/changed.ucbundle";
  write_file(path, bytes, bytes.size());
  return path;
}

constexpr int kEntries = 1000;

// A store of 1,000 entries and its bundle, made once for the tests that
// only read them (a put costs about a millisecond on a loaded machine).
class BundleOfAThousand : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { source_ = new exported_store(kEntries); }
  static void TearDownTestSuite() { delete source_; }

  static exported_store* source_;
  temp_dir target_{"unicache-bundle-target"};
};
exported_store* BundleOfAThousand::source_ = nullptr;

TEST_F(BundleOfAThousand, ExportThenImportRoundTripsEveryEntryReadableThroughGet) {
  kernel_store target(store_in(target_.path()));
  const bundle_report r = target.import_bundle(source_->bundle_path());
  EXPECT_EQ(r.records, static_cast<std::uint64_t>(kEntries));
  EXPECT_EQ(r.imported, static_cast<std::uint64_t>(kEntries));
  EXPECT_EQ(r.already_present, 0u);
  EXPECT_TRUE(r.refused.empty());
  for (int i = 0; i < kEntries; ++i) {
    const std::optional<byte_vector> got = target.get(exported_store::device_of(i), exported_store::key_of(i));
    ASSERT_TRUE(got) << "entry " << i;
    EXPECT_EQ(*got, exported_store::binary_of(i)) << "entry " << i;
  }
  // Each new device directory got its description; the records count what is on disk.
  for (const store_entry_info& e : target.list()) {
    EXPECT_TRUE(e.device_description == detail::describe(gpu_a()) ||
                e.device_description == detail::describe(pocl_cpu()))
        << e.device_description;
  }
  const store_stats s = target.stats(/*recount=*/true);
  EXPECT_EQ(s.entries, static_cast<std::uint64_t>(kEntries));
  EXPECT_EQ(s.bytes, s.recorded_bytes);
  EXPECT_EQ(s.devices, 2u);
}

TEST_F(BundleOfAThousand, ARecordWithACorruptEntryIsRefusedAndTheOthersImported) {
  const std::string path = changed_bundle(target_, source_->bundle, [](byte_vector& bytes) {
    const std::size_t at = record_offsets(bytes).at(16);  // record 17
    const auto h = detail::read_record_header(byte_span(bytes).subspan(at));
    bytes[at + static_cast<std::size_t>(h->record_bytes()) - 1] ^= 0x01;  // its binary's last byte
  });
  kernel_store target(store_in(target_.path()));
  const bundle_report r = target.import_bundle(path);
  EXPECT_EQ(r.imported, static_cast<std::uint64_t>(kEntries - 1));
  ASSERT_EQ(r.refused.size(), 1u);
  EXPECT_EQ(r.refused[0], "record 17: entry corrupt (checksum mismatch)");
}

TEST_F(BundleOfAThousand, ATruncatedBundleImportsNothingAndSaysTruncated) {
  const std::size_t size = source_->bundle.size();
  const std::size_t record_2 = record_offsets(source_->bundle).at(1);
  for (const std::size_t cut : {std::size_t{0}, std::size_t{5}, detail::kBundleHeaderBytes + 10, record_2 + 3,
                                record_2 + 200, size / 2, size - detail::kBundleTrailerBytes, size - 20, size - 1}) {
    SCOPED_TRACE("cut at " + std::to_string(cut) + " of " + std::to_string(size));
    const std::string path = target_.path() + "/cut.ucbundle";
    write_file(path, source_->bundle, cut);
    kernel_store target(store_in(target_.path() + "/store"));
    try {
      target.import_bundle(path);
      ADD_FAILURE() << "imported";
    } catch (const store_error& e) {
      EXPECT_NE(std::string(e.what()).find("is truncated"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("nothing imported"), std::string::npos) << e.what();
    }
    EXPECT_EQ(target.stats(/*recount=*/true).entries, 0u);
  }
}

TEST_F(BundleOfAThousand, ADamagedRecordHeaderRefusesTheWholeBundle) {
  const std::string path = changed_bundle(target_, source_->bundle, [](byte_vector& bytes) {
    bytes[record_offsets(bytes).at(500) + 30] ^= 1;  // record 501's entry size
  });
  kernel_store target(store_in(target_.path()));
  try {
    target.import_bundle(path);
    ADD_FAILURE() << "imported";
  } catch (const store_error& e) {
    EXPECT_NE(std::string(e.what()).find("is damaged (record 501's header is corrupt)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(target.stats(/*recount=*/true).entries, 0u);
}

TEST(StoreBundle, AnEntryAlreadyStoredIsSkippedAndLeftAsItWas) {
  const exported_store source(50);
  kernel_store store(store_in(source.dir.path()));
  const std::string one = entry_files(source.dir.path()).front();
  struct stat before {};
  ASSERT_EQ(::stat(one.c_str(), &before), 0);
  const bundle_report r = store.import_bundle(source.bundle_path());
  EXPECT_EQ(r.imported, 0u);
  EXPECT_EQ(r.already_present, 50u);
  EXPECT_TRUE(r.refused.empty());
  struct stat after {};
  ASSERT_EQ(::stat(one.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(store.stats().entries, 50u);
}

TEST(StoreBundle, ARecordTooLargeForThisStoreIsRefusedAndReported) {
  const exported_store source(20);
  temp_dir target_dir;
  store_config small = store_in(target_dir.path());
  small.max_entry_bytes = 210;  // binaries are 200 to 219 bytes
  kernel_store target(small);
  const bundle_report r = target.import_bundle(source.bundle_path());
  EXPECT_EQ(r.imported, 11u);
  ASSERT_EQ(r.refused.size(), 9u);
  // Records are in the layout's order: which ones, the hashes decide.
  for (const std::string& line : r.refused) {
    EXPECT_TRUE(line.starts_with("record ")) << line;
    EXPECT_NE(line.find(": too large (a binary of 21"), std::string::npos) << line;
    EXPECT_TRUE(line.ends_with(" bytes; this store keeps at most 210)")) << line;
  }
}

TEST(StoreBundle, ImportsFromSeveralThreadsAtOnceStoreEachEntryOnce) {
  constexpr int kCount = 100;
  const exported_store source(kCount);
  temp_dir target_dir;
  kernel_store target(store_in(target_dir.path()));
  std::vector<std::thread> threads;
  std::atomic<std::uint64_t> imported{0};
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      const bundle_report r = target.import_bundle(source.bundle_path());
      imported += r.imported;
      EXPECT_EQ(r.imported + r.already_present, static_cast<std::uint64_t>(kCount));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(imported.load(), static_cast<std::uint64_t>(kCount));
  const store_stats s = target.stats(/*recount=*/true);
  EXPECT_EQ(s.entries, static_cast<std::uint64_t>(kCount));
  EXPECT_EQ(s.bytes, s.recorded_bytes);
  EXPECT_TRUE(target.verify(/*fix=*/false).empty());
}

TEST(StoreBundle, ARecordWithACorruptDescriptionIsRefusedAndTheOthersImported) {
  const exported_store source(10);
  temp_dir target_dir;
  const std::string path = changed_bundle(target_dir, source.bundle, [](byte_vector& bytes) {
    bytes[record_offsets(bytes).at(2) + detail::kRecordHeaderBytes] ^= 0x20;  // record 3's description
  });
  kernel_store target(store_in(target_dir.path()));
  const bundle_report r = target.import_bundle(path);
  EXPECT_EQ(r.imported, 9u);
  ASSERT_EQ(r.refused.size(), 1u);
  EXPECT_EQ(r.refused[0], "record 3: device description corrupt (checksum mismatch)");
}

TEST(StoreBundle, WithASecretEveryRecordMustBeSignedWithThatSecret) {
  temp_dir dir;
  const std::string ours = secret_file(dir.path(), "ours.key", "a secret of the fleet, 32 bytes.");
  const std::string theirs = secret_file(dir.path(), "theirs.key", "another secret, from elsewhere!!");
  kernel_store source(store_in(dir.path() + "/source"));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(source.put(gpu_a(), kernel_key("cuda-c", i), binary_for("b", 100)));
  const std::string signed_path = dir.path() + "/signed.ucbundle";
  const std::string unsigned_path = dir.path() + "/unsigned.ucbundle";
  EXPECT_EQ(source.export_bundle(signed_path, {}, ours).records, 3u);
  EXPECT_EQ(source.export_bundle(unsigned_path, {}).records, 3u);

  kernel_store with_ours(store_in(dir.path() + "/a"));
  EXPECT_EQ(with_ours.import_bundle(signed_path, ours).imported, 3u);
  kernel_store with_theirs(store_in(dir.path() + "/b"));
  bundle_report r = with_theirs.import_bundle(signed_path, theirs);
  EXPECT_EQ(r.imported, 0u);
  ASSERT_EQ(r.refused.size(), 3u);
  EXPECT_EQ(r.refused[1], "record 2: signature does not verify (signed with another secret, or altered)");
  r = with_theirs.import_bundle(unsigned_path, theirs);
  ASSERT_EQ(r.refused.size(), 3u);
  EXPECT_EQ(r.refused[0], "record 1: not signed");
  // Without a secret, signatures are not checked.
  kernel_store without(store_in(dir.path() + "/c"));
  EXPECT_EQ(without.import_bundle(signed_path).imported, 3u);
}

TEST(StoreBundle, AForeignSignedRecordAmongOursIsRefusedAndTheOthersImported) {
  temp_dir dir;
  const std::string ours = "a secret of the fleet, 32 bytes.";
  const std::string ours_file = secret_file(dir.path(), "ours.key", ours);
  // Records signed as export signs them, the second under another secret.
  byte_vector bundle = detail::encode_bundle_header(::time(nullptr));
  detail::bundle_trailer trailer;
  const detail::hash128 device = detail::device_hash(gpu_a());
  for (int i = 0; i < 3; ++i) {
    const detail::entry_signer signer(i == 1 ? "not the fleet's secret at all!!!" : ours,
                                      detail::kBundleSigningScope);
    const byte_vector entry = detail::encode_entry(device, kernel_key("cuda-c", i), binary_for("x", 64), 0);
    const byte_vector record =
        signer.sign(detail::encode_record(device, "a GPU", entry, detail::kRecordSignatureBytes));
    bundle.insert(bundle.end(), record.begin(), record.end());
    ++trailer.records;
    trailer.record_bytes += record.size();
  }
  const byte_vector end = detail::encode_bundle_trailer(trailer);
  bundle.insert(bundle.end(), end.begin(), end.end());
  write_file(dir.path() + "/mixed.ucbundle", bundle, bundle.size());

  kernel_store target(store_in(dir.path() + "/store"));
  const bundle_report r = target.import_bundle(dir.path() + "/mixed.ucbundle", ours_file);
  EXPECT_EQ(r.imported, 2u);
  ASSERT_EQ(r.refused.size(), 1u);
  EXPECT_EQ(r.refused[0].rfind("record 2: signature does not verify", 0), 0u) << r.refused[0];
  EXPECT_FALSE(target.get(gpu_a(), kernel_key("cuda-c", 1)));
  EXPECT_TRUE(target.get(gpu_a(), kernel_key("cuda-c", 2)));
}

TEST(StoreBundle, AnUnusableSecretFileIsAnInvalidArgumentAndWritesNothing) {
  temp_dir dir;
  kernel_store store(store_in(dir.path() + "/store"));
  const std::string bundle = dir.path() + "/b.ucbundle";
  EXPECT_THROW(store.export_bundle(bundle, {}, dir.path() + "/missing.key"), invalid_argument);
  EXPECT_FALSE(fs::exists(bundle));
  const std::string short_secret = secret_file(dir.path(), "short.key", "too short");
  EXPECT_THROW(store.import_bundle(bundle, short_secret), invalid_argument);
}

TEST(StoreBundle, FiltersSelectByKindDeviceAndLastUse) {
  temp_dir dir;
  kernel_store source(store_in(dir.path() + "/source"));
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(source.put(gpu_a(), kernel_key("cuda-c", i), binary_for("c", 50)));
    ASSERT_TRUE(source.put(pocl_cpu(), kernel_key("opencl-c", i), binary_for("o", 50)));
  }
  ASSERT_TRUE(source.put(gpu_a(), "opencl-engine-info/1", binary_for("i", 50)));
  // Two entries last used 10 days ago.
  const struct timespec old[2] = {{::time(nullptr) - 10 * 86400, 0}, {::time(nullptr) - 10 * 86400, 0}};
  for (int i : {0, 1}) {
    const std::string file = entry_dir_of(dir.path() + "/source", gpu_a(), kernel_key("cuda-c", i)) + "/0.entry";
    ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), old, 0), 0);
  }
  const std::string bundle = dir.path() + "/b.ucbundle";
  auto exported = [&](bundle_filter f) { return source.export_bundle(bundle, f).records; };
  EXPECT_EQ(exported({}), 9u);
  EXPECT_EQ(exported({"cuda-c", "", 0}), 4u);
  EXPECT_EQ(exported({"opencl-c", "", 0}), 4u);
  EXPECT_EQ(exported({"", "NVIDIA H200", 0}), 5u);
  EXPECT_EQ(exported({"", "PoCL", 0}), 4u);
  EXPECT_EQ(exported({"", "", 7}), 7u);
  EXPECT_EQ(exported({"cuda-c", "H200", 7}), 2u);
  EXPECT_EQ(exported({"no-such-kind", "", 0}), 0u);
  // The last one written is a valid, empty bundle.
  kernel_store target(store_in(dir.path() + "/target"));
  const bundle_report r = target.import_bundle(bundle);
  EXPECT_EQ(r.records, 0u);
  EXPECT_TRUE(r.refused.empty());
}

TEST(StoreBundle, ExportLeavesADamagedEntryOutAndReportsIt) {
  temp_dir dir;
  kernel_store source(store_in(dir.path() + "/source"));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(source.put(gpu_a(), kernel_key("cuda-c", i), binary_for("c", 50)));
  const std::string broken = entry_dir_of(dir.path() + "/source", gpu_a(), kernel_key("cuda-c", 1)) + "/0.entry";
  byte_vector bytes = read_file(broken);
  bytes.back() ^= 1;
  write_file(broken, bytes, bytes.size());
  const bundle_report r = source.export_bundle(dir.path() + "/b.ucbundle", {});
  EXPECT_EQ(r.records, 2u);
  ASSERT_EQ(r.refused.size(), 1u);
  EXPECT_NE(r.refused[0].find("/0.entry: corrupt (checksum mismatch)"), std::string::npos) << r.refused[0];
}

TEST(StoreBundle, ExportNeverLeavesAPartialBundleUnderItsNameNorFollowsALink) {
  temp_dir dir;
  kernel_store source(store_in(dir.path() + "/source"));
  ASSERT_TRUE(source.put(gpu_a(), kernel_key("cuda-c", 0), binary_for("c", 50)));
  EXPECT_THROW(source.export_bundle(dir.path() + "/no/such/dir/b.ucbundle", {}), store_error);
  fs::create_directory(dir.path() + "/a-directory");
  try {
    source.export_bundle(dir.path() + "/a-directory", {});
    ADD_FAILURE() << "exported over a directory";
  } catch (const store_error& e) {
    EXPECT_NE(std::string(e.what()).find("it is a directory"), std::string::npos) << e.what();
  }
  // A link at the bundle's name is replaced itself; what it points to stays.
  std::ofstream(dir.path() + "/precious") << "keep me";
  fs::create_symlink(dir.path() + "/precious", dir.path() + "/link.ucbundle");
  EXPECT_EQ(source.export_bundle(dir.path() + "/link.ucbundle", {}).records, 1u);
  EXPECT_FALSE(fs::is_symlink(dir.path() + "/link.ucbundle"));
  EXPECT_EQ(fs::file_size(dir.path() + "/precious"), 7u);
  // Nothing but what was asked for is left in the directory.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a-directory", "link.ucbundle", "precious", "source"}));
}

TEST(StoreBundle, AFifoALinkOrADirectoryGivenAsTheBundleIsRefusedWithoutHanging) {
  temp_dir dir;
  kernel_store source(store_in(dir.path() + "/source"));
  ASSERT_TRUE(source.put(gpu_a(), kernel_key("cuda-c", 0), binary_for("c", 50)));
  ASSERT_EQ(source.export_bundle(dir.path() + "/real.ucbundle", {}).records, 1u);
  ASSERT_EQ(::mkfifo((dir.path() + "/fifo").c_str(), 0600), 0);
  fs::create_symlink(dir.path() + "/real.ucbundle", dir.path() + "/link");
  const child_result r = run_in_child(
      [&] {
        kernel_store target(store_in(dir.path() + "/target"));
        int refused = 0;
        for (const char* name : {"/fifo", "/link", "/source", "/missing"}) {
          try {
            target.import_bundle(dir.path() + name);
          } catch (const store_error& e) {
            std::fprintf(stderr, "%s\n", e.what());
            ++refused;
          }
        }
        return refused == 4 && target.stats(true).entries == 0 ? 0 : 1;
      },
      kHangAlarmSeconds);
  EXPECT_FALSE(r.hung()) << r.err;
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("is not a regular file (a FIFO, socket or device)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is a symbolic link; give the bundle itself"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is a directory, not a bundle"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cannot be opened (No such file or directory)"), std::string::npos) << r.err;
}

TEST(StoreBundle, AFileThatIsNoBundleIsRefusedSayingSo) {
  temp_dir dir;
  kernel_store store(store_in(dir.path() + "/store"));
  ASSERT_TRUE(store.put(gpu_a(), "k", binary_for("k", 10)));
  // A store entry is no bundle; nor is a large file of anything else.
  const std::string entry = entry_files(dir.path()).front();
  const std::string large = dir.path() + "/large";
  std::ofstream(large, std::ios::binary) << std::string(1 << 20, 'x');
  for (const std::string& path : {entry, large}) {
    try {
      store.import_bundle(path);
      ADD_FAILURE() << path;
    } catch (const store_error& e) {
      EXPECT_NE(std::string(e.what()).find("is not a unicache bundle; nothing imported"), std::string::npos)
          << e.what();
    }
  }
}

TEST(StoreBundle, ADisabledStoreRefusesExportAndImport) {
  temp_dir dir;
  store_config off = store_in(dir.path());
  off.enabled = false;
  kernel_store store(off);
  EXPECT_THROW(store.export_bundle(dir.path() + "/b.ucbundle", {}), store_error);
  EXPECT_THROW(store.import_bundle(dir.path() + "/b.ucbundle"), store_error);
  EXPECT_FALSE(fs::exists(dir.path() + "/b.ucbundle"));
}

}  // namespace
}  // namespace unicache
