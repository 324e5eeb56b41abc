// Tokenizer throughput: encode and decode of Debian's fortunes (about 2.5 MB, one document per
// fortune) with a model directory's tokenizer, side by side with HF tokenizers' Rust encoder
// (bench/tokenizer_bench_peer.py, when `python3` imports `tokenizers`) on the same documents;
// both sides print a digest of all ids, so the run also checks that the ids agree.
//
// From the repository root: build/bench/tokenizer_bench [--model DIR] [--corpus DIR] [--repeat N]
// [--no-peer]; the model defaults to the GPT-2 BPE fixture.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_support.h"
#include "core/json_file.h"
#include "io/tokenizer.h"

namespace {

namespace fs = std::filesystem;

// The fortunes, in file order: each file's text split at its "\n%\n" separators.
std::vector<std::string> read_documents(const fs::path& corpus) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(corpus)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && ext != ".dat" && ext != ".u8") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> documents;
  for (const fs::path& file : files) {
    const std::string text = headroom::read_text_file(file.string());
    for (size_t pos = 0; pos < text.size();) {
      size_t end = text.find("\n%\n", pos);
      if (end == std::string::npos) end = text.size();
      documents.push_back(text.substr(pos, end - pos));
      pos = end + 3;
    }
  }
  return documents;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "tests/fixtures/tokenizer/gpt2_bpe";
  std::string corpus = "/usr/share/games/fortunes";
  int64_t repeat = 3;
  bool no_peer = false;
  headroom::bench::parse_command_line(
      "tokenizer_bench", "[--model DIR] [--corpus DIR] [--repeat N] [--no-peer]", argc, argv,
      {{"--no-peer", &no_peer}}, {{"--model", &model}, {"--corpus", &corpus}},
      {{"--repeat", &repeat}});

  const std::vector<std::string> documents = read_documents(corpus);
  size_t bytes = 0;
  for (const std::string& d : documents) bytes += d.size();
  const auto tokenizer = headroom::load_tokenizer(model);
  std::printf("tokenizer %s (%s) on %zu documents, %.2f MB, one thread\n",
              tokenizer->kind().c_str(), model.c_str(), documents.size(), bytes / 1e6);

  // The first pass fills the BPE cache; the best of the later ones is the steady state.
  std::vector<std::vector<int32_t>> ids(documents.size());
  double cold = 0, warm = 1e30;
  for (int64_t pass = 0; pass <= repeat; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < documents.size(); ++i) ids[i] = tokenizer->encode(documents[i]);
    const double s = seconds_since(start);
    if (pass == 0) {
      cold = s;
    } else {
      warm = std::min(warm, s);
    }
  }
  size_t tokens = 0;
  uint64_t digest = 0xcbf29ce484222325ull;  // FNV-1a over the ids, as the peer computes it
  for (const auto& doc : ids) {
    tokens += doc.size();
    for (const int32_t id : doc) digest = (digest ^ static_cast<uint32_t>(id)) * 0x100000001b3ull;
  }
  const auto start = std::chrono::steady_clock::now();
  size_t decoded = 0;
  for (const auto& doc : ids) decoded += tokenizer->decode(doc).size();
  const double decode_s = seconds_since(start);

  std::printf("%-22s %12s %12s\n", "", "MB/s", "Mtokens/s");
  std::printf("%-22s %12.2f %12.2f\n", "encode (first pass)", bytes / cold / 1e6,
              tokens / cold / 1e6);
  std::printf("%-22s %12.2f %12.2f\n", "encode (cache warm)", bytes / warm / 1e6,
              tokens / warm / 1e6);
  std::printf("%-22s %12.2f %12.2f\n", "decode", decoded / decode_s / 1e6, tokens / decode_s / 1e6);
  std::printf("tokens %zu, id digest %016llx\n", tokens, static_cast<unsigned long long>(digest));

  const fs::path script = fs::path(HEADROOM_SOURCE_DIR) / "bench" / "tokenizer_bench_peer.py";
  if (no_peer || tokenizer->kind() != "gpt2_bpe" || !fs::exists(script) ||
      !fs::exists(fs::path(model) / "tokenizer.json")) {
    std::printf("peer: skipped\n");
    return 0;
  }
  int status = 0;
  const auto results = headroom::bench::run_peer_command(
      "python3 " + script.string() + " --model " + model + " --corpus " + corpus, status);
  if (status != 0 || results.empty()) {
    std::printf("peer: did not run (exit status %d)\n", status);
    return 0;
  }
  const auto& peer = results.front();
  const double peer_s = std::stod(peer.at("seconds"));
  std::printf("%-22s %12.2f %12.2f\n", "HF tokenizers encode", bytes / peer_s / 1e6,
              std::stod(peer.at("tokens")) / peer_s / 1e6);
  const bool same = std::stoull(peer.at("digest"), nullptr, 16) == digest;
  std::printf("ids %s HF tokenizers' (tokens %s, digest %s)\n", same ? "equal" : "DIFFER from",
              peer.at("tokens").c_str(), peer.at("digest").c_str());
  return same ? 0 : 1;
}
