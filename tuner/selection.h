// Winner selection, identical to the tuning database's winners view (cache/tuning_db.h).
#pragma once
#include <string>
#include <vector>

#include "cache/tuning_db.h"

namespace kt {

struct Candidate {
  std::string variant;
  db::Status status = db::Status::ok;
  double median_us = 0;
  int registers = -1;
  int smem_bytes = 0;
  bool screened = false;  ///< db::Measurement::screened: left out by the final round of its run
};

/// Index of the fastest ok candidate by median among those not screened (among every ok one when each is
/// screened); equal medians are broken by fewer registers, then less shared memory, then variant name (the
/// winners view's rule, cache/tuning_db.h). -1 if none is ok.
int pick_winner(const std::vector<Candidate>& c);

}  // namespace kt
