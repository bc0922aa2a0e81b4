#include "tuner/selection.h"

#include <functional>
#include <tuple>

namespace kt {

int pick_winner(const std::vector<Candidate>& c) {
  // Screened rows take part only when every ok row is screened (the winners view's rule).
  bool decided = false;
  for (const auto& x : c) decided = decided || (x.status == db::Status::ok && !x.screened);
  auto eligible = [&](size_t i) { return c[i].status == db::Status::ok && !(decided && c[i].screened); };
  auto key = [&](size_t j) {
    // A missing register count sorts last among equal medians, as in the SQL view.
    return std::make_tuple(c[j].median_us, c[j].registers < 0 ? 1 << 30 : c[j].registers, c[j].smem_bytes,
                           std::cref(c[j].variant));
  };
  int pick = -1;
  for (size_t i = 0; i < c.size(); ++i)
    if (eligible(i) && (pick < 0 || key(i) < key(pick))) pick = int(i);
  return pick;
}

}  // namespace kt
