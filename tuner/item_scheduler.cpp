#include "tuner/item_scheduler.h"

#include <map>
#include <stdexcept>

namespace kt {

ItemScheduler::ItemScheduler(const std::vector<std::string>& keys, int threads) {
  if (threads < 1) throw std::invalid_argument("ItemScheduler: threads must be >= 1, got " + std::to_string(threads));
  held_.assign(size_t(threads), -1);
  if (threads == 1) {  // index order: one group of everything
    Group g;
    for (size_t i = 0; i < keys.size(); ++i) g.items.push_back(i);
    g.back = g.items.size();
    groups_.push_back(std::move(g));
    return;
  }
  std::map<std::string, size_t> group_of;
  for (size_t i = 0; i < keys.size(); ++i) {
    size_t gi = groups_.size();
    if (!keys[i].empty()) {
      const auto [it, added] = group_of.emplace(keys[i], groups_.size());
      gi = it->second;
      if (!added) {
        groups_[gi].items.push_back(i);
        ++groups_[gi].back;
        continue;
      }
    }
    Group g;
    g.items.push_back(i);
    g.back = 1;
    groups_.push_back(std::move(g));
  }
}

std::optional<size_t> ItemScheduler::take(int thread) {
  if (thread < 0 || size_t(thread) >= held_.size())
    throw std::out_of_range("ItemScheduler::take: thread " + std::to_string(thread) + " of " +
                            std::to_string(held_.size()));
  std::lock_guard<std::mutex> lock(mu_);
  long& held = held_[size_t(thread)];
  if (held >= 0 && groups_[size_t(held)].front < groups_[size_t(held)].back)
    return groups_[size_t(held)].items[groups_[size_t(held)].front++];
  while (next_unclaimed_ < groups_.size() &&
         (groups_[next_unclaimed_].claimed || groups_[next_unclaimed_].front == groups_[next_unclaimed_].back))
    ++next_unclaimed_;
  if (next_unclaimed_ < groups_.size()) {
    held = long(next_unclaimed_);
    Group& g = groups_[next_unclaimed_];
    g.claimed = true;
    return g.items[g.front++];
  }
  // Every group claimed: take from the back of the largest remainder (its holder keeps the front; the thread holds
  // nothing, so its next call looks again).
  held = -1;
  long best = -1;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const size_t left = groups_[gi].back - groups_[gi].front;
    if (left > 0 && (best < 0 || left > groups_[size_t(best)].back - groups_[size_t(best)].front)) best = long(gi);
  }
  if (best < 0) return std::nullopt;
  return groups_[size_t(best)].items[--groups_[size_t(best)].back];
}

}  // namespace kt
