#include "tuner/writer_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kt {

bool WriterLock::acquire(const std::string& db_path, std::string* why) {
  release();
  const std::string path = db_path + ".autotune-lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = "cannot create the writer lock " + path + ": " + std::strerror(errno);
    return false;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char owner[256] = {0};
    const ssize_t n = ::pread(fd, owner, sizeof owner - 1, 0);
    std::string who = n > 0 ? std::string(owner, size_t(n)) : std::string("another process");
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    ::close(fd);
    *why = "another autotune (" + who + ") is writing " + db_path +
           "; wait for it to finish, or tune into another --db and combine them with `autotune merge`";
    return false;
  }
  char host[128] = {0};
  gethostname(host, sizeof host - 1);
  const std::string me = "pid " + std::to_string(::getpid()) + " on " + host + "\n";
  if (::ftruncate(fd, 0) == 0) {
    const ssize_t w = ::pwrite(fd, me.data(), me.size(), 0);
    (void)w;  // the owner text only improves the message a refused writer prints
  }
  fd_ = fd;
  return true;
}

void WriterLock::release() {
  if (fd_ < 0) return;
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
  fd_ = -1;
}

}  // namespace kt
