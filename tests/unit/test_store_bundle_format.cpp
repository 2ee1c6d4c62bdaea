// The bundle format (store/bundle_format.hpp): what it writes reads back,
// and a damaged header, record header or trailer is told from a good one.
#include <gtest/gtest.h>

#include "store/bundle_format.hpp"
#include "store/entry_format.hpp"

namespace unicache::detail {
namespace {

const hash128 kDevice = stable_hash128("a device");

TEST(BundleFormat, AHeaderIsAcceptedOnlyWhole) {
  const byte_vector header = encode_bundle_header(1700000000);
  ASSERT_EQ(header.size(), kBundleHeaderBytes);
  const std::uint64_t file_bytes = kBundleHeaderBytes + kBundleTrailerBytes;
  EXPECT_EQ(check_bundle_header(header, file_bytes), bundle_problem::none);
  // Shorter than a header and a trailer, beginning as a bundle does: truncated.
  EXPECT_EQ(check_bundle_header(header, file_bytes - 1), bundle_problem::truncated);
  EXPECT_EQ(check_bundle_header(byte_span(header).first(5), 5), bundle_problem::truncated);
  EXPECT_EQ(check_bundle_header({}, 0), bundle_problem::truncated);
  // Any other flipped bit: not a bundle, or another version when the version's.
  for (std::size_t bit = 0; bit < header.size() * 8; ++bit) {
    byte_vector flipped = header;
    flipped[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    const bundle_problem p = check_bundle_header(flipped, file_bytes);
    EXPECT_EQ(p, bit / 8 >= 8 && bit / 8 < 12 ? bundle_problem::wrong_version : bundle_problem::not_a_bundle)
        << "bit " << bit;
  }
}

TEST(BundleFormat, ARecordReadsBackAndAnyFlippedBitOfItsHeaderIsCaught) {
  const byte_vector entry = encode_entry(kDevice, "key", byte_vector{1, 2, 3}, 0);
  const byte_vector record = encode_record(kDevice, "GPU 1 / driver 9", entry, kRecordSignatureBytes);
  ASSERT_EQ(record.size(), kRecordHeaderBytes + 16 + entry.size());
  const std::optional<record_header> h = read_record_header(record);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->device, kDevice);
  EXPECT_EQ(h->entry_bytes, entry.size());
  EXPECT_EQ(h->description_bytes, 16u);
  EXPECT_EQ(h->signature_bytes, kRecordSignatureBytes);
  EXPECT_EQ(h->record_bytes(), record.size() + kRecordSignatureBytes);
  EXPECT_TRUE(description_matches(*h, "GPU 1 / driver 9"));
  EXPECT_FALSE(description_matches(*h, "GPU 1 / driver 8"));
  for (std::size_t bit = 0; bit < kRecordHeaderBytes * 8; ++bit) {
    byte_vector flipped = record;
    flipped[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    EXPECT_FALSE(read_record_header(flipped)) << "bit " << bit;
  }
}

TEST(BundleFormat, ARecordsSizeSaturatesInsteadOfWrapping) {
  record_header h;
  h.entry_bytes = UINT64_MAX - 10;
  h.description_bytes = 100;
  EXPECT_EQ(h.record_bytes(), UINT64_MAX);
}

TEST(BundleFormat, ATrailerReadsBackAndAnyFlippedBitIsCaught) {
  const byte_vector trailer = encode_bundle_trailer({1000, 123456789});
  ASSERT_EQ(trailer.size(), kBundleTrailerBytes);
  const std::optional<bundle_trailer> t = read_bundle_trailer(trailer);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->records, 1000u);
  EXPECT_EQ(t->record_bytes, 123456789u);
  for (std::size_t bit = 0; bit < trailer.size() * 8; ++bit) {
    byte_vector flipped = trailer;
    flipped[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    EXPECT_FALSE(read_bundle_trailer(flipped)) << "bit " << bit;
  }
}

}  // namespace
}  // namespace unicache::detail
