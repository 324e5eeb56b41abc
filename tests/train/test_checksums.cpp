// CRC-32C against the published check values (the CRC catalogue's "123456789" and RFC 3720
// B.4's iSCSI vectors), continued across calls, and checksums.json written and verified.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "train/checksums.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

TEST(Crc32c, PublishedCheckValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::vector<unsigned char> bytes(32, 0x00);
  EXPECT_EQ(crc32c(bytes.data(), bytes.size()), 0x8A9136AAu);
  std::fill(bytes.begin(), bytes.end(), 0xFF);
  EXPECT_EQ(crc32c(bytes.data(), bytes.size()), 0x62A8AB43u);
  std::iota(bytes.begin(), bytes.end(), 0);
  EXPECT_EQ(crc32c(bytes.data(), bytes.size()), 0x46DD794Eu);
  std::iota(bytes.rbegin(), bytes.rend(), 0);
  EXPECT_EQ(crc32c(bytes.data(), bytes.size()), 0x113FDB5Cu);
}

TEST(Crc32c, ContinuesAcrossCallsAtAnySplit) {
  std::vector<unsigned char> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 11);
  const uint32_t whole = crc32c(bytes.data(), bytes.size());
  for (size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{13}, size_t{999}}) {
    const uint32_t first = crc32c(bytes.data(), split);
    EXPECT_EQ(crc32c(bytes.data() + split, bytes.size() - split, first), whole) << split;
  }
}

TEST(CheckpointChecksums, WrittenThenVerifiedAndAChangeIsNamed) {
  test_data::TempDir tmp("checksums");
  const fs::path dir = tmp.path();
  std::ofstream(dir / "a.json") << "{\"x\": 1}";
  std::ofstream(dir / "b.bin") << std::string(3000, 'b');
  EXPECT_FALSE(verify_checkpoint_checksums(dir.string()));  // none written yet
  write_checkpoint_checksums(dir.string());
  EXPECT_TRUE(verify_checkpoint_checksums(dir.string()));
  {
    std::fstream file(dir / "b.bin", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(1500);
    file.put('c');
  }
  try {
    verify_checkpoint_checksums(dir.string());
    ADD_FAILURE() << "a changed byte was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "b.bin").string()), std::string::npos) << e.what();
  }
  write_checkpoint_checksums(dir.string());
  fs::remove(dir / "a.json");
  EXPECT_THROW(verify_checkpoint_checksums(dir.string()), ValueError);
}

}  // namespace
}  // namespace headroom
