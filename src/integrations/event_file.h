// TensorBoard event files: the records TensorBoard reads (each a length and an Event message,
// both guarded by masked CRC-32Cs), written as torch.utils.tensorboard's SummaryWriter writes
// them and read back for checks.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace headroom {

// A writer of one events.out.tfevents.<10-digit time>.<hostname>.<pid>.<n> file in a log
// directory (created if missing), its first event the file version ("brain.Event:2").
// headroom::Error naming the file when it cannot be created or written.
class EventFileWriter {
 public:
  explicit EventFileWriter(const std::string& log_dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // SummaryWriter.add_scalar: a simple_value (float32) under `tag` at `step`.
  void add_scalar(const std::string& tag, double value, int64_t step);
  // SummaryWriter.add_text: a DT_STRING tensor under `tag`/text_summary, for the text plugin.
  void add_text(const std::string& tag, const std::string& text, int64_t step);
  // Hands what was written to the operating system, so that TensorBoard sees it.
  void flush();

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::string path_;
  std::FILE* file_ = nullptr;
};

// TFRecord's masked CRC-32C: ((c >> 15 | c << 17) + 0xa282ead8) of the bytes' CRC-32C.
uint32_t masked_crc32c(const void* data, size_t size);

// One summary value of an event as read back.
struct EventValue {
  std::string tag;
  bool is_text = false;
  float simple_value = 0.0f;  // a scalar's value
  std::string text;           // a text summary's string
};

struct EventRecord {
  double wall_time = 0.0;
  int64_t step = 0;
  std::string file_version;  // the first event's; empty in the others
  std::vector<EventValue> values;
};

// Every event of the file at `path`. headroom::Error naming the file and the record's offset for a
// truncated record, a CRC that does not match, or a message that does not parse.
std::vector<EventRecord> read_event_file(const std::string& path);

}  // namespace headroom
