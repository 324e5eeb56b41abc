// Tokenising a corpus (documents in batches, several threads per batch) and the token cache file
// (see Note [Token cache file]).
#include "data/token_corpus.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/text_source.h"

namespace headroom {

static_assert(std::endian::native == std::endian::little,
              "the token cache stores tokens in the host's order, which must be little-endian");

namespace {

constexpr char kMagic[8] = {'H', 'R', 'T', 'O', 'K', 'E', 'N', '\0'};
constexpr uint32_t kVersion = 2;  // 2: documents with their special tokens (Llama 3's BOS)
constexpr size_t kHeaderBytes = 48;
// Documents are read and encoded this many bytes of text at a time, so the text of a large corpus
// is never all in memory at once.
constexpr size_t kBatchTextBytes = size_t{32} << 20;
// Below this much text a batch is encoded in the calling thread: threads would cost more.
constexpr size_t kParallelMinBytes = size_t{1} << 20;

uint64_t fnv1a(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// A fixed 64-bit hash of the token bytes, a word at a time (a few GB/s, so checking a cache file
// costs far less than tokenising it again).
uint64_t checksum(const unsigned char* data, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, data + i, 8);
    h = std::rotl(h ^ (w * 0xbf58476d1ce4e5b9ull), 29) * 0x94d049bb133111ebull;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, data + i, n - i);
  h = std::rotl(h ^ (tail * 0xbf58476d1ce4e5b9ull), 29) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

uint64_t cache_key(const std::vector<TextSourceFile>& files, const Tokenizer& tokenizer) {
  const std::optional<int32_t> eos = tokenizer.eos_token_id();
  std::string text = str_cat("headroom tokens v", kVersion, "\n", tokenizer.kind(), "\n",
                             tokenizer.fingerprint(), "\nvocab ", tokenizer.vocab_size(), "\neos ",
                             eos ? std::to_string(*eos) : "none", "\n");
  for (const TextSourceFile& f : files) {
    text += str_cat(f.path, '\0', f.format == TextFormat::jsonl ? "jsonl" : "plain", " ", f.size,
                    " ", f.mtime_ns, "\n");
  }
  return fnv1a(text);
}

void put_u32(unsigned char* at, uint32_t v) { std::memcpy(at, &v, 4); }
void put_u64(unsigned char* at, uint64_t v) { std::memcpy(at, &v, 8); }
uint32_t get_u32(const unsigned char* at) {
  uint32_t v;
  std::memcpy(&v, at, 4);
  return v;
}
uint64_t get_u64(const unsigned char* at) {
  uint64_t v;
  std::memcpy(&v, at, 8);
  return v;
}

struct Expected {
  uint64_t key;
  uint64_t vocab_size;
  uint32_t token_bytes;
};

// Why the image (header + tokens) is not a cache file for `expected`, or empty when it is.
std::string check_image(const unsigned char* image, size_t size, const Expected& expected) {
  if (size < kHeaderBytes) return str_cat("the file is ", size, " bytes, shorter than its header");
  if (std::memcmp(image, kMagic, sizeof(kMagic)) != 0) return "not a headroom token file";
  if (get_u32(image + 8) != kVersion) {
    return str_cat("format version ", get_u32(image + 8), ", not ", kVersion);
  }
  if (get_u32(image + 12) != expected.token_bytes) {
    return str_cat(get_u32(image + 12), " bytes per token, not ", expected.token_bytes);
  }
  if (get_u64(image + 24) != expected.key) return "its key is not this corpus and tokenizer's";
  if (get_u64(image + 32) != expected.vocab_size) {
    return str_cat("vocab_size ", get_u64(image + 32), ", not ", expected.vocab_size);
  }
  const uint64_t count = get_u64(image + 16);
  if (count > (size - kHeaderBytes) / expected.token_bytes ||
      kHeaderBytes + count * expected.token_bytes != size) {
    return str_cat("the header says ", count, " tokens of ", expected.token_bytes,
                   " bytes but the file is ", size, " bytes (truncated or extended)");
  }
  if (checksum(image + kHeaderBytes, size - kHeaderBytes) != get_u64(image + 40)) {
    return "the token checksum does not match (the file was changed)";
  }
  return "";
}

// Encodes every document of a batch, on several threads when it is large; result i belongs to
// document i whatever the thread count.
// A document's ids as HF's tokenizer(text) gives them: with the special tokens its
// post-processor adds (Llama 3's and Llama 2's BOS first); an empty document has none.
std::vector<int32_t> encode_document(const Tokenizer& tokenizer, const std::string& text) {
  return text.empty() ? std::vector<int32_t>{} : tokenizer.encode_with_special_tokens(text);
}

std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string>& documents,
                                               size_t text_bytes, const Tokenizer& tokenizer,
                                               int64_t num_threads) {
  std::vector<std::vector<int32_t>> encoded(documents.size());
  size_t threads = num_threads > 0 ? static_cast<size_t>(num_threads)
                                   : std::max(1u, std::thread::hardware_concurrency());
  threads = std::min(threads, documents.size());
  if (threads <= 1 || text_bytes < kParallelMinBytes) {
    for (size_t i = 0; i < documents.size(); ++i)
      encoded[i] = encode_document(tokenizer, documents[i]);
    return encoded;
  }
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(documents.size());
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < documents.size(); i = next++) {
        try {
          encoded[i] = encode_document(tokenizer, documents[i]);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      }
    });
  }
  for (std::thread& thread : pool) thread.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);  // the first failing document, as serially
  }
  return encoded;
}

// Tokenises the corpus into a complete file image (header + tokens).
std::string build_image(const std::string& data_path, const std::vector<TextSourceFile>& files,
                        const Tokenizer& tokenizer, const Expected& expected, int64_t num_threads) {
  const std::optional<int32_t> eos = tokenizer.eos_token_id();
  const int64_t vocab = tokenizer.vocab_size();
  std::string image(kHeaderBytes, '\0');
  uint64_t count = 0;

  std::vector<std::string> batch;
  std::vector<const std::string*> batch_files;
  size_t batch_bytes = 0;
  auto append = [&](int32_t id, const std::string& file) {
    if (id < 0 || id >= vocab) {
      throw ValueError(str_cat(file, ": the ", tokenizer.kind(), " tokenizer gave token id ", id,
                               ", outside its vocab_size ", vocab));
    }
    if (expected.token_bytes == 2) {
      const uint16_t v = static_cast<uint16_t>(id);
      image.append(reinterpret_cast<const char*>(&v), 2);
    } else {
      const uint32_t v = static_cast<uint32_t>(id);
      image.append(reinterpret_cast<const char*>(&v), 4);
    }
    ++count;
  };
  auto flush = [&] {
    const std::vector<std::vector<int32_t>> encoded =
        encode_batch(batch, batch_bytes, tokenizer, num_threads);
    size_t tokens = 0;
    for (const auto& ids : encoded) tokens += ids.size() + 1;
    image.reserve(image.size() + tokens * expected.token_bytes);
    for (size_t i = 0; i < encoded.size(); ++i) {
      if (encoded[i].empty()) continue;
      if (count > 0 && eos) append(*eos, *batch_files[i]);
      for (int32_t id : encoded[i]) append(id, *batch_files[i]);
    }
    batch.clear();
    batch_files.clear();
    batch_bytes = 0;
  };
  for (const TextSourceFile& file : files) {
    read_documents(file, [&](std::string&& text) {
      batch_bytes += text.size();
      batch.push_back(std::move(text));
      batch_files.push_back(&file.path);
      if (batch_bytes >= kBatchTextBytes) flush();
    });
  }
  flush();
  if (count == 0) throw ValueError(str_cat("data '", data_path, "': the corpus has no tokens"));

  auto* header = reinterpret_cast<unsigned char*>(image.data());
  std::memcpy(header, kMagic, sizeof(kMagic));
  put_u32(header + 8, kVersion);
  put_u32(header + 12, expected.token_bytes);
  put_u64(header + 16, count);
  put_u64(header + 24, expected.key);
  put_u64(header + 32, expected.vocab_size);
  put_u64(header + 40, checksum(header + kHeaderBytes, image.size() - kHeaderBytes));
  return image;
}

// Maps `path` read-only; nullptr (and a reason) when it cannot be opened or is not a file.
void* map_file(const std::string& path, size_t* size, std::string* reason) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    *reason = err == ENOENT ? "" : std::generic_category().message(err);
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    *reason = "not a regular file";
    return nullptr;
  }
  *size = static_cast<size_t>(st.st_size);
  if (*size == 0) {
    ::close(fd);
    *reason = "the file is empty";
    return nullptr;
  }
  void* addr = ::mmap(nullptr, *size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file open
  if (addr == MAP_FAILED) {
    *reason = std::generic_category().message(err);
    return nullptr;
  }
  return addr;
}

std::string hex16(uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<size_t>(i)] = kDigits[v & 15];
  return out;
}

}  // namespace

TokenCorpus::~TokenCorpus() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

int64_t TokenCorpus::at(int64_t index) const {
  if (index < 0 || index >= count_) {
    throw IndexError(str_cat(source_, ": token index ", index, " is outside 0..", count_ - 1));
  }
  int64_t out;
  copy_to(index, 1, &out);
  return out;
}

void TokenCorpus::copy_to(int64_t start, int64_t count, int64_t* out) const {
  if (start < 0 || count < 0 || start > count_ - count) {
    throw IndexError(str_cat(source_, ": tokens [", start, ", ", start + count,
                             ") are outside the stream of ", count_));
  }
  if (token_bytes_ == 2) {
    const unsigned char* p = tokens_ + static_cast<size_t>(start) * 2;
    for (int64_t i = 0; i < count; ++i, p += 2) {
      uint16_t v;
      std::memcpy(&v, p, 2);
      out[i] = v;
    }
  } else {
    const unsigned char* p = tokens_ + static_cast<size_t>(start) * 4;
    for (int64_t i = 0; i < count; ++i, p += 4) {
      uint32_t v;
      std::memcpy(&v, p, 4);
      out[i] = v;
    }
  }
}

std::shared_ptr<const TokenCorpus> load_token_corpus(const std::string& data_path,
                                                     const Tokenizer& tokenizer,
                                                     const TokenizeOptions& options) {
  std::vector<SkippedPath> skipped;
  const std::vector<TextSourceFile> files =
      list_text_files(data_path, options.output_dir, &skipped);
  const int64_t vocab = tokenizer.vocab_size();
  if (vocab <= 0 || vocab > (int64_t{1} << 32)) {
    throw ValueError(str_cat("the ", tokenizer.kind(), " tokenizer's vocab_size ", vocab,
                             " is outside 1..2^32"));
  }
  const Expected expected{cache_key(files, tokenizer), static_cast<uint64_t>(vocab),
                          vocab <= 65536 ? 2u : 4u};
  std::shared_ptr<TokenCorpus> corpus(new TokenCorpus());
  corpus->source_ = data_path;
  corpus->skipped_ = std::move(skipped);
  corpus->token_bytes_ = static_cast<int>(expected.token_bytes);

  auto adopt_mapping = [&](void* addr, size_t size) {
    corpus->mapping_ = addr;
    corpus->mapping_size_ = size;
    corpus->tokens_ = static_cast<const unsigned char*>(addr) + kHeaderBytes;
    corpus->count_ = static_cast<int64_t>(get_u64(static_cast<const unsigned char*>(addr) + 16));
  };

  if (!options.cache_dir.empty()) {
    corpus->cache_path_ =
        (std::filesystem::path(options.cache_dir) / ("tokens-" + hex16(expected.key) + ".bin"))
            .string();
    size_t size = 0;
    std::string reason;
    if (void* addr = map_file(corpus->cache_path_, &size, &reason)) {
      reason = check_image(static_cast<const unsigned char*>(addr), size, expected);
      if (reason.empty()) {
        adopt_mapping(addr, size);
        corpus->loaded_from_cache_ = true;
        return corpus;
      }
      ::munmap(addr, size);
    }
    corpus->cache_rejected_reason_ = reason;
  }

  std::string image = build_image(data_path, files, tokenizer, expected, options.num_threads);
  if (!corpus->cache_path_.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.cache_dir, ec);
    if (ec) {
      throw ValueError(str_cat("cannot create the token cache directory '", options.cache_dir,
                               "': ", ec.message()));
    }
    write_file_atomically(corpus->cache_path_, image);
    // Map what was written, so the tokens live in the page cache rather than in this process.
    size_t size = 0;
    std::string reason;
    void* addr = map_file(corpus->cache_path_, &size, &reason);
    if (addr != nullptr &&
        check_image(static_cast<const unsigned char*>(addr), size, expected).empty()) {
      adopt_mapping(addr, size);
      return corpus;
    }
    if (addr != nullptr) ::munmap(addr, size);
  }
  corpus->owned_ = std::move(image);
  corpus->tokens_ = reinterpret_cast<const unsigned char*>(corpus->owned_.data()) + kHeaderBytes;
  corpus->count_ = static_cast<int64_t>(get_u64(corpus->tokens_ - kHeaderBytes + 16));
  return corpus;
}

}  // namespace headroom
