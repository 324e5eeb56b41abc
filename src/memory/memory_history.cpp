// The MemoryContext label stack, the recording switch and the trace ring buffer.
#include "memory/memory_history.h"

#include <atomic>
#include <chrono>

namespace headroom {
namespace {

std::atomic<size_t> g_max_entries{0};

struct ThreadContext {
  std::vector<std::string> stack;  // outermost first
  std::shared_ptr<const ContextLabels> cached;
};

ThreadContext& thread_context() {
  thread_local ThreadContext context;
  return context;
}

}  // namespace

MemoryContext::MemoryContext(std::string label) {
  ThreadContext& t = thread_context();
  t.stack.push_back(std::move(label));
  t.cached.reset();
}

MemoryContext::~MemoryContext() {
  ThreadContext& t = thread_context();
  t.stack.pop_back();
  t.cached.reset();
}

std::shared_ptr<const ContextLabels> current_memory_context() {
  ThreadContext& t = thread_context();
  if (!t.cached) t.cached = std::make_shared<const ContextLabels>(t.stack.rbegin(), t.stack.rend());
  return t.cached;
}

const char* trace_action_name(TraceEntry::Action action) {
  switch (action) {
    case TraceEntry::Action::alloc:
      return "alloc";
    case TraceEntry::Action::free_requested:
      return "free_requested";
    case TraceEntry::Action::free_completed:
      return "free_completed";
    case TraceEntry::Action::segment_alloc:
      return "segment_alloc";
    case TraceEntry::Action::segment_free:
      return "segment_free";
    case TraceEntry::Action::segment_map:
      return "segment_map";
    case TraceEntry::Action::segment_unmap:
      return "segment_unmap";
    case TraceEntry::Action::oom:
      return "oom";
  }
  return "?";
}

void record_memory_history(size_t max_entries) { g_max_entries.store(max_entries); }

size_t memory_history_max_entries() { return g_max_entries.load(); }

void TraceRing::push(TraceEntry entry, size_t max_entries) {
  if (entries_.size() != max_entries && next_ != 0) {  // capacity changed after wrapping
    entries_ = entries();
    next_ = 0;
  }
  if (entries_.size() > max_entries) {  // it shrank: keep the newest
    entries_.erase(entries_.begin(),
                   entries_.begin() + static_cast<std::ptrdiff_t>(entries_.size() - max_entries));
  }
  if (entries_.size() < max_entries) {
    entries_.push_back(std::move(entry));
    return;
  }
  entries_[next_] = std::move(entry);
  next_ = (next_ + 1) % max_entries;
}

std::vector<TraceEntry> TraceRing::entries() const {
  std::vector<TraceEntry> out;
  out.reserve(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i)
    out.push_back(entries_[(next_ + i) % entries_.size()]);
  return out;
}

void TraceRing::clear() {
  entries_.clear();
  next_ = 0;
}

}  // namespace headroom
