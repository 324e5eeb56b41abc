// Rank 0's options sent to every rank and compared there (Note [Every rank runs rank 0's
// options]).
#include "dist/rank_options.h"

#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace headroom {
namespace {

// `text` from rank `root` to every rank: its length, then its bytes, as i64 tensors (exact in
// both backends).
std::string broadcast_text(Communicator& world, const std::string& text, int root) {
  const Device device = world.device();
  const Tensor length =
      Tensor::from_ints({static_cast<int64_t>(text.size())}, {1}, DType::i64).to(device);
  world.broadcast(length, root);
  const int64_t n = length.to(kCPU).to_int64_vector().at(0);
  std::vector<int64_t> bytes(static_cast<size_t>(n), 0);
  if (world.rank() == root) {
    for (size_t i = 0; i < text.size(); ++i) bytes[i] = static_cast<unsigned char>(text[i]);
  }
  const Tensor data = Tensor::from_ints(bytes, {n}, DType::i64).to(device);
  if (n > 0) world.broadcast(data, root);
  std::string out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t b : data.to(kCPU).to_int64_vector()) out.push_back(static_cast<char>(b));
  return out;
}

}  // namespace

std::string rank_options_difference(Communicator& world, const nlohmann::ordered_json& options) {
  const int rank = world.rank(), ranks = world.world_size();
  const nlohmann::ordered_json first =
      nlohmann::ordered_json::parse(broadcast_text(world, options.dump(), 0));
  // This rank's first option (in its own order) whose value is not rank 0's; 0: none.
  int64_t differing = 0;
  std::string mine;
  int64_t index = 0;
  for (const auto& [key, value] : options.items()) {
    ++index;
    const bool same = first.contains(key) && first.at(key) == value;
    if (same) continue;
    differing = index;
    mine =
        str_cat(key, " is ", value.dump(), " on rank ", rank, " and ",
                first.contains(key) ? first.at(key).dump() : std::string("absent"), " on rank 0");
    break;
  }
  if (!differing && first.size() != options.size()) {
    differing = index + 1;
    mine = str_cat("rank ", rank, " has ", options.size(), " options and rank 0 ", first.size());
  }
  std::vector<int64_t> slots(static_cast<size_t>(ranks), 0);
  slots[static_cast<size_t>(rank)] = differing;
  const Tensor all = Tensor::from_ints(slots, {ranks}, DType::i64).to(world.device());
  world.all_reduce(all, ReduceOp::sum);
  const std::vector<int64_t> per_rank = all.to(kCPU).to_int64_vector();
  int reporter = -1;
  std::string others;
  for (int r = 0; r < ranks; ++r) {
    if (per_rank[static_cast<size_t>(r)] == 0) continue;
    if (reporter < 0) reporter = r;
    others += str_cat(others.empty() ? "" : ", ", r);
  }
  if (reporter < 0) return "";
  const std::string line =
      rank == reporter ? str_cat("the ranks were started with different options: ", mine, " (",
                                 others.find(',') == std::string::npos ? "rank " : "ranks ", others,
                                 others.find(',') == std::string::npos ? " differs" : " differ",
                                 " from rank 0); mpirun must give every rank the same options")
                       : std::string();
  return broadcast_text(world, line, reporter);
}

}  // namespace headroom
