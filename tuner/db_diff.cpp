#include "tuner/db_diff.h"

#include <map>
#include <stdexcept>
#include <tuple>

namespace kt {
namespace tune {

DiffReport diff_winners(const db::TuningDb& old_db, const db::TuningDb& new_db, const std::string& family,
                        double threshold) {
  if (!(threshold >= 0)) throw std::invalid_argument("threshold must be >= 0, got " + std::to_string(threshold));
  std::map<std::tuple<std::string, std::string, std::string>, DiffRow> rows;
  for (const auto& w : old_db.winners("", family)) {
    DiffRow& r = rows[{w.device_name, w.family, w.problem_key}];
    r.device_name = w.device_name, r.family = w.family, r.problem_key = w.problem_key;
    r.old_variant = w.variant_name, r.old_us = w.median_us;
  }
  for (const auto& w : new_db.winners("", family)) {
    DiffRow& r = rows[{w.device_name, w.family, w.problem_key}];
    r.device_name = w.device_name, r.family = w.family, r.problem_key = w.problem_key;
    r.new_variant = w.variant_name, r.new_us = w.median_us;
  }
  DiffReport rep;
  for (auto& [key, r] : rows) {
    if (!r.in_new()) ++rep.only_old;
    else if (!r.in_old()) ++rep.only_new;
    else if (r.ratio() > 1 + threshold) ++rep.slower;
    rep.rows.push_back(std::move(r));
  }
  return rep;
}

}  // namespace tune
}  // namespace kt
