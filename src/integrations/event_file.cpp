// TFRecord framing (tensorflow/core/lib/io/record_writer.cc) around protobuf Events.
#include "integrations/event_file.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "core/error.h"
#include "integrations/tensorboard_event.pb.h"
#include "train/checksums.h"

namespace headroom {

namespace fs = std::filesystem;
namespace pb = headroom::tensorboard;

namespace {

constexpr const char* kFileVersion = "brain.Event:2";

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

void append_u32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
}

void append_u64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
}

uint64_t read_le(const std::string& bytes, size_t at, int width) {
  uint64_t value = 0;
  for (int i = 0; i < width; ++i) {
    value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  }
  return value;
}

}  // namespace

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

EventFileWriter::EventFileWriter(const std::string& log_dir) {
  // SummaryWriter's name: the time, the host, the process and a counter of the process's writers.
  static std::atomic<int> writers{0};
  std::error_code ec;
  fs::create_directories(log_dir, ec);
  if (ec)
    throw Error(str_cat(log_dir, ": cannot create the TensorBoard log directory: ", ec.message()));
  const auto seconds = static_cast<long long>(wall_time_now());
  char name[64];
  std::snprintf(name, sizeof name, "%010lld", seconds);
  path_ = (fs::path(log_dir) / str_cat("events.out.tfevents.", name, ".", host_name(), ".",
                                       static_cast<long long>(::getpid()), ".", writers++))
              .string();
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) {
    throw Error(str_cat(path_, ": cannot create the TensorBoard event file: ",
                        std::generic_category().message(errno)));
  }
  pb::Event event;
  event.set_wall_time(wall_time_now());
  event.set_file_version(kFileVersion);
  write_record(event.SerializeAsString());
  flush();
}

EventFileWriter::~EventFileWriter() {
  if (file_) std::fclose(file_);
}

void EventFileWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  pb::Event event;
  event.set_wall_time(wall_time_now());
  event.set_step(step);
  pb::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  write_record(event.SerializeAsString());
}

void EventFileWriter::add_text(const std::string& tag, const std::string& text, int64_t step) {
  pb::Event event;
  event.set_wall_time(wall_time_now());
  event.set_step(step);
  pb::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag + "/text_summary");
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  pb::TensorProto* tensor = v->mutable_tensor();
  tensor->set_dtype(pb::DT_STRING);
  tensor->mutable_tensor_shape()->add_dim()->set_size(1);
  tensor->add_string_val(text);
  write_record(event.SerializeAsString());
}

void EventFileWriter::write_record(const std::string& data) {
  // u64 length, u32 masked CRC of the length's bytes, the data, u32 masked CRC of the data.
  std::string record;
  append_u64(record, data.size());
  append_u32(record, masked_crc32c(record.data(), 8));
  record += data;
  append_u32(record, masked_crc32c(data.data(), data.size()));
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) {
    throw Error(str_cat(
        path_, ": writing a TensorBoard event failed: ", std::generic_category().message(errno)));
  }
}

void EventFileWriter::flush() {
  if (std::fflush(file_) != 0) {
    throw Error(str_cat(
        path_, ": writing TensorBoard events failed: ", std::generic_category().message(errno)));
  }
}

std::vector<EventRecord> read_event_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(str_cat(path, ": cannot open the event file"));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<EventRecord> records;
  size_t at = 0;
  while (at < bytes.size()) {
    auto bad = [&](const char* what) {
      return Error(str_cat(path, ": record at byte ", at, ": ", what));
    };
    if (bytes.size() - at < 12) throw bad("truncated header");
    const uint64_t length = read_le(bytes, at, 8);
    if (static_cast<uint32_t>(read_le(bytes, at + 8, 4)) != masked_crc32c(bytes.data() + at, 8)) {
      throw bad("the length's CRC does not match");
    }
    if (length > bytes.size() - at - 12 || bytes.size() - at - 12 - length < 4) {
      throw bad(str_cat("truncated data (", length, " bytes announced)").c_str());
    }
    const char* data = bytes.data() + at + 12;
    if (static_cast<uint32_t>(read_le(bytes, at + 12 + length, 4)) != masked_crc32c(data, length)) {
      throw bad("the data's CRC does not match");
    }
    pb::Event event;
    if (!event.ParseFromArray(data, static_cast<int>(length))) throw bad("not an Event message");
    EventRecord record{.wall_time = event.wall_time(),
                       .step = event.step(),
                       .file_version = event.file_version(),
                       .values = {}};
    for (const pb::Summary::Value& v : event.summary().value()) {
      EventValue value{
          .tag = v.tag(), .is_text = v.has_tensor(), .simple_value = v.simple_value(), .text = {}};
      if (v.has_tensor() && v.tensor().string_val_size() > 0) value.text = v.tensor().string_val(0);
      record.values.push_back(std::move(value));
    }
    records.push_back(std::move(record));
    at += 12 + length + 4;
  }
  return records;
}

}  // namespace headroom
