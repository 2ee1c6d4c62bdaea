// The one format of a store bundle, written and checked in one place: many
// store entries in one file, so that a warm store travels to another machine
// (kernel_store::export_bundle, import_bundle). Integers are little-endian.
//
//   header (kBundleHeaderBytes)
//        0    8  magic "UCBUNDLE"
//        8    4  format version
//       12    4  header size (32)
//       16    8  creation time (Unix seconds)
//       24    8  checksum: XXH3-64 of bytes 0..23
//   records, one after another, numbered from 1; each:
//        0    8  magic "UCRECORD"
//        8   16  device identity hash (as in its entry's header)
//       24    8  entry size e
//       32    4  device description size d (at most kMaxBundleDescriptionBytes)
//       36    4  signature size s: 0 (unsigned) or 32
//       40    8  XXH3-64 of the description
//       48    8  checksum: XXH3-64 of bytes 0..47
//       56    d  the device's description (its device.txt, without the newline)
//     56+d    e  the entry, in the store's entry format (entry_format.hpp),
//                checked by its own checksum
//   56+d+e    s  with a secret: HMAC-SHA256 of bytes 0..56+d+e-1 (entry_signer,
//                scope kBundleSigningScope)
//   trailer (kBundleTrailerBytes), the file's last bytes
//        0    8  magic "UCBTRAIL"
//        8    8  record count
//       16    8  bytes of the records (between the header and the trailer)
//       24    8  checksum: XXH3-64 of bytes 0..23
//
// A file is a bundle when its header is intact. It is whole when its last
// bytes are an intact trailer whose sizes match the file and whose records'
// headers, each intact, lead from the header to the trailer: a bundle cut
// anywhere, in the trailer too, is not whole, and nothing in it is used. In a
// whole bundle a record whose description or entry is damaged is that
// record's problem alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "store/store_layout.hpp"
#include "unicache/bytes.hpp"
#include "util/stable_hash.hpp"

namespace unicache::detail {

inline constexpr std::uint32_t kBundleFormatVersion = 1;
inline constexpr std::size_t kBundleHeaderBytes = 32;
inline constexpr std::size_t kRecordHeaderBytes = 56;
inline constexpr std::size_t kBundleTrailerBytes = 32;
inline constexpr std::size_t kRecordSignatureBytes = 32;  // entry_signer::kMacBytes
// A description and its newline fit the device.txt a reader reads.
inline constexpr std::size_t kMaxBundleDescriptionBytes = kMaxDeviceDescriptionBytes - 1;
// What a bundle's signatures are bound to: a value the remote tier signed
// is no bundle record, and the reverse.
inline constexpr char kBundleSigningScope[] = "unicache-bundle/1";

byte_vector encode_bundle_header(std::int64_t created_unix);

enum class bundle_problem { none, not_a_bundle, wrong_version, truncated };
// Checks the first bytes of a file of `file_bytes` (`head`: its first
// kBundleHeaderBytes, or all of it when shorter). A file shorter than a
// header and a trailer that begins as a bundle does is truncated; one that
// does not is not a bundle.
bundle_problem check_bundle_header(byte_span head, std::uint64_t file_bytes);
// The version a header with problem wrong_version says it has.
std::uint32_t bundle_version_of(byte_span head);

struct record_header {
  hash128 device{};
  std::uint64_t entry_bytes = 0;
  std::uint32_t description_bytes = 0;
  std::uint32_t signature_bytes = 0;
  std::uint64_t description_checksum = 0;

  // The record's size: header, description, entry and signature (saturating).
  std::uint64_t record_bytes() const;
};

// A record's header and description, then `entry` (nothing after it: the
// signer appends the signature). `signature_bytes`: 0, or
// kRecordSignatureBytes when it will be signed.
byte_vector encode_record(const hash128& device, std::string_view description, byte_span entry,
                          std::uint32_t signature_bytes);
// The header in the first kRecordHeaderBytes of `bytes`, or nullopt when its
// magic or checksum is wrong (the records after it cannot be found then).
std::optional<record_header> read_record_header(byte_span bytes);
bool description_matches(const record_header& header, std::string_view description);

struct bundle_trailer {
  std::uint64_t records = 0;
  std::uint64_t record_bytes = 0;
};
byte_vector encode_bundle_trailer(const bundle_trailer& trailer);
// The trailer in `bytes` (kBundleTrailerBytes), or nullopt when its magic or
// checksum is wrong.
std::optional<bundle_trailer> read_bundle_trailer(byte_span bytes);

}  // namespace unicache::detail
