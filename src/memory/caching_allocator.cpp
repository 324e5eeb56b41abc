// The caching policy. Each step mirrors the function of the same name in PyTorch's
// CUDACachingAllocator.cpp, so that statistics agree with PyTorch's to the byte.
#include "memory/caching_allocator.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <tuple>

#include "core/error.h"
#include "memory/memory_observer.h"

namespace headroom {

struct CachingAllocator::Block {
  uintptr_t ptr = 0;
  size_t size = 0;
  uint64_t segment_id = 0;  // the segment's creation number (Note [Ties between free blocks])
  size_t requested_size = 0;
  StreamId stream = 0;
  BlockPool* pool = nullptr;
  bool allocated = false;
  // Whether memory backs the block's addresses: false only for the unmapped address space of
  // an expandable segment (Note [Expandable segments]), whose blocks are page aligned.
  bool mapped = true;
  ExpandableSegment* expandable = nullptr;  // the segment, for blocks of an expandable one
  Block* prev = nullptr;                    // neighbours within the same segment
  Block* next = nullptr;
  int64_t gc_count_base = 0;  // the pool's free-block search count when this block was cached
  // Streams other than `stream` that used the block (record_stream), and the events still
  // pending after it was freed (Note [Streams and reuse]).
  std::set<StreamId> stream_uses;
  int event_count = 0;
  MemoryCategory category = MemoryCategory::temporaries;  // while allocated
  std::shared_ptr<const ContextLabels> context;           // of the allocation using it
  std::shared_ptr<const ContextLabels> segment_context;   // of the allocation that made the segment

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

// Note [Ties between free blocks]
// Best fit takes the smallest free block that is large enough; among blocks of that size
// PyTorch takes the lowest device address. We take the oldest segment, then the lowest address
// within it, so that no choice depends on where the device put a segment: the CPU's
// aligned_alloc, cudaMalloc and the meta device's counter hand out addresses in different
// orders, and a dry run on meta must make the CPU's or the GPU's choices to predict their cache
// (plan/). Where cudaMalloc returns rising addresses the two rules agree.
bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  if (a->segment_id != b->segment_id) return a->segment_id < b->segment_id;
  return a->ptr < b->ptr;
}

// The unmapped blocks of expandable segments, lowest address first; segments by age, as in
// Note [Ties between free blocks].
bool CachingAllocator::AddressOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->segment_id != b->segment_id) return a->segment_id < b->segment_id;
  return a->ptr < b->ptr;
}

// One reservation of address space of an expandable segment, mapped in pages of `page_size`.
struct CachingAllocator::ExpandableSegment {
  uintptr_t base = 0;
  size_t size = 0;  // the whole reservation
  size_t page_size = 0;
  StreamId stream = 0;

  size_t page_left(uintptr_t p) const { return (p - base) / page_size; }
  size_t page_right(uintptr_t p) const { return (p - base + page_size - 1) / page_size; }
  uintptr_t page_address(size_t page) const { return base + page * page_size; }
};

// Note [An incremental peak state]
// A new reserved peak's state (Note [Slack report]) sums, over the segments holding free
// blocks, their free bytes by kind, and names the largest live block of each split one. Walked
// segment by segment at each capture, that was proportional to the cache; a dry run captures a
// peak at nearly every new segment of its load and after frees in backward, so it grew with the
// square of the layers, and with expandable segments (one chain of every block) far faster.
// Instead each segment keeps its free bytes (those of its blocks in the pool: every free block
// is there, see get_free_block and free_block), its number of blocks and its live blocks
// ordered largest first; any change to them marks the segment, and a capture works out again
// only the marked segments' shares and replaces them in running totals. Its work is the changes
// since the last capture, and the state is the one the walk found: the same sums, the same
// first largest live block in address order, the same stranding groups.
struct CachingAllocator::PeakTracker {
  // The live block that names a split segment: largest, then lowest address (the walk's first).
  struct HolderOrder {
    bool operator()(const Block* a, const Block* b) const {
      if (a->size != b->size) return a->size > b->size;
      return a->ptr < b->ptr;
    }
  };
  struct Key {
    MemoryCategory category;
    size_t size;
    std::string label;
    bool operator<(const Key& o) const {
      return std::tie(category, size, label) < std::tie(o.category, o.size, o.label);
    }
  };
  enum class Kind { none, expandable, whole, split };
  struct Share {
    Kind kind = Kind::none;
    int64_t free_bytes = 0;
    std::optional<Key> holder;
  };
  struct Segment {
    int64_t free_bytes = 0;
    int64_t blocks = 0;  // of an ordinary segment; an expandable one's are not counted
    bool expandable = false;
    std::set<const Block*, HolderOrder> live;
    bool marked = false;
    Share share;
  };

  std::unordered_map<uint64_t, Segment> segments;
  std::vector<uint64_t> marked;
  ReservedPeakState totals;  // the free bytes' part of the state, stranding aside
  std::map<Key, StrandingAllocation> stranding;
  uint64_t updates = 0;

  Segment& mark(const Block* b) {
    Segment& s = segments[b->segment_id];
    s.expandable = b->expandable != nullptr;
    if (!s.marked) {
      s.marked = true;
      marked.push_back(b->segment_id);
    }
    return s;
  }
  void cached(const Block* b) { mark(b).free_bytes += static_cast<int64_t>(b->size); }
  void uncached(const Block* b) { mark(b).free_bytes -= static_cast<int64_t>(b->size); }
  void blocks_added(const Block* b, int64_t n) {
    if (!b->expandable) mark(b).blocks += n;
  }
  void allocated(const Block* b) { mark(b).live.insert(b); }
  void released(const Block* b) { mark(b).live.erase(b); }

  void apply(const Share& share, int64_t sign) {
    switch (share.kind) {
      case Kind::none:
        return;
      case Kind::expandable:
        totals.expandable_free_bytes += sign * share.free_bytes;
        return;
      case Kind::whole:
        totals.whole_free_segment_bytes += sign * share.free_bytes;
        totals.whole_free_segments += sign;
        return;
      case Kind::split:
        totals.split_remainder_bytes += sign * share.free_bytes;
        totals.split_segments += sign;
        if (share.holder) {
          StrandingAllocation& s = stranding[*share.holder];
          s.category = share.holder->category;
          s.block_size = static_cast<int64_t>(share.holder->size);
          s.label = share.holder->label;
          s.segments += sign;
          s.stranded_bytes += sign * share.free_bytes;
          if (s.segments == 0) stranding.erase(*share.holder);
        }
        return;
    }
  }

  // Brings the totals up to date with the marked segments.
  void update() {
    for (const uint64_t id : marked) {
      auto it = segments.find(id);
      Segment& s = it->second;
      s.marked = false;
      ++updates;
      apply(s.share, -1);
      Share share;
      if (s.free_bytes > 0) {
        share.free_bytes = s.free_bytes;
        if (s.expandable) {
          share.kind = Kind::expandable;
        } else if (s.blocks == 1) {
          share.kind = Kind::whole;
        } else {
          share.kind = Kind::split;
          if (!s.live.empty()) {
            const Block* holder = *s.live.begin();
            share.holder =
                Key{holder->category, holder->size,
                    holder->context && !holder->context->empty() ? holder->context->front()
                                                                 : std::string()};
          }
        }
      }
      apply(share, 1);
      s.share = std::move(share);
      if (s.free_bytes == 0 && s.blocks == 0 && s.live.empty()) segments.erase(it);
    }
    marked.clear();
  }
};

struct CachingAllocator::BlockPool {
  explicit BlockPool(bool small) : is_small(small) {}
  std::set<Block*, BlockOrder> blocks;
  std::set<Block*, AddressOrder> unmapped;  // expandable segments' address space
  const bool is_small;
  int64_t get_free_blocks_call_count = 0;  // the clock of garbage collection
  PeakTracker* tracker = nullptr;

  void insert(Block* block) {
    block->gc_count_base = get_free_blocks_call_count;
    blocks.insert(block);
    tracker->cached(block);
  }
  void erase(Block* block) {
    blocks.erase(block);
    tracker->uncached(block);
  }
};

namespace {

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// PyTorch's roundup_power2_next_division: the next of `divisions` equal steps between the
// powers of two around `size`.
size_t roundup_power2_next_division(size_t size, size_t divisions) {
  if (std::has_single_bit(size)) return size;
  const size_t power2_floor = std::bit_floor(size);
  const size_t step = power2_floor >> std::countr_zero(divisions);
  if (step == 0) return power2_floor << 1;
  const size_t floor = size & ~(step - 1);
  return floor == size ? size : floor + step;
}

}  // namespace

CachingAllocator::CachingAllocator(std::unique_ptr<DeviceAllocator> device_allocator,
                                   AllocatorConfig config, size_t memory_limit)
    : device_allocator_(std::move(device_allocator)),
      config_(config),
      memory_limit_(memory_limit),
      large_blocks_(std::make_unique<BlockPool>(false)),
      small_blocks_(std::make_unique<BlockPool>(true)),
      peak_tracker_(std::make_unique<PeakTracker>()) {
  large_blocks_->tracker = peak_tracker_.get();
  small_blocks_->tracker = peak_tracker_.get();
  if (config_.max_split_size != std::numeric_limits<size_t>::max()) {
    stats_.max_split_size = static_cast<int64_t>(config_.max_split_size);
  }
  if (config_.expandable_segments) check_virtual_memory();
}

void CachingAllocator::check_virtual_memory() const {
  if (!device_allocator_->supports_virtual_memory()) {
    throw NotImplementedError(str_cat("expandable_segments:True: ", device(),
                                      " has no virtual memory management to grow segments with"));
  }
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_blocks();
  for (BlockPool* pool : {large_blocks_.get(), small_blocks_.get()}) {
    for (Block* b : pool->blocks) delete b;  // pieces of segments still in use
    for (Block* b : pool->unmapped) delete b;
  }
  for (auto& [ptr, block] : active_blocks_) delete block;
}

Device CachingAllocator::device() const { return device_allocator_->device(); }

size_t CachingAllocator::round_size(size_t size, const AllocatorConfig& config) {
  if (size < kMinBlockSize) return kMinBlockSize;
  const size_t divisions = config.roundup_power2_divisions;
  if (divisions > 1 && size > kMinBlockSize * divisions) {
    return roundup_power2_next_division(size, divisions);
  }
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

size_t CachingAllocator::segment_size(size_t rounded_size) {
  if (rounded_size <= kSmallSize) return kSmallBuffer;
  if (rounded_size < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((rounded_size + kRoundLarge - 1) / kRoundLarge);
}

CachingAllocator::BlockPool& CachingAllocator::pool_for(size_t rounded_size) {
  return rounded_size <= kSmallSize ? *small_blocks_ : *large_blocks_;
}

template <typename F>
void CachingAllocator::for_pool_stats(const BlockPool& pool, F&& f) {
  f(static_cast<size_t>(StatType::all));
  f(static_cast<size_t>(pool.is_small ? StatType::small_pool : StatType::large_pool));
}

void CachingAllocator::record(TraceEntry::Action action, uintptr_t address, size_t size,
                              StreamId stream, std::shared_ptr<const ContextLabels> context) {
  const size_t max_entries = memory_history_max_entries();
  if (max_entries == 0) return;
  trace_.push(TraceEntry{action, address, size, stream, now_us(), std::move(context)}, max_entries);
}

void* CachingAllocator::allocate(size_t nbytes) {
  return malloc(nbytes, device_allocator_->current_stream());
}

void CachingAllocator::deallocate(void* ptr) noexcept {
  try {
    free(ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "headroom: %s\n", e.what());
    std::abort();
  }
}

void* CachingAllocator::malloc(size_t nbytes, StreamId stream) {
  if (nbytes == 0) return nullptr;
  if (nbytes > kMaxRequest) {  // beyond any device, and the rounding below would wrap
    throw OutOfMemoryError(str_cat(device(), " out of memory. Tried to allocate ",
                                   format_bytes(nbytes), ", more than any device holds (",
                                   format_bytes(kMaxRequest), ")"));
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (!events_.empty()) flush_reserved_peak();
  process_events();
  const size_t size = round_size(nbytes, config_);
  BlockPool& pool = pool_for(size);
  const size_t segment = segment_size(size);

  const size_t reserved_before = reserved_;
  Block* block = get_free_block(pool, size, stream);
  if (!block) {
    if (config_.garbage_collection_threshold > 0 && memory_limit_ > 0) {
      garbage_collect_cached_blocks();
    }
    block = alloc_block(pool, size, segment, stream, false);
    if (!block && release_available_cached_blocks(pool, size, stream)) {
      block = alloc_block(pool, size, segment, stream, false);
    }
    if (!block) {
      release_cached_blocks();
      block = alloc_block(pool, size, segment, stream, true);
    }
  }
  if (!block) raise_out_of_memory(size, segment, stream);
  block = alloc_found_block(block, size, nbytes, stream);
  // Note [A deferred peak capture]
  // A new reserved peak's state (Note [Slack report]) was a walk over the cached blocks' segments.
  // Taken at every new peak, a load of thousands of layers (a new segment at nearly every
  // allocation) walked a growing cache each time: its dry run grew with the square of the
  // layers. The capture (now incremental, Note [An incremental peak state]) waits instead until
  // something first changes the blocks after the peak (a block taken from the cache, a free, a
  // release, an event, a category) or the state is read; a next allocation that makes a new segment
  // makes a new peak, which replaces the pending one uncaptured. The state captured is the same:
  // nothing changed between the peak and the capture.
  if (const int64_t current = stats_.reserved_bytes[static_cast<size_t>(StatType::all)].current;
      current > reserved_peak_.reserved) {
    reserved_peak_.reserved = current;
    pending_peak_ =
        PendingPeak{size, reserved_ > reserved_before ? reserved_ - reserved_before : 0};
  }
  void* ptr = reinterpret_cast<void*>(block->ptr);
  if (memory_observers().any()) [[unlikely]] {
    const MemoryUsageEvent usage =
        usage_event(block->ptr, static_cast<int64_t>(block->size), block->category);
    lock.unlock();
    notify_memory_observers(usage);
  }
  return ptr;
}

CachingAllocator::Block* CachingAllocator::get_free_block(BlockPool& pool, size_t size,
                                                          StreamId stream) {
  if (config_.garbage_collection_threshold > 0 && memory_limit_ > 0) {
    ++pool.get_free_blocks_call_count;
  }
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.blocks.lower_bound(&key);
  if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
  if ((*it)->expandable) {
    if (config_.expandable_segments) {
      // A free block at the end of an expandable segment can grow into the unmapped space
      // after it: for best fit it counts at the size it can reach, so a larger block that
      // fits as it is wins over it.
      auto reach = [](const Block* b) {
        return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
      };
      for (auto next = std::next(it); (*it)->expandable && next != pool.blocks.end() &&
                                      (*next)->stream == stream && reach(*next) < reach(*it);
           ++next) {
        it = next;
      }
    } else {
      // Expandable segments were turned off: only blocks of ordinary segments serve.
      while (it != pool.blocks.end() && (*it)->stream == stream && (*it)->expandable) ++it;
      if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
    }
  }
  Block* block = *it;
  // An oversize block is not split for a small request ...
  if (size < config_.max_split_size && block->size >= config_.max_split_size) return nullptr;
  // ... and an oversize request takes a cached block only if it wastes little of it.
  if (size >= config_.max_split_size && block->size >= size + config_.max_non_split_rounding_size) {
    return nullptr;
  }
  flush_reserved_peak();  // Note [A deferred peak capture]
  pool.erase(block);
  return block;
}

CachingAllocator::Block* CachingAllocator::alloc_block(BlockPool& pool, size_t size, size_t segment,
                                                       StreamId stream, bool is_retry) {
  if (is_retry) stats_.num_alloc_retries += 1;
  if (memory_limit_ > 0 && reserved_ + segment > memory_limit_) return nullptr;
  if (config_.expandable_segments) return try_allocate_expandable_block(pool, size, stream);
  void* ptr = device_allocator_->raw_alloc(segment);
  if (!ptr) return nullptr;
  reserved_ += segment;
  auto* block = new Block;
  block->ptr = reinterpret_cast<uintptr_t>(ptr);
  block->size = segment;
  block->segment_id = next_segment_id_++;
  block->stream = stream;
  block->pool = &pool;
  peak_tracker_->blocks_added(block, 1);
  if (memory_history_max_entries() > 0) block->segment_context = current_memory_context();
  for_pool_stats(pool, [&](size_t t) {
    stats_.segment[t].increase(1);
    stats_.reserved_bytes[t].increase(static_cast<int64_t>(segment));
  });
  if (segment >= config_.max_split_size) stats_.oversize_segments.increase(1);
  stats_.num_device_alloc += 1;
  record(TraceEntry::Action::segment_alloc, block->ptr, segment, stream, block->segment_context);
  return block;
}

CachingAllocator::Block* CachingAllocator::find_expandable_block(BlockPool& pool, size_t size,
                                                                 StreamId stream) {
  // The lowest address where free and unmapped blocks, in a row, hold `size`.
  auto allocatable = [](const Block* b) {
    return b && !b->allocated && b->event_count == 0 && b->stream_uses.empty();
  };
  auto has_room = [&](Block* b) {
    size_t bytes = 0;
    for (; bytes < size && allocatable(b); b = b->next) bytes += b->size;
    return bytes >= size;
  };
  Block key;
  key.stream = stream;
  for (auto it = pool.unmapped.lower_bound(&key);
       it != pool.unmapped.end() && (*it)->stream == stream; ++it) {
    Block* candidate = *it;
    // A free block just before the unmapped one grows into it.
    if (allocatable(candidate->prev)) candidate = candidate->prev;
    if (has_room(candidate)) return candidate;
  }
  // A new segment: address space for 9/8 of the device's memory (PyTorch's reserve, so that
  // pages unmapped early in the segment can be mapped again at its end).
  const size_t page = pool.is_small ? kSmallBuffer : kLargeBuffer;
  const DeviceMemoryInfo info = device_allocator_->memory_info();
  size_t space = info.total > 0 ? info.total + info.total / 8 : kUnboundedAddressSpace;
  space = std::max(space, size);
  space = (space + page - 1) / page * page;
  auto segment = std::make_unique<ExpandableSegment>();
  segment->base =
      reinterpret_cast<uintptr_t>(device_allocator_->reserve_address_space(space, page));
  segment->size = space;
  segment->page_size = page;
  segment->stream = stream;
  auto* candidate = new Block;
  candidate->ptr = segment->base;
  candidate->size = space;
  candidate->segment_id = next_segment_id_++;
  candidate->stream = stream;
  candidate->pool = &pool;
  candidate->mapped = false;
  candidate->expandable = segment.get();
  expandable_segments_.push_back(std::move(segment));
  pool.unmapped.insert(candidate);
  return candidate;
}

bool CachingAllocator::map_block(Block* to_map, size_t size) {
  const ExpandableSegment& segment = *to_map->expandable;
  const size_t begin = segment.page_left(to_map->ptr);
  const size_t end = segment.page_right(to_map->ptr + size);
  const uintptr_t start = segment.page_address(begin);
  const size_t mapped = (end - begin) * segment.page_size;
  HEADROOM_INTERNAL_ASSERT(start == to_map->ptr && mapped <= to_map->size,
                           "map_block: an unmapped block at ", to_map->ptr, " of ", to_map->size,
                           " bytes does not hold the pages from ", start, "");
  // The capacity limit acts as the device's end of memory, page by page.
  if (memory_limit_ > 0 && reserved_ + mapped > memory_limit_) return false;
  if (!device_allocator_->map_pages(reinterpret_cast<void*>(start), mapped, segment.page_size)) {
    return false;
  }
  BlockPool& pool = *to_map->pool;
  pool.unmapped.erase(to_map);
  to_map->mapped = true;
  if (mapped < to_map->size) {
    // to_map -> rest (unmapped) -> to_map->next
    auto* rest = new Block;
    rest->ptr = to_map->ptr + mapped;
    rest->size = to_map->size - mapped;
    rest->segment_id = to_map->segment_id;
    rest->stream = to_map->stream;
    rest->pool = &pool;
    rest->mapped = false;
    rest->expandable = to_map->expandable;
    rest->segment_context = to_map->segment_context;
    rest->prev = to_map;
    rest->next = to_map->next;
    if (rest->next) rest->next->prev = rest;
    to_map->next = rest;
    to_map->size = mapped;
    pool.unmapped.insert(rest);
  }
  try_merge_blocks(to_map, to_map->prev, pool);
  try_merge_blocks(to_map, to_map->next, pool);
  pool.insert(to_map);
  reserved_ += mapped;
  for_pool_stats(
      pool, [&](size_t t) { stats_.reserved_bytes[t].increase(static_cast<int64_t>(mapped)); });
  stats_.num_device_alloc += 1;
  std::shared_ptr<const ContextLabels> context =
      memory_history_max_entries() > 0 ? current_memory_context() : nullptr;
  if (!to_map->prev && !to_map->segment_context) to_map->segment_context = context;
  record(TraceEntry::Action::segment_map, start, mapped, to_map->stream, std::move(context));
  return true;
}

CachingAllocator::Block* CachingAllocator::try_allocate_expandable_block(BlockPool& pool,
                                                                         size_t size,
                                                                         StreamId stream) {
  flush_reserved_peak();  // Note [A deferred peak capture]: it may take mapped free blocks
  // The candidate starts a row of free and unmapped blocks holding `size`: unmapped, or free
  // followed by unmapped. Mapping merges each newly mapped range into the free block before it.
  Block* candidate = find_expandable_block(pool, size, stream);
  if (!candidate->mapped && !map_block(candidate, std::min(candidate->size, size))) {
    return nullptr;
  }
  while (candidate->size < size) {
    Block* next = candidate->next;
    if (!map_block(next, std::min(size - candidate->size, next->size))) return nullptr;
    candidate = next;  // it took over the free block before it
  }
  pool.erase(candidate);
  return candidate;
}

void CachingAllocator::unmap_block(Block* block) {
  // Unmaps the whole pages inside the free block; the partial pages at its ends stay mapped as
  // free blocks of their own.
  const ExpandableSegment& segment = *block->expandable;
  const size_t begin = segment.page_right(block->ptr);
  const size_t end = segment.page_left(block->ptr + block->size);
  if (begin >= end) return;
  const uintptr_t start = segment.page_address(begin);
  const size_t size = (end - begin) * segment.page_size;
  BlockPool& pool = *block->pool;
  pool.erase(block);
  device_allocator_->unmap_pages(reinterpret_cast<void*>(start), size, segment.page_size,
                                 block->stream);
  auto piece = [&](uintptr_t ptr, size_t bytes) {
    auto* b = new Block;
    b->ptr = ptr;
    b->size = bytes;
    b->segment_id = block->segment_id;
    b->stream = block->stream;
    b->pool = &pool;
    b->expandable = block->expandable;
    b->segment_context = block->segment_context;
    return b;
  };
  if (start > block->ptr) {  // prev -> before -> block
    Block* before = piece(block->ptr, start - block->ptr);
    before->prev = block->prev;
    if (before->prev) before->prev->next = before;
    before->next = block;
    block->prev = before;
    pool.insert(before);
  }
  if (block->ptr + block->size > start + size) {  // block -> after -> next
    Block* after = piece(start + size, block->ptr + block->size - (start + size));
    after->next = block->next;
    if (after->next) after->next->prev = after;
    after->prev = block;
    block->next = after;
    pool.insert(after);
  }
  block->ptr = start;
  block->size = size;
  block->mapped = false;
  try_merge_blocks(block, block->prev, pool);
  try_merge_blocks(block, block->next, pool);
  pool.unmapped.insert(block);
  reserved_ -= size;
  for_pool_stats(pool,
                 [&](size_t t) { stats_.reserved_bytes[t].decrease(static_cast<int64_t>(size)); });
  stats_.num_device_free += 1;
  record(TraceEntry::Action::segment_unmap, start, size, block->stream, block->segment_context);
}

void CachingAllocator::release_expandable_segment(Block* block) {
  ExpandableSegment* segment = block->expandable;
  HEADROOM_INTERNAL_ASSERT(!block->mapped && block->size == segment->size,
                           "release_expandable_segment: ", block->size, " of ", segment->size,
                           " bytes unmapped");
  block->pool->unmapped.erase(block);
  device_allocator_->release_address_space(reinterpret_cast<void*>(segment->base), segment->size);
  delete block;
  std::erase_if(expandable_segments_, [&](const auto& s) { return s.get() == segment; });
}

CachingAllocator::Block* CachingAllocator::alloc_found_block(Block* block, size_t size,
                                                             size_t requested, StreamId stream) {
  BlockPool& pool = *block->pool;
  const bool already_split = block->is_split();
  const size_t remaining_size = block->size - size;
  const bool split = pool.is_small || config_.expandable_segments
                         ? remaining_size >= kMinBlockSize
                         : size < config_.max_split_size && remaining_size > kSmallSize;
  // Free pages of expandable segments can always be unmapped: they are no inactive split.
  const bool counts_split = !block->expandable;
  if (split) {
    Block* remaining = block;
    block = new Block;
    block->ptr = remaining->ptr;
    block->size = size;
    block->segment_id = remaining->segment_id;
    block->stream = stream;
    block->pool = &pool;
    block->expandable = remaining->expandable;
    block->segment_context = remaining->segment_context;
    block->prev = remaining->prev;
    if (block->prev) block->prev->next = block;
    block->next = remaining;
    remaining->prev = block;
    remaining->ptr += size;
    remaining->size -= size;
    peak_tracker_->blocks_added(block, 1);
    pool.insert(remaining);
    if (already_split && counts_split) {
      // An inactive split block shrinks by `size`.
      for_pool_stats(pool, [&](size_t t) {
        stats_.inactive_split_bytes[t].decrease(static_cast<int64_t>(size));
      });
    } else if (counts_split) {
      // A new inactive split block of the remainder appears.
      for_pool_stats(pool, [&](size_t t) {
        stats_.inactive_split_bytes[t].increase(static_cast<int64_t>(remaining->size));
        stats_.inactive_split[t].increase(1);
      });
    }
  } else if (already_split && counts_split) {
    // An inactive split block becomes active whole.
    for_pool_stats(pool, [&](size_t t) {
      stats_.inactive_split_bytes[t].decrease(static_cast<int64_t>(block->size));
      stats_.inactive_split[t].decrease(1);
    });
  }

  block->allocated = true;
  block->requested_size = requested;
  peak_tracker_->allocated(block);
  block->context = memory_history_max_entries() > 0 ? current_memory_context() : nullptr;
  active_blocks_.emplace(block->ptr, block);
  for_pool_stats(pool, [&](size_t t) {
    stats_.allocation[t].increase(1);
    stats_.allocated_bytes[t].increase(static_cast<int64_t>(block->size));
    stats_.active[t].increase(1);
    stats_.active_bytes[t].increase(static_cast<int64_t>(block->size));
    stats_.requested_bytes[t].increase(static_cast<int64_t>(requested));
  });
  if (block->size >= config_.max_split_size) stats_.oversize_allocations.increase(1);
  block->category = current_memory_category();
  add_category_bytes(block->category, static_cast<int64_t>(block->size));
  record(TraceEntry::Action::alloc, block->ptr, requested, stream, block->context);
  return block;
}

void CachingAllocator::free(void* ptr) {
  if (!ptr) return;
  std::unique_lock<std::mutex> lock(mutex_);
  flush_reserved_peak();
  auto it = active_blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == active_blocks_.end()) {
    throw Error(str_cat("free: pointer ", ptr, " was not allocated by the ", device(),
                        " caching allocator, or was freed twice"));
  }
  Block* block = it->second;
  active_blocks_.erase(it);
  peak_tracker_->released(block);
  block->allocated = false;
  for_pool_stats(*block->pool, [&](size_t t) {
    stats_.allocation[t].decrease(1);
    stats_.allocated_bytes[t].decrease(static_cast<int64_t>(block->size));
  });
  add_category_bytes(block->category, -static_cast<int64_t>(block->size));
  record(TraceEntry::Action::free_requested, block->ptr, block->requested_size, block->stream,
         block->context);
  if (block->size >= config_.max_split_size) stats_.oversize_allocations.decrease(1);
  // Taken before free_block, which may merge the block with its neighbours.
  const bool observed = memory_observers().any();
  MemoryUsageEvent usage;
  if (observed) [[unlikely]] {
    usage = usage_event(block->ptr, -static_cast<int64_t>(block->size), block->category);
  }
  if (block->stream_uses.empty()) {
    free_block(block);
  } else {
    insert_events(block);
  }
  if (observed) [[unlikely]] {
    lock.unlock();
    notify_memory_observers(usage);
  }
}

void CachingAllocator::free_block(Block* block) {
  record(TraceEntry::Action::free_completed, block->ptr, block->requested_size, block->stream,
         block->context);
  const size_t original_size = block->size;
  const size_t requested = block->requested_size;
  BlockPool& pool = *block->pool;
  int64_t net_inactive_blocks = 0, net_inactive_bytes = 0;
  for (Block* candidate : {block->prev, block->next}) {
    const size_t subsumed = try_merge_blocks(block, candidate, pool);
    if (subsumed > 0) {
      net_inactive_blocks -= 1;
      net_inactive_bytes -= static_cast<int64_t>(subsumed);
    }
  }
  block->requested_size = 0;
  block->context.reset();
  pool.insert(block);
  if (block->is_split()) {
    net_inactive_blocks += 1;
    net_inactive_bytes += static_cast<int64_t>(block->size);
  }
  if (block->expandable) net_inactive_blocks = net_inactive_bytes = 0;
  for_pool_stats(pool, [&](size_t t) {
    if (net_inactive_blocks > 0) stats_.inactive_split[t].increase(net_inactive_blocks);
    if (net_inactive_blocks < 0) stats_.inactive_split[t].decrease(-net_inactive_blocks);
    if (net_inactive_bytes > 0) stats_.inactive_split_bytes[t].increase(net_inactive_bytes);
    if (net_inactive_bytes < 0) stats_.inactive_split_bytes[t].decrease(-net_inactive_bytes);
    stats_.active[t].decrease(1);
    stats_.active_bytes[t].decrease(static_cast<int64_t>(original_size));
    stats_.requested_bytes[t].decrease(static_cast<int64_t>(requested));
  });
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  flush_reserved_peak();
  auto it = active_blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == active_blocks_.end()) {
    throw Error(str_cat("record_stream: pointer ", ptr, " is not a live allocation of the ",
                        device(), " caching allocator"));
  }
  Block* block = it->second;
  // Uses on the allocation stream are ordered with its reuse already.
  if (stream != block->stream) block->stream_uses.insert(stream);
}

void CachingAllocator::insert_events(Block* block) {
  const std::set<StreamId> streams = std::move(block->stream_uses);
  block->stream_uses.clear();
  for (StreamId stream : streams) {
    const EventId event = device_allocator_->record_event(stream);
    ++block->event_count;
    events_[stream].emplace_back(event, block);
  }
}

void CachingAllocator::process_events() {
  // Per stream, so that a long-running stream does not hold up the blocks of the others.
  for (auto it = events_.begin(); it != events_.end();) {
    auto& pending = it->second;
    while (!pending.empty()) {
      const auto [event, block] = pending.front();
      if (!device_allocator_->query_event(event)) break;
      device_allocator_->destroy_event(event);
      pending.pop_front();
      if (--block->event_count == 0) free_block(block);
    }
    it = pending.empty() ? events_.erase(it) : std::next(it);
  }
}

void CachingAllocator::synchronize_and_free_events() {
  for (auto& [stream, pending] : events_) {
    for (const auto& [event, block] : pending) {
      device_allocator_->synchronize_event(event);
      device_allocator_->destroy_event(event);
      if (--block->event_count == 0) free_block(block);
    }
  }
  events_.clear();
}

size_t CachingAllocator::try_merge_blocks(Block* dst, Block* src, BlockPool& pool) {
  // A freed block waiting for events is not free yet (Note [Streams and reuse]).
  if (!src || src->allocated || src->event_count > 0 || !src->stream_uses.empty() ||
      src->mapped != dst->mapped) {
    return 0;
  }
  if (dst->prev == src) {  // [src dst]
    dst->ptr = src->ptr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
  } else {  // [dst src]
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  const size_t subsumed = src->size;
  if (src->mapped) {
    pool.erase(src);
  } else {
    pool.unmapped.erase(src);
  }
  peak_tracker_->blocks_added(src, -1);
  dst->size += subsumed;
  delete src;
  return subsumed;
}

bool CachingAllocator::release_available_cached_blocks(BlockPool& pool, size_t size,
                                                       StreamId stream) {
  flush_reserved_peak();
  if (config_.max_split_size == std::numeric_limits<size_t>::max()) return false;
  Block key;
  key.stream = stream;
  key.size = std::max(size, config_.max_split_size);
  auto it = pool.blocks.lower_bound(&key);
  // Blocks of expandable segments are unmapped by page, never released whole here.
  if (it == pool.blocks.end() || (*it)->stream != stream || (*it)->expandable) {
    // No single cached block is large enough: free oversize blocks, largest first.
    if (it == pool.blocks.begin()) return false;
    size_t released = 0;
    --it;
    while (released < key.size && (*it)->size >= config_.max_split_size &&
           (*it)->stream == stream) {
      auto current = it;
      const bool is_first = current == pool.blocks.begin();
      if (!is_first) --it;
      if (!(*current)->expandable) {
        released += (*current)->size;
        release_block(*current);
      }
      if (is_first) break;
    }
    return released >= key.size;
  }
  release_block(*it);
  return true;
}

void CachingAllocator::release_cached_blocks() {
  flush_reserved_peak();
  // Blocks waiting for events first go back to their pools, so that their segments can go too.
  synchronize_and_free_events();
  device_allocator_->synchronize();
  stats_.num_sync_all_streams += 1;
  release_blocks(*large_blocks_);
  release_blocks(*small_blocks_);
}

void CachingAllocator::release_blocks(BlockPool& pool) {
  // Unmapping changes the pool, so the free blocks of expandable segments are gathered first.
  std::vector<Block*> to_unmap;
  for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
    Block* block = *it++;
    if (block->expandable) {
      to_unmap.push_back(block);
    } else if (!block->prev && !block->next) {
      release_block(block);
    }
  }
  for (Block* block : to_unmap) {
    unmap_block(block);
    if (!block->mapped && !block->prev && !block->next) release_expandable_segment(block);
  }
}

void CachingAllocator::release_block(Block* block) {
  BlockPool& pool = *block->pool;
  stats_.num_device_free += 1;
  record(TraceEntry::Action::segment_free, block->ptr, block->size, block->stream,
         block->segment_context);
  device_allocator_->raw_free(reinterpret_cast<void*>(block->ptr), block->size);
  reserved_ -= block->size;
  for_pool_stats(pool, [&](size_t t) {
    stats_.segment[t].decrease(1);
    stats_.reserved_bytes[t].decrease(static_cast<int64_t>(block->size));
  });
  if (block->size >= config_.max_split_size) stats_.oversize_segments.decrease(1);
  pool.erase(block);
  peak_tracker_->blocks_added(block, -1);
  delete block;
}

void CachingAllocator::garbage_collect_cached_blocks() {
  flush_reserved_peak();
  // Free cached whole segments that have waited longest for reuse, oldest (by the number of
  // free-block searches since they were cached) above the average first, until reserved memory
  // is back under the threshold. Only the large pool: small segments are cheap to keep.
  const size_t threshold = static_cast<size_t>(config_.garbage_collection_threshold *
                                               static_cast<double>(memory_limit_));
  if (reserved_ <= threshold) return;
  const size_t target = reserved_ - threshold;
  BlockPool& pool = *large_blocks_;
  auto age = [&](const Block* b) { return pool.get_free_blocks_call_count - b->gc_count_base; };
  int64_t total_age = 0, freeable = 0;
  for (const Block* b : pool.blocks) {
    if (!b->is_split() && !b->expandable) {
      total_age += age(b);
      ++freeable;
    }
  }
  size_t reclaimed = 0;
  bool freed_one = true;
  while (reclaimed < target && freed_one && freeable > 0) {
    const double age_threshold = static_cast<double>(total_age) / static_cast<double>(freeable);
    freed_one = false;
    for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
      Block* block = *it++;
      if (!block->is_split() && !block->expandable &&
          static_cast<double>(age(block)) >= age_threshold) {
        freed_one = true;
        reclaimed += block->size;
        total_age -= age(block);
        --freeable;
        release_block(block);
      }
    }
  }
}

void CachingAllocator::raise_out_of_memory(size_t size, size_t segment, StreamId stream) {
  const DeviceMemoryInfo info = device_allocator_->memory_info();
  stats_.num_ooms += 1;
  record(TraceEntry::Action::oom, info.free, size, stream,
         memory_history_max_entries() > 0 ? current_memory_context() : nullptr);
  const int64_t allocated = stats_.allocated_bytes[0].current;
  const int64_t reserved = stats_.reserved_bytes[0].current;
  std::string capacity;
  if (info.total > 0) {
    capacity = str_cat("Device ", device(), " has a total capacity of ", format_bytes(info.total),
                       " of which ", format_bytes(info.free), " is free. ");
  } else {
    capacity = str_cat("Device ", device(), " has no physical capacity. ");
  }
  if (memory_limit_ > 0) {
    capacity += str_cat("Its capacity limit is ", format_bytes(memory_limit_),
                        " (--memory_limit / HEADROOM_MEMORY_LIMIT). ");
  }
  throw OutOfMemoryError(str_cat(
      device(), " out of memory. Tried to allocate ", format_bytes(size), " (a new ",
      format_bytes(segment), " segment). ", capacity, "Of the memory in use, ",
      format_bytes(static_cast<size_t>(allocated)), " is allocated by tensors, and ",
      format_bytes(static_cast<size_t>(reserved - allocated)),
      " is reserved by headroom but unallocated. If reserved but unallocated memory is large, "
      "try HEADROOM_ALLOC_CONF=expandable_segments:True to avoid fragmentation. `headroom plan` "
      "finds a configuration that fits (a smaller batch, checkpointing, another precision or "
      "optimizer), and --memory_snapshot FILE records where the memory went (open the file in "
      "pytorch.org/memory_viz)."));
}

MemoryUsageEvent CachingAllocator::usage_event(uintptr_t address, int64_t bytes,
                                               MemoryCategory category) const {
  const auto all = static_cast<size_t>(StatType::all);
  return MemoryUsageEvent{device(),
                          address,
                          bytes,
                          stats_.allocated_bytes[all].current,
                          stats_.reserved_bytes[all].current,
                          category};
}

void CachingAllocator::notify_memory_observers(const MemoryUsageEvent& usage) {
  memory_observers().notify([&](MemoryObserver& observer) { observer.on_memory_usage(usage); });
}

void CachingAllocator::add_category_bytes(MemoryCategory category, int64_t bytes) {
  stats_.category_current[static_cast<size_t>(category)] += bytes;
  // At the peak (a new one, or the old one reached again) the split is the one of now.
  const Stat& allocated = stats_.allocated_bytes[static_cast<size_t>(StatType::all)];
  if (bytes >= 0 && allocated.current == allocated.peak) {
    stats_.category_at_peak = stats_.category_current;
  }
}

bool CachingAllocator::set_category(const void* ptr, MemoryCategory category) {
  std::lock_guard<std::mutex> lock(mutex_);
  flush_reserved_peak();
  auto it = active_blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == active_blocks_.end()) return false;
  Block* block = it->second;
  if (block->category == category) return true;
  const auto size = static_cast<int64_t>(block->size);
  stats_.category_current[static_cast<size_t>(block->category)] -= size;
  peak_tracker_->mark(block);  // it may name its segment's stranding
  block->category = category;
  add_category_bytes(category, size);
  return true;
}

DeviceStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.reset_peak();
  pending_peak_.reset();
  capture_reserved_peak(0, 0);
}

void CachingAllocator::flush_reserved_peak() {
  if (!pending_peak_) return;
  const PendingPeak peak = *pending_peak_;
  pending_peak_.reset();
  capture_reserved_peak(peak.request, peak.added);
}

ReservedPeakState CachingAllocator::reserved_peak_state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  // Reading is no change to the blocks: the pending capture is the state at the peak.
  const_cast<CachingAllocator*>(this)->flush_reserved_peak();
  return reserved_peak_;
}

void CachingAllocator::capture_reserved_peak(size_t request, size_t added) {
  // Note [Slack report]
  ReservedPeakState state;
  const auto all = static_cast<size_t>(StatType::all);
  state.reserved = stats_.reserved_bytes[all].current;
  state.allocated = stats_.allocated_bytes[all].current;
  state.request_bytes = static_cast<int64_t>(request);
  state.added_bytes = static_cast<int64_t>(added);
  state.expandable_segments = config_.expandable_segments;
  // Note [An incremental peak state]: the shares of the segments changed since the last capture.
  PeakTracker& tracker = *peak_tracker_;
  tracker.update();
  state.split_remainder_bytes = tracker.totals.split_remainder_bytes;
  state.split_segments = tracker.totals.split_segments;
  state.whole_free_segment_bytes = tracker.totals.whole_free_segment_bytes;
  state.whole_free_segments = tracker.totals.whole_free_segments;
  state.expandable_free_bytes = tracker.totals.expandable_free_bytes;
  std::set<const Block*> pending;
  for (const auto& [stream, events] : events_) {
    for (const auto& [event, b] : events) pending.insert(b);
  }
  for (const Block* b : pending) state.pending_free_bytes += static_cast<int64_t>(b->size);
  for (const auto& [key, s] : tracker.stranding) state.stranding.push_back(s);
  std::sort(state.stranding.begin(), state.stranding.end(),
            [](const auto& a, const auto& b) { return a.stranded_bytes > b.stranded_bytes; });
  if (state.stranding.size() > 3) state.stranding.resize(3);
  reserved_peak_ = std::move(state);
}

void CachingAllocator::reset_accumulated_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.reset_accumulated();
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_blocks();
}

void CachingAllocator::set_expandable_segments(bool enabled) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (enabled) check_virtual_memory();
  config_.expandable_segments = enabled;
}

AllocatorConfig CachingAllocator::config() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return config_;
}

void CachingAllocator::set_memory_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  memory_limit_ = bytes;
}

size_t CachingAllocator::memory_limit() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return memory_limit_;
}

DeviceMemoryInfo CachingAllocator::device_memory_info() const {
  return device_allocator_->memory_info();
}

std::vector<SegmentInfo> CachingAllocator::segments() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<const Block*> heads;
  // A segment starts at a block with no mapped block before it: an expandable segment shows
  // one segment per contiguous mapped range, as PyTorch's snapshot does.
  auto is_head = [](const Block* b) { return !b->prev || !b->prev->mapped; };
  for (const BlockPool* pool : {large_blocks_.get(), small_blocks_.get()}) {
    for (const Block* b : pool->blocks) {
      if (is_head(b)) heads.push_back(b);
    }
  }
  for (const auto& [ptr, b] : active_blocks_) {
    if (is_head(b)) heads.push_back(b);
  }
  std::set<const Block*> pending;  // a block waits on one event per stream that used it
  for (const auto& [stream, events] : events_) {
    for (const auto& [event, b] : events) pending.insert(b);
  }
  for (const Block* b : pending) {
    if (is_head(b)) heads.push_back(b);
  }
  std::sort(heads.begin(), heads.end(),
            [](const Block* a, const Block* b) { return a->ptr < b->ptr; });
  std::vector<SegmentInfo> out;
  for (const Block* head : heads) {
    SegmentInfo s;
    s.device = device();
    s.address = head->ptr;
    s.stream = head->stream;
    s.is_large = !head->pool->is_small;
    s.is_expandable = head->expandable != nullptr;
    s.context = head->segment_context;
    for (const Block* b = head; b && b->mapped; b = b->next) {
      s.total_size += b->size;
      if (b->allocated) {
        s.allocated_size += b->size;
        s.requested_size += b->requested_size;
      }
      // Freed but waiting for events still counts as active (Note [Streams and reuse]).
      if (b->allocated || b->event_count > 0) s.active_size += b->size;
      s.blocks.push_back(BlockInfo{b->ptr, b->size, b->requested_size, b->allocated, b->context});
    }
    out.push_back(std::move(s));
  }
  return out;
}

uint64_t CachingAllocator::peak_state_segment_updates() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_tracker_->updates;
}

std::vector<TraceEntry> CachingAllocator::trace() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return trace_.entries();
}

}  // namespace headroom
