// CachingAllocator: the one allocation policy of every device, PyTorch's CUDA caching allocator
// (c10/cuda/CUDACachingAllocator.cpp) over a small DeviceAllocator. Requests are rounded to
// 512 B, served best-fit from a small (<= 1 MiB) or large pool of cached blocks, carved out of
// 2 MiB / 20 MiB / rounded segments, split and coalesced; before an out-of-memory error it frees
// the cache and retries. Statistics, history and the OOM report follow PyTorch's names, so the
// figures read on the CPU or meta device are the ones a GPU run would show.
//
// Note [Streams and reuse]
// Every block belongs to the stream it was allocated on, and a free block is reused only by a
// request on that stream: work queued on one stream runs in order, so memory freed by the host
// while a kernel still reads it is safe to hand to the next kernel of the same stream, and to no
// other. A tensor used on another stream says so with record_stream (Tensor::record_stream); when
// its block is freed, an event is recorded on each of those streams and the block waits, out of
// every pool, until all of them have completed (PyTorch's stream_uses / insert_events). Pending
// blocks are checked, oldest first per stream, at the start of each malloc (process_events); an
// out-of-memory retry and empty_cache wait for all of them first. As in PyTorch, a pending block
// no longer counts as allocated (memory_allocated drops at free) but still counts as active
// until its events complete. The events come from the DeviceAllocator; on a device with one
// queue they complete at once, and the block is reusable at the next malloc.
//
// Note [Expandable segments]
// With expandable_segments:True (PyTorch's option and policy, c10's Note [Expandable Segments])
// each stream and pool has one segment that grows: address space for 9/8 of the device's memory
// is reserved once (DeviceAllocator::reserve_address_space) and memory is mapped into it in
// pages, 2 MiB for the small pool and 20 MiB (kLargeBuffer) for the large one, when no free
// block fits. The segment is a chain of blocks as any other, the unmapped address space beyond
// (and between) them kept as unmapped blocks in the pool's `unmapped` set. A request maps pages
// at the lowest address where free and unmapped blocks together hold it, so the free tail of
// the segment grows into the new allocation instead of staying behind as a stranded remainder;
// and any block splits when 512 B or more remain. Mapping counts reserved_bytes and
// num_device_alloc and records segment_map; empty_cache (and the out-of-memory retry) unmaps
// the whole free pages (segment_unmap, num_device_free) and gives the address space back once
// nothing of it is mapped. As in PyTorch, the `segment` counts and inactive_split stats leave
// expandable segments out, and a snapshot shows one segment (is_expandable) per contiguous
// mapped range.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "memory/alloc_config.h"
#include "memory/device_allocator.h"
#include "memory/memory_history.h"
#include "memory/memory_observer.h"
#include "memory/memory_stats.h"
#include "memory/slack_report.h"

namespace headroom {

// One block of a segment, for snapshots.
struct BlockInfo {
  uintptr_t address = 0;
  size_t size = 0;
  size_t requested_size = 0;  // 0 for a cached (inactive) block
  bool allocated = false;
  std::shared_ptr<const ContextLabels> context;  // of the allocation, when recorded
};

// One segment obtained from the device, with its blocks in address order.
struct SegmentInfo {
  Device device;
  uintptr_t address = 0;
  size_t total_size = 0;
  size_t allocated_size = 0;
  size_t active_size = 0;
  size_t requested_size = 0;
  StreamId stream = 0;
  bool is_large = false;
  bool is_expandable = false;                    // a mapped range of an expandable segment
  std::shared_ptr<const ContextLabels> context;  // of the allocation that created it
  std::vector<BlockInfo> blocks;
};

class CachingAllocator final : public Allocator {
 public:
  static constexpr size_t kMinBlockSize = 512;            // every size is a multiple of this
  static constexpr size_t kSmallSize = 1u << 20;          // largest request of the small pool
  static constexpr size_t kSmallBuffer = 2u << 20;        // segment size of the small pool
  static constexpr size_t kLargeBuffer = 20u << 20;       // segment for requests under 10 MiB
  static constexpr size_t kMinLargeAlloc = 10u << 20;     // from here segments fit the request
  static constexpr size_t kRoundLarge = 2u << 20;         // ... rounded up to 2 MiB
  static constexpr size_t kMaxRequest = size_t{1} << 50;  // 1 PiB: no device has more
  // Address space of one expandable segment on a device without a capacity (meta): 4 TiB.
  static constexpr size_t kUnboundedAddressSpace = size_t{1} << 42;

  // `memory_limit` 0 means no limit beyond the device's own memory.
  explicit CachingAllocator(std::unique_ptr<DeviceAllocator> device_allocator,
                            AllocatorConfig config = AllocatorConfig::from_env(),
                            size_t memory_limit = memory_limit_from_env());
  ~CachingAllocator() override;  // returns cached segments; blocks still in use are leaked
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Allocator: on the calling thread's current stream. allocate throws OutOfMemoryError.
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr) noexcept override;

  // Error for a live block not at `ptr` (see Note [Streams and reuse]).
  void record_stream(void* ptr, StreamId stream) override;

  void* malloc(size_t nbytes, StreamId stream);
  // Error for a pointer this allocator did not hand out (or already took back).
  void free(void* ptr);

  // The device's memory and queues, for the stream functions of memory/device_memory.h.
  DeviceAllocator& device_allocator() const { return *device_allocator_; }

  Device device() const;
  DeviceStats stats() const;
  // Re-tags the live block at `ptr` (a pointer this allocator returned) as `category`, moving
  // its bytes between the category counters. False when `ptr` is not a live block of this
  // allocator (memory from elsewhere, such as a mapped file).
  bool set_category(const void* ptr, MemoryCategory category);
  void reset_peak_stats();
  void reset_accumulated_stats();
  // Returns every cached segment with no block in use to the device (torch.cuda.empty_cache).
  void empty_cache();
  // Caps reserved memory, as if the device had only `bytes` (0 removes the cap).
  void set_memory_limit(size_t bytes);
  size_t memory_limit() const;
  // Turns expandable segments on or off for the segments made from now on (PyTorch's
  // _set_allocator_settings); blocks of the other kind stay until they are released.
  // NotImplementedError when the device has no virtual memory.
  void set_expandable_segments(bool enabled);
  AllocatorConfig config() const;
  DeviceMemoryInfo device_memory_info() const;

  std::vector<SegmentInfo> segments() const;  // in address order
  // The allocator's state when reserved_bytes.all last reached its peak (Note [Slack report]);
  // reset_peak_stats takes it anew.
  ReservedPeakState reserved_peak_state() const;
  std::vector<TraceEntry> trace() const;  // oldest first
  // Segments whose share of the reserved peak state was worked out again so far, a measure of
  // the peak captures' work (Note [An incremental peak state]), for tests.
  uint64_t peak_state_segment_updates() const;

  // The size policy, for tests and the planner.
  static size_t round_size(size_t size, const AllocatorConfig& config);
  static size_t segment_size(size_t rounded_size);

 private:
  struct Block;
  struct BlockPool;
  struct ExpandableSegment;
  struct PeakTracker;
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  struct AddressOrder {
    bool operator()(const Block* a, const Block* b) const;
  };

  BlockPool& pool_for(size_t rounded_size);
  Block* get_free_block(BlockPool& pool, size_t size, StreamId stream);
  Block* alloc_block(BlockPool& pool, size_t size, size_t segment, StreamId stream, bool is_retry);
  Block* find_expandable_block(BlockPool& pool, size_t size, StreamId stream);
  bool map_block(Block* to_map, size_t size);
  Block* try_allocate_expandable_block(BlockPool& pool, size_t size, StreamId stream);
  void unmap_block(Block* block);
  void release_expandable_segment(Block* block);
  void check_virtual_memory() const;
  Block* alloc_found_block(Block* block, size_t size, size_t requested, StreamId stream);
  void free_block(Block* block);
  void insert_events(Block* block);
  void process_events();
  void synchronize_and_free_events();
  size_t try_merge_blocks(Block* dst, Block* src, BlockPool& pool);
  bool release_available_cached_blocks(BlockPool& pool, size_t size, StreamId stream);
  void release_cached_blocks();
  void release_blocks(BlockPool& pool);
  void release_block(Block* block);
  void garbage_collect_cached_blocks();
  [[noreturn]] void raise_out_of_memory(size_t size, size_t segment, StreamId stream);
  void add_category_bytes(MemoryCategory category, int64_t bytes);
  void capture_reserved_peak(size_t request, size_t added);
  // Note [A deferred peak capture]: captures a new reserved peak noted by malloc, before the
  // first change to the blocks after it.
  void flush_reserved_peak();
  // For memory observers (memory/memory_observer.h): built under the lock, sent after it.
  MemoryUsageEvent usage_event(uintptr_t address, int64_t bytes, MemoryCategory category) const;
  static void notify_memory_observers(const MemoryUsageEvent& usage);
  void record(TraceEntry::Action action, uintptr_t address, size_t size, StreamId stream,
              std::shared_ptr<const ContextLabels> context);
  template <typename F>
  void for_pool_stats(const BlockPool& pool, F&& f);

  mutable std::mutex mutex_;
  std::unique_ptr<DeviceAllocator> device_allocator_;
  AllocatorConfig config_;
  size_t memory_limit_ = 0;
  size_t reserved_ = 0;  // bytes held from the device (PyTorch's total_allocated_memory)
  uint64_t next_segment_id_ = 0;
  DeviceStats stats_;
  std::unique_ptr<BlockPool> large_blocks_;
  std::unique_ptr<BlockPool> small_blocks_;
  std::vector<std::unique_ptr<ExpandableSegment>> expandable_segments_;
  std::unordered_map<uintptr_t, Block*> active_blocks_;
  // Freed blocks waiting for events, per stream in the order recorded (Note [Streams and reuse]).
  std::map<StreamId, std::deque<std::pair<EventId, Block*>>> events_;
  TraceRing trace_;
  ReservedPeakState reserved_peak_;
  struct PendingPeak {
    size_t request;
    size_t added;
  };
  std::optional<PendingPeak> pending_peak_;
  // Note [An incremental peak state]: the pools' blocks and the live ones report to it.
  std::unique_ptr<PeakTracker> peak_tracker_;
};

}  // namespace headroom
