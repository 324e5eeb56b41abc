// data/sequence_packing.h against TRL itself: pack_dataset's bfd and wrapped rows and seq_lengths,
// and the padding-free collator's input_ids, labels, position_ids and cu_seq_lens
// (tests/fixtures/data/trl_packing.json, made by tools/gen_trl_packing_golden.py).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/sequence_packing.h"

namespace headroom {
namespace {

nlohmann::json trl_cases() {
  std::ifstream file(std::string(HEADROOM_FIXTURES_DIR) + "/data/trl_packing.json");
  EXPECT_TRUE(file) << "missing tests/fixtures/data/trl_packing.json";
  return nlohmann::json::parse(file)["cases"];
}

std::vector<int64_t> values_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return {c.data<int64_t>(), c.data<int64_t>() + c.numel()};
}

TEST(SequencePacking, RowsEqualTrlPackDataset) {
  const nlohmann::json cases = trl_cases();
  ASSERT_FALSE(cases.empty());
  for (const nlohmann::json& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto examples = c["examples"].get<std::vector<TokenSequence>>();
    const auto seq_length = c["seq_length"].get<int64_t>();
    const auto map_batch_size = c["map_batch_size"].get<int64_t>();
    const bool bfd = c["strategy"] == "bfd";
    const PackedRows packed = bfd ? pack_bfd(examples, seq_length, map_batch_size)
                                  : pack_wrapped(examples, seq_length, map_batch_size);
    EXPECT_EQ(packed.rows, c["rows"].get<std::vector<TokenSequence>>());
    if (bfd) {
      EXPECT_EQ(packed.seq_lengths, c["seq_lengths"].get<std::vector<std::vector<int64_t>>>());
    }
    ASSERT_EQ(packed.rows.size(), packed.seq_lengths.size());
  }
}

// The collator's batch of the first rows: one row, positions restarting at 0 per sequence, and
// the labels -100 where position_ids == 0, which shifted by one are the targets.
TEST(SequencePacking, PaddingFreeBatchEqualsTrlCollator) {
  for (const nlohmann::json& c : trl_cases()) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto examples = c["examples"].get<std::vector<TokenSequence>>();
    const bool bfd = c["strategy"] == "bfd";
    const PackedRows packed = bfd ? pack_bfd(examples, c["seq_length"], c["map_batch_size"])
                                  : pack_wrapped(examples, c["seq_length"], c["map_batch_size"]);
    const nlohmann::json& want = c["collated"];
    const auto rows = want["rows"].get<size_t>();
    const std::vector<TokenSequence> first(packed.rows.begin(), packed.rows.begin() + rows);
    const std::vector<std::vector<int64_t>> lengths(packed.seq_lengths.begin(),
                                                    packed.seq_lengths.begin() + rows);
    const TokenBatch batch = padding_free_batch(first, lengths);
    const auto ids = want["input_ids"].get<std::vector<int64_t>>();
    EXPECT_EQ(batch.input_ids.shape(), (Shape{1, static_cast<int64_t>(ids.size())}));
    EXPECT_EQ(values_of(batch.input_ids), ids);
    EXPECT_EQ(position_ids_of(lengths), want["position_ids"].get<std::vector<int64_t>>());
    EXPECT_EQ(batch.cu_seqlens, want["cu_seq_lens"].get<std::vector<int32_t>>());
    // transformers' shift: target t is label t + 1; the last token has none.
    const auto labels = want["labels"].get<std::vector<int64_t>>();
    std::vector<int64_t> shifted(labels.begin() + 1, labels.end());
    shifted.push_back(-100);
    EXPECT_EQ(values_of(batch.targets), shifted);
    int64_t scored = 0;
    for (int64_t t : shifted) scored += t != -100;
    EXPECT_EQ(batch.target_count, scored);
  }
}

TEST(SequencePacking, BadArgumentsNameTheField) {
  EXPECT_THROW((void)pack_bfd({{1, 2}}, 0), ValueError);
  EXPECT_THROW((void)pack_wrapped({{1, 2}}, 4, 0), ValueError);
  try {
    (void)padding_free_batch({{1, 2, 3}}, {{2}});
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("row 0 has 3 tokens"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace headroom
