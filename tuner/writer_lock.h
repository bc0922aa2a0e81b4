// One tuning run per database file: a second `autotune` writing the same database would measure everything the first
// has not finished (both see the same rows missing), so the second is refused.
#pragma once
#include <string>

namespace kt {

/// An exclusive advisory lock (flock) on "<db>.autotune-lock" beside a tuning database, held until release() or
/// destruction (or the process's exit: the kernel drops it, so a killed run leaves no stale lock). The lock file
/// holds the owner's pid and host for the refusal message; it stays on disk. flock does not work across hosts on
/// network file systems, where one SQLite file must not be shared anyway (README).
class WriterLock {
 public:
  WriterLock() = default;
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;
  ~WriterLock() { release(); }

  /// Takes the lock for database `db_path`. Returns false, with the reason in *why (the owner's pid and host when the
  /// lock file names them), when another process holds it or the lock file cannot be created.
  bool acquire(const std::string& db_path, std::string* why);
  void release();

 private:
  int fd_ = -1;
};

}  // namespace kt
