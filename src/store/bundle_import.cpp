// kernel_store::import_bundle: a bundle (bundle_format.hpp) checked whole
// first (header, trailer, every record's header), then each record checked
// and published as put publishes an entry.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include "store/bundle_format.hpp"
#include "store/entry_format.hpp"
#include "store/entry_signing.hpp"
#include "store/entry_slots.hpp"
#include "store/kernel_store_impl.hpp"
#include "util/env.hpp"
#include "util/file_io.hpp"

namespace unicache {

using namespace detail;

namespace {

static_assert(kRecordSignatureBytes == entry_signer::kMacBytes);

constexpr std::size_t kShownPathBytes = 256;

// The bundle at `path`, opened without following a link or blocking; the
// reads below are bounded by its size as fstat saw it.
class bundle_source {
 public:
  explicit bundle_source(const std::string& path) : shown_(quoted(path, kShownPathBytes)) {
    const int err = open_regular_file(path, file_);
    if (err == ELOOP) refuse("is a symbolic link; give the bundle itself");
    if (err == EISDIR) refuse("is a directory, not a bundle");
    if (err == EINVAL) refuse("is not a regular file (a FIFO, socket or device), not a bundle");
    if (err != 0) refuse(std::string("cannot be opened (") + std::strerror(err) + ")");
    size_ = static_cast<std::uint64_t>(file_.status.st_size);
  }

  const std::string& shown() const { return shown_; }
  std::uint64_t size() const { return size_; }

  // `size` bytes at `offset`, or nullopt when they cannot be read (the
  // file shrank since it was opened, or an I/O error).
  std::optional<byte_vector> read(std::uint64_t offset, std::size_t size) const {
    byte_vector out(size);
    if (read_exactly(file_, out.data(), out.size(), offset) != 0) return std::nullopt;
    return out;
  }
  byte_vector read_or_refuse(std::uint64_t offset, std::size_t size) const {
    std::optional<byte_vector> out = read(offset, size);
    if (!out) refuse("cannot be read (an I/O error, or it shrank while it was read)");
    return std::move(*out);
  }

  // The header of the record at `at`, which must lie whole before `end`;
  // nullopt, with why in `problem`, when it does not.
  std::optional<record_header> header_at(std::uint64_t at, std::uint64_t end, std::string& problem) const {
    std::optional<byte_vector> bytes;
    if (end - at < kRecordHeaderBytes || !(bytes = read(at, kRecordHeaderBytes))) {
      problem = "header is cut short";
      return std::nullopt;
    }
    std::optional<record_header> h = read_record_header(*bytes);
    if (!h) problem = "header is corrupt";
    if (h && h->record_bytes() > end - at) problem = "size runs past the trailer";
    return problem.empty() ? h : std::nullopt;
  }

  [[noreturn]] void refuse(const std::string& why) const {
    throw store_error("the bundle " + shown_ + " " + why + "; nothing imported");
  }

 private:
  std::string shown_;
  opened_file file_;
  std::uint64_t size_ = 0;
};

// Checks that the bundle is whole: its header, its trailer, and every
// record's header leading from one to the other. Returns the record count.
std::uint64_t check_whole(const bundle_source& in) {
  const byte_vector head =
      in.read_or_refuse(0, static_cast<std::size_t>(std::min<std::uint64_t>(in.size(), kBundleHeaderBytes)));
  switch (check_bundle_header(head, in.size())) {
    case bundle_problem::none: break;
    case bundle_problem::not_a_bundle: in.refuse("is not a unicache bundle");
    case bundle_problem::truncated: in.refuse("is truncated (" + std::to_string(in.size()) + " bytes)");
    case bundle_problem::wrong_version:
      in.refuse("was written in bundle format version " + std::to_string(bundle_version_of(head)) +
                "; this unicache reads version " + std::to_string(kBundleFormatVersion));
  }
  const std::uint64_t end = in.size() - kBundleTrailerBytes;
  const std::optional<bundle_trailer> trailer = read_bundle_trailer(in.read_or_refuse(end, kBundleTrailerBytes));
  if (!trailer || trailer->record_bytes > end - kBundleHeaderBytes) {
    in.refuse("is truncated (it does not end with its trailer)");
  }
  if (trailer->record_bytes != end - kBundleHeaderBytes) in.refuse("is damaged (its trailer does not match its size)");
  std::uint64_t records = 0;
  for (std::uint64_t at = kBundleHeaderBytes; at < end; ++records) {
    std::string problem;
    const std::optional<record_header> h = in.header_at(at, end, problem);
    if (!h) in.refuse("is damaged (record " + std::to_string(records + 1) + "'s " + problem + ")");
    at += h->record_bytes();
  }
  if (records != trailer->records) {
    in.refuse("is damaged (it holds " + std::to_string(records) + " records; its trailer says " +
              std::to_string(trailer->records) + ")");
  }
  return records;
}

std::string size_problem_text(entry_size_problem problem, const store_config& c, const parsed_entry& e) {
  const std::string binary = std::to_string(e.binary.size());
  switch (problem) {
    case entry_size_problem::none: return "";
    case entry_size_problem::binary_too_small:
      return "too small (a binary of " + binary + " bytes; this store keeps at least " +
             std::to_string(c.min_entry_bytes) + ")";
    case entry_size_problem::binary_too_large:
      return "too large (a binary of " + binary + " bytes; this store keeps at most " +
             std::to_string(c.max_entry_bytes) + ")";
    case entry_size_problem::key_too_long: return "too large (a key over 1 MiB)";
    case entry_size_problem::larger_than_shard_share:
      return "too large (an entry of " + std::to_string(e.key.size() + e.binary.size() + kEntryHeaderBytes) +
             " bytes; this store keeps at most a sixteenth of its size in one entry)";
  }
  return "?";
}

// Why the record of header `h` cannot be read whole (its sizes are beyond
// what this store reads), or "".
std::string unreadable_record(const record_header& h, const store_config& c) {
  if (h.description_bytes > kMaxBundleDescriptionBytes) {
    return "device description longer than " + std::to_string(kMaxBundleDescriptionBytes) + " bytes";
  }
  if (h.signature_bytes != 0 && h.signature_bytes != kRecordSignatureBytes) {
    return "signature of an unknown kind (" + std::to_string(h.signature_bytes) + " bytes)";
  }
  const std::uint64_t largest = max_entry_file_bytes(kMaxKeyBytes, c.max_entry_bytes);
  if (h.entry_bytes > largest) {
    return "too large (an entry of " + std::to_string(h.entry_bytes) + " bytes; this store reads at most " +
           std::to_string(largest) + ")";
  }
  return "";
}

// Why the record `bytes` (of header `h`) cannot be imported, or "" with its
// entry parsed into `e`: its description's checksum, its signature (with a
// secret), its entry, and this store's size limits.
std::string record_problem(const record_header& h, byte_span bytes, const entry_signer& signer, const store_config& c,
                           parsed_entry& e) {
  const std::string_view description(reinterpret_cast<const char*>(bytes.data() + kRecordHeaderBytes),
                                     h.description_bytes);
  if (!description_matches(h, description)) return "device description corrupt (checksum mismatch)";
  if (signer.signs() && h.signature_bytes == 0) return "not signed";
  if (signer.signs() && !signer.verify(bytes)) {
    return "signature does not verify (signed with another secret, or altered)";
  }
  e = parse_entry(bytes.subspan(kRecordHeaderBytes + h.description_bytes, h.entry_bytes), &h.device);
  if (e.problem == entry_problem::wrong_device) return "entry of another device than its record says";
  if (!e.ok()) return std::string("entry ") + describe(e.problem);
  return size_problem_text(check_entry_size(c, e.key.size(), e.binary.size()), c, e);
}

}  // namespace

bundle_report kernel_store::import_bundle(const std::string& path, const std::string& secret_file) {
  const std::shared_ptr<const store_state> s = impl_->require_enabled();
  store_directory& d = *s->directory;
  const store_config& c = s->config;
  const entry_signer signer(secret_file.empty() ? std::string() : read_secret_file(secret_file, "the secret file"),
                            kBundleSigningScope);
  if (!d.writable()) throw store_error("the store at " + c.directory + " is not writable; nothing imported");
  const bundle_source in(path);
  bundle_report report;
  report.records = check_whole(in);
  report.bytes = in.size();

  // Checked whole above: a record that is not as it was then means the file
  // changed meanwhile (someone writes it in place).
  auto changed = [&](std::uint64_t n) {
    return store_error("the bundle " + in.shown() + " changed while it was imported (at record " +
                       std::to_string(n) + "); " + std::to_string(report.imported) + " entries imported");
  };
  const std::uint64_t end = in.size() - kBundleTrailerBytes;
  std::uint64_t at = kBundleHeaderBytes;
  for (std::uint64_t n = 1; n <= report.records; ++n) {
    std::string problem;
    const std::optional<record_header> header = in.header_at(at, end, problem);
    if (!header) throw changed(n);
    const record_header& h = *header;
    const std::uint64_t record_at = at;
    at += h.record_bytes();
    auto refuse = [&](const std::string& why) { report.refused.push_back("record " + std::to_string(n) + ": " + why); };
    if (const std::string why = unreadable_record(h, c); !why.empty()) {
      refuse(why);
      continue;
    }
    const std::optional<byte_vector> record = in.read(record_at, static_cast<std::size_t>(h.record_bytes()));
    if (!record) throw changed(n);
    const byte_span bytes(*record);
    const std::string_view description(reinterpret_cast<const char*>(bytes.data() + kRecordHeaderBytes),
                                       h.description_bytes);
    parsed_entry e;
    if (const std::string why = record_problem(h, bytes, signer, c, e); !why.empty()) {
      refuse(why);
      continue;
    }
    const byte_span entry = bytes.subspan(kRecordHeaderBytes + h.description_bytes, h.entry_bytes);
    switch (publish_entry(s->directory, c, h.device, impl_->hasher(e.key), e.key, entry, description)) {
      case publish_result::stored: ++report.imported; break;
      case publish_result::already_present: ++report.already_present; break;
      case publish_result::no_slot:
        refuse("every slot of its key holds something else (see unicache-store verify)");
        break;
      case publish_result::failed:
        if (!d.writable()) {
          throw store_error("the store at " + c.directory + " stopped accepting writes at record " +
                            std::to_string(n) + " of " + in.shown() + ", after " + std::to_string(report.imported) +
                            " entries were imported (see the warning above)");
        }
        refuse("its key's directory cannot be used (not trusted, or something in its way; see unicache-store verify)");
        break;
    }
  }
  return report;
}

}  // namespace unicache
