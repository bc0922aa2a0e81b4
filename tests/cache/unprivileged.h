// Runs a check as a user that file permissions apply to. Root ignores them (a chmod 0555 folder is still
// writable for root), so as root the check runs in a child process switched to the user "nobody"
// (uid/gid 65534), as `setpriv --reuid=65534 --regid=65534 --clear-groups` does; otherwise it runs in a
// child process as the current user.
#pragma once
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

namespace kt_test {

/// Runs `check` in a forked child as an unprivileged user; `check` returns "" on success or what went
/// wrong. Returns that text, or a description of how the child failed. Files the child must read need
/// to be readable by "nobody" (e.g. under the 1777 temp folder, mode 0644 / 0755).
inline std::string run_unprivileged(const std::function<std::string()>& check) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    close(fds[0]);
    std::string out;
    if (geteuid() == 0 && (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0)) {
      out = "cannot switch to uid 65534";
    } else {
      try {
        out = check();
      } catch (const std::exception& e) {
        out = std::string("unexpected exception: ") + e.what();
      }
    }
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status)) return "the unprivileged child died (signal " + std::to_string(WTERMSIG(status)) + ")";
  return out;
}

/// "" if the unprivileged user can search and read `dir` (and every folder above it), else why not: a test
/// that needs it then says so and skips (e.g. TMPDIR under /root).
inline std::string unprivileged_can_reach(const std::string& dir) {
  return run_unprivileged([&]() -> std::string {
    return access(dir.c_str(), R_OK | X_OK) == 0 ? "" : "the unprivileged user cannot reach '" + dir + "'";
  });
}

}  // namespace kt_test
