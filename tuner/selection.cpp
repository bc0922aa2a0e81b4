#include "tuner/selection.h"

#include <tuple>

namespace kt {

int pick_winner(const std::vector<Candidate>& c) {
  // Screened rows take part only when every ok row is screened (the winners view's rule).
  bool decided = false;
  for (const auto& x : c) decided = decided || (x.status == db::Status::ok && !x.screened);
  auto eligible = [&](size_t i) { return c[i].status == db::Status::ok && !(decided && c[i].screened); };
  int best = -1;
  for (size_t i = 0; i < c.size(); ++i)
    if (eligible(i) && (best < 0 || c[i].median_us < c[best].median_us)) best = int(i);
  if (best < 0) return -1;
  const double limit = c[best].median_us * 1.01;
  int pick = best;
  auto key = [&](size_t j) {
    // A missing register count sorts last, as in the SQL view.
    return std::make_tuple(c[j].registers < 0 ? 1 << 30 : c[j].registers, c[j].smem_bytes, c[j].variant);
  };
  for (size_t i = 0; i < c.size(); ++i)
    if (eligible(i) && c[i].median_us <= limit && key(i) < key(pick)) pick = int(i);
  return pick;
}

}  // namespace kt
