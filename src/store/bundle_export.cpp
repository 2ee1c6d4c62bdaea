// kernel_store::export_bundle: the entries a filter selects, written as a
// bundle (bundle_format.hpp) to a temporary file that becomes the bundle
// only when complete.
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <tuple>

#include "store/bundle_format.hpp"
#include "store/entry_format.hpp"
#include "store/entry_inspection.hpp"
#include "store/entry_signing.hpp"
#include "store/kernel_store_impl.hpp"
#include "store/store_layout.hpp"
#include "store/store_walk.hpp"
#include "util/env.hpp"
#include "util/unique_fd.hpp"

namespace unicache {

using namespace detail;

namespace {

constexpr std::int64_t kSecondsPerDay = 86400;
constexpr std::size_t kShownPathBytes = 256;

// The bundle being written: a temporary file in the target's directory,
// renamed to the target by commit(), removed if it never is.
class bundle_file {
 public:
  bundle_file(const std::string& path, mode_t mode) : shown_(quoted(path, kShownPathBytes)) {
    std::string parent = path;
    const std::size_t slash = parent.find_last_of('/');
    name_ = slash == std::string::npos ? parent : parent.substr(slash + 1);
    parent = slash == std::string::npos ? "." : slash == 0 ? "/" : parent.substr(0, slash);
    if (name_.empty() || name_ == "." || name_ == "..") fail("it names a directory, not a file");
    dir_ = directory_handle::open(parent);
    if (!dir_.ok()) fail("its directory cannot be opened", dir_.error());
    struct stat st {};
    if (::fstatat(dir_.fd(), name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
      fail("it is a directory");
    }
    static std::atomic<unsigned long> counter{0};
    for (int attempt = 0; attempt < 16 && !fd_; ++attempt) {
      temp_ = ".ucbundle.tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
      fd_ = unique_fd(::openat(dir_.fd(), temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                               mode & 0777));
      if (!fd_ && errno != EEXIST) break;
    }
    if (!fd_) fail("a file cannot be created in its directory", errno);
    ::fchmod(fd_.get(), mode);  // the umask does not decide
  }
  ~bundle_file() {
    if (!committed_ && !temp_.empty() && dir_.ok()) ::unlinkat(dir_.fd(), temp_.c_str(), 0);
  }
  bundle_file(const bundle_file&) = delete;
  bundle_file& operator=(const bundle_file&) = delete;

  void write(byte_span bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd_.get(), bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("writing failed", errno);
      done += static_cast<std::size_t>(n);
    }
    written_ += bytes.size();
  }
  std::uint64_t written() const { return written_; }

  void commit() {
    if (::fsync(fd_.get()) != 0) fail("writing failed", errno);
    if (const int err = fd_.close(); err != 0) fail("writing failed", err);
    if (::renameat(dir_.fd(), temp_.c_str(), dir_.fd(), name_.c_str()) != 0) fail("renaming into place failed", errno);
    committed_ = true;
  }

 private:
  [[noreturn]] void fail(const std::string& why, int err = 0) const {
    throw store_error("cannot write the bundle " + shown_ + ": " + why +
                      (err != 0 ? std::string(" (") + std::strerror(err) + ")" : std::string()));
  }

  std::string shown_;
  std::string name_;
  directory_handle dir_;
  std::string temp_;
  unique_fd fd_;
  bool committed_ = false;
  std::uint64_t written_ = 0;
};

// Whether the filter's device text and age select `f` (the kind needs the
// entry read).
bool selected_before_reading(const bundle_filter& filter, const store_file& f, const std::string& description,
                             std::int64_t now) {
  if (!filter.device.empty() && description.find(filter.device) == std::string::npos) return false;
  return filter.max_age_days == 0 || f.mtime >= now - std::int64_t{filter.max_age_days} * kSecondsPerDay;
}

// Whether `f`, which inspect_entry found damaged, has merely gone since the
// walk (evicted, pruned): not worth a report.
bool has_gone(const store_directory& d, const store_file& f) {
  const directory_handle dir = open_beneath(d.root(), f.directory);
  struct stat st {};
  return !dir.ok() || (::fstatat(dir.fd(), f.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT);
}

}  // namespace

bundle_report kernel_store::export_bundle(const std::string& path, const bundle_filter& filter,
                                          const std::string& secret_file) const {
  const std::shared_ptr<const store_state> s = impl_->require_enabled();
  const store_directory& d = *s->directory;
  const entry_signer signer(secret_file.empty() ? std::string() : read_secret_file(secret_file, "the secret file"),
                            kBundleSigningScope);
  const std::int64_t now = ::time(nullptr);
  bundle_file out(path, d.permissions().file_mode());
  out.write(encode_bundle_header(now));

  walk_result w = walk_store(d.root());
  // In the layout's order: the same store gives the same bundle.
  std::sort(w.entries.begin(), w.entries.end(), [](const store_file& a, const store_file& b) {
    return std::tie(a.directory, a.name) < std::tie(b.directory, b.name);
  });
  std::map<std::string, std::string> descriptions;  // read once per device
  bundle_report report;
  bundle_trailer trailer;
  for (const store_file& f : w.entries) {
    const auto [it, first] = descriptions.try_emplace(f.device_hex);
    if (first) it->second = read_device_description(d, f.device_hex);
    const std::string& description = it->second;
    if (!selected_before_reading(filter, f, description, now)) continue;
    byte_vector entry;
    const store_entry_info info = inspect_entry(d, s->config, f, &entry);
    // A damaged entry whose kind cannot be told is reported whatever the filter's kind.
    const bool kind_known = info.valid || !info.kind.empty();
    if (!filter.kind.empty() && kind_known && info.kind != filter.kind) continue;
    if (!info.valid) {
      if (!has_gone(d, f)) report.refused.push_back(info.path + ": " + info.problem);
      continue;
    }
    const parsed_entry e = parse_entry(entry, nullptr);
    // A description too long for a device.txt of an importing store is
    // left out (it is for people; the hash is the identity).
    const std::string_view carried =
        description.size() <= kMaxBundleDescriptionBytes ? std::string_view(description) : std::string_view();
    const byte_vector record =
        signer.sign(encode_record(e.device, carried, entry, signer.signs() ? kRecordSignatureBytes : 0));
    out.write(record);
    ++trailer.records;
    trailer.record_bytes += record.size();
  }
  out.write(encode_bundle_trailer(trailer));
  out.commit();
  report.records = trailer.records;
  report.bytes = out.written();
  return report;
}

}  // namespace unicache
