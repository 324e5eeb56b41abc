// TRL's packing of tokenized examples into rows (pack_dataset's "bfd", "bfd_split" and "wrapped"
// strategies)
// and its padding-free collation of packed rows into one batch row whose sequences never see one
// another (DataCollatorForLanguageModeling with padding_free).
//
// Note [TRL's packing]
// pack_dataset runs in datasets' map(batched=True), so each batch of `map_batch_size` examples
// (datasets' default 1000) is packed on its own, and the rows of batch k precede those of k + 1.
// - bfd (trl/data_utils.py _pack_bfd): drop empty examples, truncate each to seq_length (the
//   overflow is lost), sort by length descending (a stable sort: equal lengths keep their order),
//   then put each into the open row with the smallest free space that holds it, the oldest such
//   row first (a FIFO per free space), or else a new row. Rows keep their order of opening and
//   their sequences the order they went in; seq_lengths lists each row's sequence lengths.
// - bfd_split (_pack_bfd with on_seq_length_overflow="split"): as bfd, but each example is first
//   cut into pieces of seq_length (the last shorter), which are packed as sequences of their own,
//   so no token is lost.
// - wrapped (_pack_wrapped): the batch's tokens concatenated and cut every seq_length tokens; the
//   last row may be shorter. Rows carry no seq_lengths: the collator treats each as one sequence.
// The collator then concatenates a batch's rows into one row, position_ids restarting at 0 at
// each sequence (from seq_lengths), and labels -100 where position_ids == 0, so that after the
// model's shift no sequence's last token is scored against the next one's first.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "data/data_loader.h"

namespace headroom {

using TokenSequence = std::vector<int64_t>;

// Packed rows of tokens and, per row, the lengths of the sequences in it (they sum to the row's
// length).
struct PackedRows {
  std::vector<TokenSequence> rows;
  std::vector<std::vector<int64_t>> seq_lengths;
};

// TRL's strategies (Note [TRL's packing]). ValueError when seq_length or map_batch_size < 1.
PackedRows pack_bfd(const std::vector<TokenSequence>& examples, int64_t seq_length,
                    int64_t map_batch_size = 1000);
PackedRows pack_bfd_split(const std::vector<TokenSequence>& examples, int64_t seq_length,
                          int64_t map_batch_size = 1000);
PackedRows pack_wrapped(const std::vector<TokenSequence>& examples, int64_t seq_length,
                        int64_t map_batch_size = 1000);

// A row of a batch: its tokens, their labels (-100: not scored; for plain text the tokens
// themselves) and the lengths of the sequences in it (they sum to its length).
struct LabeledRow {
  std::span<const int64_t> input_ids;
  std::span<const int64_t> labels;
  std::span<const int64_t> seq_lengths;
};

// The batch of `rows`: target t is label t + 1 of the same sequence, -100 at each sequence's
// last token, so that no sequence is scored against the next one's first (TRL's labels -100
// where position_ids restart, then the model's shift); target_count those that are not -100.
// padding_free: one [1, total] row with the sequences' starts in cu_seqlens; else [B, longest],
// each shorter row followed by pad_id (its targets -100). The caller checks the lengths.
TokenBatch collate_rows(std::span<const LabeledRow> rows, bool padding_free, int64_t pad_id = 0);

// position_ids of rows with these sequence lengths, concatenated: 0 .. n - 1 for each length n.
std::vector<int64_t> position_ids_of(const std::vector<std::vector<int64_t>>& seq_lengths);

// The padding-free batch of packed rows (TRL's collator, Note [TRL's packing]): input_ids
// [1, total] of the rows concatenated; targets the next token, -100 at each sequence's last token
// (the next one's label is -100 where position_ids == 0) and at the row's end; target_count
// those that are not -100; cu_seqlens the sequences' starts. ValueError when the rows are empty,
// or when a row's seq_lengths do not sum to its length.
TokenBatch padding_free_batch(const std::vector<TokenSequence>& rows,
                              const std::vector<std::vector<int64_t>>& seq_lengths);

}  // namespace headroom
