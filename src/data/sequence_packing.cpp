// TRL's bfd and wrapped packing and its padding-free collation (Note [TRL's packing]).
#include "data/sequence_packing.h"

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>

#include "core/error.h"

namespace headroom {

namespace {

void check_packing(const char* entry, int64_t seq_length, int64_t map_batch_size) {
  if (seq_length < 1)
    throw ValueError(str_cat(entry, ": seq_length ", seq_length, " must be >= 1"));
  if (map_batch_size < 1) {
    throw ValueError(str_cat(entry, ": map_batch_size ", map_batch_size, " must be >= 1"));
  }
}

// bfd of examples [begin, end) appended to `out`.
void pack_bfd_batch(const std::vector<TokenSequence>& examples, size_t begin, size_t end,
                    int64_t seq_length, PackedRows& out) {
  std::vector<size_t> ids;  // the non-empty examples
  for (size_t i = begin; i < end; ++i) {
    if (!examples[i].empty()) ids.push_back(i);
  }
  auto length_of = [&](size_t i) {
    return std::min(static_cast<int64_t>(examples[i].size()), seq_length);
  };
  std::stable_sort(ids.begin(), ids.end(),
                   [&](size_t a, size_t b) { return length_of(a) > length_of(b); });
  // Open rows by free space (> 0), each space's rows in the order they came to have it.
  std::map<int64_t, std::deque<size_t>> by_space;
  for (size_t i : ids) {
    const int64_t length = length_of(i);
    size_t row = 0;
    int64_t space = seq_length;
    auto fit = by_space.lower_bound(length);
    if (fit != by_space.end()) {
      space = fit->first;
      row = fit->second.front();
      fit->second.pop_front();
      if (fit->second.empty()) by_space.erase(fit);
    } else {
      row = out.rows.size();
      out.rows.emplace_back();
      out.seq_lengths.emplace_back();
    }
    TokenSequence& tokens = out.rows[row];
    tokens.insert(tokens.end(), examples[i].begin(), examples[i].begin() + length);
    out.seq_lengths[row].push_back(length);
    if (space - length > 0) by_space[space - length].push_back(row);
  }
}

// bfd_split of examples [begin, end): each cut into pieces of seq_length (the last shorter), in
// order, and the pieces packed by bfd as sequences of their own.
void pack_bfd_split_batch(const std::vector<TokenSequence>& examples, size_t begin, size_t end,
                          int64_t seq_length, PackedRows& out) {
  std::vector<TokenSequence> pieces;
  const auto cut = static_cast<size_t>(seq_length);
  for (size_t i = begin; i < end; ++i) {
    for (size_t at = 0; at < examples[i].size(); at += cut) {
      const size_t stop = std::min(examples[i].size(), at + cut);
      pieces.emplace_back(examples[i].begin() + static_cast<std::ptrdiff_t>(at),
                          examples[i].begin() + static_cast<std::ptrdiff_t>(stop));
    }
  }
  pack_bfd_batch(pieces, 0, pieces.size(), seq_length, out);
}

// wrapped of examples [begin, end) appended to `out`: one sequence a row.
void pack_wrapped_batch(const std::vector<TokenSequence>& examples, size_t begin, size_t end,
                        int64_t seq_length, PackedRows& out) {
  TokenSequence all;
  for (size_t i = begin; i < end; ++i)
    all.insert(all.end(), examples[i].begin(), examples[i].end());
  const auto cut = static_cast<size_t>(seq_length);
  for (size_t at = 0; at < all.size(); at += cut) {
    const size_t stop = std::min(all.size(), at + cut);
    out.rows.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(at),
                          all.begin() + static_cast<std::ptrdiff_t>(stop));
    out.seq_lengths.push_back({static_cast<int64_t>(stop - at)});
  }
}

// `pack_batch` (one of the three above) on each map batch of `examples` in turn.
using PackBatch = void (*)(const std::vector<TokenSequence>&, size_t, size_t, int64_t, PackedRows&);
PackedRows pack_map_batches(const char* entry, const std::vector<TokenSequence>& examples,
                            int64_t seq_length, int64_t map_batch_size, PackBatch pack_batch) {
  check_packing(entry, seq_length, map_batch_size);
  PackedRows out;
  const auto step = static_cast<size_t>(map_batch_size);
  for (size_t begin = 0; begin < examples.size(); begin += step) {
    pack_batch(examples, begin, std::min(examples.size(), begin + step), seq_length, out);
  }
  return out;
}

}  // namespace

PackedRows pack_bfd(const std::vector<TokenSequence>& examples, int64_t seq_length,
                    int64_t map_batch_size) {
  return pack_map_batches("pack_bfd", examples, seq_length, map_batch_size, pack_bfd_batch);
}

PackedRows pack_bfd_split(const std::vector<TokenSequence>& examples, int64_t seq_length,
                          int64_t map_batch_size) {
  return pack_map_batches("pack_bfd_split", examples, seq_length, map_batch_size,
                          pack_bfd_split_batch);
}

PackedRows pack_wrapped(const std::vector<TokenSequence>& examples, int64_t seq_length,
                        int64_t map_batch_size) {
  return pack_map_batches("pack_wrapped", examples, seq_length, map_batch_size, pack_wrapped_batch);
}

std::vector<int64_t> position_ids_of(const std::vector<std::vector<int64_t>>& seq_lengths) {
  std::vector<int64_t> positions;
  for (const std::vector<int64_t>& row : seq_lengths) {
    for (int64_t n : row) {
      for (int64_t p = 0; p < n; ++p) positions.push_back(p);
    }
  }
  return positions;
}

TokenBatch padding_free_batch(const std::vector<TokenSequence>& rows,
                              const std::vector<std::vector<int64_t>>& seq_lengths) {
  if (rows.empty() || rows.size() != seq_lengths.size()) {
    throw ValueError(str_cat("padding_free_batch: ", rows.size(), " rows and ", seq_lengths.size(),
                             " seq_lengths lists; they must match and not be empty"));
  }
  std::vector<LabeledRow> labeled;
  labeled.reserve(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t sum = std::accumulate(seq_lengths[r].begin(), seq_lengths[r].end(), int64_t{0});
    if (sum != static_cast<int64_t>(rows[r].size()) ||
        std::any_of(seq_lengths[r].begin(), seq_lengths[r].end(),
                    [](int64_t n) { return n < 1; })) {
      throw ValueError(str_cat("padding_free_batch: row ", r, " has ", rows[r].size(),
                               " tokens but its seq_lengths (each >= 1) sum to ", sum));
    }
    labeled.push_back({rows[r], rows[r], seq_lengths[r]});  // every token its own label
  }
  return collate_rows(labeled, /*padding_free=*/true);
}

TokenBatch collate_rows(std::span<const LabeledRow> rows, bool padding_free, int64_t pad_id) {
  int64_t longest = 0;
  int64_t total = 0;
  for (const LabeledRow& row : rows) {
    longest = std::max(longest, static_cast<int64_t>(row.input_ids.size()));
    total += static_cast<int64_t>(row.input_ids.size());
  }
  const int64_t b = padding_free ? 1 : static_cast<int64_t>(rows.size());
  const int64_t t = padding_free ? total : longest;
  std::vector<int64_t> ids(static_cast<size_t>(b * t), pad_id);
  std::vector<int64_t> targets(ids.size(), -100);
  std::vector<int32_t> cu{0};
  int64_t count = 0;
  int64_t at = 0;  // where the next row starts in ids
  for (size_t i = 0; i < rows.size(); ++i) {
    const LabeledRow& row = rows[i];
    if (!padding_free) at = static_cast<int64_t>(i) * t;
    std::copy(row.input_ids.begin(), row.input_ids.end(), ids.begin() + at);
    int64_t start = 0;
    for (const int64_t length : row.seq_lengths) {
      for (int64_t p = start; p + 1 < start + length; ++p) {
        const int64_t label = row.labels[static_cast<size_t>(p + 1)];
        targets[static_cast<size_t>(at + p)] = label;
        count += label != -100;
      }
      start += length;
      cu.push_back(static_cast<int32_t>(at + start));
    }
    at += static_cast<int64_t>(row.input_ids.size());
  }
  TokenBatch batch;
  batch.input_ids = Tensor::from_ints(ids, Shape{b, t});
  batch.targets = Tensor::from_ints(targets, Shape{b, t});
  batch.target_count = count;
  if (padding_free) batch.cu_seqlens = std::move(cu);
  return batch;
}

}  // namespace headroom
