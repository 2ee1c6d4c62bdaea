// Writing and checking the one format of a store bundle.
#include "store/bundle_format.hpp"

#include <algorithm>
#include <cstring>

#include "util/little_endian.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace unicache::detail {
namespace {

constexpr char kBundleMagic[8] = {'U', 'C', 'B', 'U', 'N', 'D', 'L', 'E'};
constexpr char kRecordMagic[8] = {'U', 'C', 'R', 'E', 'C', 'O', 'R', 'D'};
constexpr char kTrailerMagic[8] = {'U', 'C', 'B', 'T', 'R', 'A', 'I', 'L'};
constexpr std::size_t kBundleChecksumOffset = 24;
constexpr std::size_t kRecordChecksumOffset = 48;
constexpr std::size_t kTrailerChecksumOffset = 24;

std::uint64_t checksum_of(const unsigned char* bytes, std::size_t size) { return XXH3_64bits(bytes, size); }

bool intact(const unsigned char* bytes, const char (&magic)[8], std::size_t checksum_offset) {
  return std::memcmp(bytes, magic, sizeof magic) == 0 &&
         get_le64(bytes + checksum_offset) == checksum_of(bytes, checksum_offset);
}

}  // namespace

byte_vector encode_bundle_header(std::int64_t created_unix) {
  byte_vector out(kBundleHeaderBytes);
  unsigned char* h = out.data();
  std::memcpy(h, kBundleMagic, sizeof kBundleMagic);
  put_le32(h + 8, kBundleFormatVersion);
  put_le32(h + 12, kBundleHeaderBytes);
  put_le64(h + 16, static_cast<std::uint64_t>(created_unix));
  put_le64(h + kBundleChecksumOffset, checksum_of(h, kBundleChecksumOffset));
  return out;
}

bundle_problem check_bundle_header(byte_span head, std::uint64_t file_bytes) {
  const std::size_t compared = std::min(head.size(), sizeof kBundleMagic);
  if (compared > 0 && std::memcmp(head.data(), kBundleMagic, compared) != 0) return bundle_problem::not_a_bundle;
  if (head.size() < kBundleHeaderBytes || file_bytes < kBundleHeaderBytes + kBundleTrailerBytes) {
    return bundle_problem::truncated;
  }
  const unsigned char* h = head.data();
  if (get_le32(h + 8) != kBundleFormatVersion) return bundle_problem::wrong_version;
  if (get_le32(h + 12) != kBundleHeaderBytes || !intact(h, kBundleMagic, kBundleChecksumOffset)) {
    return bundle_problem::not_a_bundle;
  }
  return bundle_problem::none;
}

std::uint32_t bundle_version_of(byte_span head) { return head.size() >= 12 ? get_le32(head.data() + 8) : 0; }

std::uint64_t record_header::record_bytes() const {
  const std::uint64_t fixed = kRecordHeaderBytes + std::uint64_t{description_bytes} + signature_bytes;
  return entry_bytes > UINT64_MAX - fixed ? UINT64_MAX : fixed + entry_bytes;
}

byte_vector encode_record(const hash128& device, std::string_view description, byte_span entry,
                          std::uint32_t signature_bytes) {
  byte_vector out;
  out.reserve(kRecordHeaderBytes + description.size() + entry.size() + signature_bytes);
  out.resize(kRecordHeaderBytes);
  unsigned char* h = out.data();
  std::memcpy(h, kRecordMagic, sizeof kRecordMagic);
  std::memcpy(h + 8, device.data(), device.size());
  put_le64(h + 24, entry.size());
  put_le32(h + 32, static_cast<std::uint32_t>(description.size()));
  put_le32(h + 36, signature_bytes);
  put_le64(h + 40, XXH3_64bits(description.data(), description.size()));
  put_le64(h + kRecordChecksumOffset, checksum_of(h, kRecordChecksumOffset));
  out.insert(out.end(), description.begin(), description.end());
  out.insert(out.end(), entry.begin(), entry.end());
  return out;
}

std::optional<record_header> read_record_header(byte_span bytes) {
  if (bytes.size() < kRecordHeaderBytes || !intact(bytes.data(), kRecordMagic, kRecordChecksumOffset)) {
    return std::nullopt;
  }
  const unsigned char* h = bytes.data();
  record_header out;
  std::memcpy(out.device.data(), h + 8, out.device.size());
  out.entry_bytes = get_le64(h + 24);
  out.description_bytes = get_le32(h + 32);
  out.signature_bytes = get_le32(h + 36);
  out.description_checksum = get_le64(h + 40);
  return out;
}

bool description_matches(const record_header& header, std::string_view description) {
  return description.size() == header.description_bytes &&
         XXH3_64bits(description.data(), description.size()) == header.description_checksum;
}

byte_vector encode_bundle_trailer(const bundle_trailer& trailer) {
  byte_vector out(kBundleTrailerBytes);
  unsigned char* t = out.data();
  std::memcpy(t, kTrailerMagic, sizeof kTrailerMagic);
  put_le64(t + 8, trailer.records);
  put_le64(t + 16, trailer.record_bytes);
  put_le64(t + kTrailerChecksumOffset, checksum_of(t, kTrailerChecksumOffset));
  return out;
}

std::optional<bundle_trailer> read_bundle_trailer(byte_span bytes) {
  if (bytes.size() < kBundleTrailerBytes || !intact(bytes.data(), kTrailerMagic, kTrailerChecksumOffset)) {
    return std::nullopt;
  }
  return bundle_trailer{get_le64(bytes.data() + 8), get_le64(bytes.data() + 16)};
}

}  // namespace unicache::detail
