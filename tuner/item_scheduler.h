// Which problem each GPU's measuring thread takes next (autotune --devices). A worker process keeps the host inputs of
// its last problem where the family can reuse them (qkv_proj: the quantized weight, shared by every M of one format),
// so problems of one input key are best measured by one GPU in a row; the tail of the run is still balanced.
#pragma once
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace kt {

/// Hands out the items [0, keys.size()) to `threads` threads, each item once. Items of one non-empty key form a group
/// (in order of first appearance; an empty key is a group of its own). A thread takes the next item of the group it
/// holds; when that is empty, it claims the first group no thread has claimed; when none is left, it takes the last
/// item of the group with the most items left (ties: the first group), so no thread idles while work remains.
/// With one thread the items come in index order. Thread-safe; the sequence depends only on the sequence of calls.
class ItemScheduler {
 public:
  /// Throws std::invalid_argument when threads < 1.
  ItemScheduler(const std::vector<std::string>& keys, int threads);

  /// The next item for `thread` (0 .. threads-1), or nullopt when every item has been taken. Throws
  /// std::out_of_range for a thread outside that range.
  std::optional<size_t> take(int thread);

 private:
  struct Group {
    std::vector<size_t> items;   // in index order
    size_t front = 0, back = 0;  // items[front, back) are left
    bool claimed = false;
  };
  std::vector<Group> groups_;
  std::vector<long> held_;  // per thread: the group it holds, -1 none
  size_t next_unclaimed_ = 0;
  std::mutex mu_;
};

}  // namespace kt
