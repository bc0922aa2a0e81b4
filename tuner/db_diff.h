// Comparing two tuning databases, problem by problem: the gate a team running tuning sweeps in CI needs to catch a
// kernel, driver or toolkit change that costs speed (`autotune diff OLD.db NEW.db --threshold PCT`).
#pragma once
#include <string>
#include <vector>

#include "cache/tuning_db.h"

namespace kt {
namespace tune {

/// One (device class, family, problem) of either database, with its winner in each.
struct DiffRow {
  std::string device_name, family, problem_key;
  std::string old_variant, new_variant;  ///< empty where that database has no winner for the problem
  double old_us = 0, new_us = 0;         ///< the winners' median times, microseconds (0 where absent)
  bool in_old() const { return !old_variant.empty(); }
  bool in_new() const { return !new_variant.empty(); }
  /// new / old median time (> 1: the new database's winner is slower); 0 unless both have a winner.
  double ratio() const { return in_old() && in_new() && old_us > 0 ? new_us / old_us : 0; }
};

struct DiffReport {
  std::vector<DiffRow> rows;  ///< ordered by (device class, family, problem key)
  int slower = 0;             ///< rows whose ratio exceeds 1 + threshold
  int only_old = 0;           ///< problems the old database tuned and the new one does not
  int only_new = 0;           ///< problems only the new database tuned
};

/// Compares the winners (TuningDb::winners: the fastest ok measurement per device class and problem) of two databases,
/// optionally of one family. threshold: the allowed slowdown as a fraction (0.05 = 5%); a row is slower when its
/// ratio exceeds 1 + threshold. Throws std::invalid_argument for a negative threshold.
DiffReport diff_winners(const db::TuningDb& old_db, const db::TuningDb& new_db, const std::string& family,
                        double threshold);

}  // namespace tune
}  // namespace kt
