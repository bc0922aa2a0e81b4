#include "tuner/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>

#include "cuda/driver.h"
#include "cuda/nvml.h"
#include "runtime/loaded_kernel.h"
#include "tuner/session.h"
#include "tuner/timing.h"

namespace kt {
namespace {

bool write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

void reply(int fd, const nlohmann::json& j) { write_all(fd, j.dump() + "\n"); }

/// Blocking line reader for the worker side.
bool read_blocking(int fd, std::string& buf, std::string& line) {
  for (;;) {
    const size_t nl = buf.find('\n');
    if (nl != std::string::npos) {
      line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      return true;
    }
    char tmp[65536];
    ssize_t n = ::read(fd, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buf.append(tmp, size_t(n));
  }
}

nlohmann::json device_json(const db::DeviceRecord& d) {
  return {{"name", d.name},
          {"uuid", d.uuid},
          {"cc_major", d.cc_major},
          {"cc_minor", d.cc_minor},
          {"sm_count", d.sm_count},
          {"l2_bytes", d.l2_bytes},
          {"driver_version", d.driver_version},
          {"sm_clock_khz", d.sm_clock_khz},
          {"mem_clock_khz", d.mem_clock_khz}};
}

}  // namespace

db::DeviceRecord device_record(const cuda::DeviceInfo& info) {
  db::DeviceRecord d;
  d.name = info.name;
  d.uuid = info.uuid;
  d.cc_major = info.cc_major;
  d.cc_minor = info.cc_minor;
  d.sm_count = info.sm_count;
  d.l2_bytes = info.l2_bytes;
  d.driver_version = info.driver_version;
  d.sm_clock_khz = info.clock_khz;
  d.mem_clock_khz = info.mem_clock_khz;
  return d;
}

int worker_main(const std::string& db_path, int device, int in_fd, int out_fd) {
  std::string why;
  if (!cuda::gpu_available(&why)) {
    reply(out_fd, {{"type", "error"}, {"error", "no GPU found: " + why}});
    return 2;
  }
  std::unique_ptr<cuda::Context> ctx;
  std::unique_ptr<cuda::Stream> stream;
  cuda::DeviceInfo dev;
  int device_count = 0;
  std::unique_ptr<db::TuningDb> db;
  try {
    int count = 0;
    cuda::check(cuda::api().cuDeviceGetCount(&count), "cuDeviceGetCount");
    if (device < 0 || device >= count)
      throw std::runtime_error("no CUDA device " + std::to_string(device) + " (this machine has " +
                               std::to_string(count) + ")");
    ctx = std::make_unique<cuda::Context>(device);
    stream = std::make_unique<cuda::Stream>();
    dev = cuda::device_info(device);
    device_count = count;
    db = std::make_unique<db::TuningDb>(db_path, true);
  } catch (const std::exception& e) {
    reply(out_fd, {{"type", "error"}, {"error", e.what()}});
    return 2;
  }
  reply(out_fd, {{"type", "hello"}, {"device", device_json(device_record(dev))}, {"device_count", device_count}});

  std::unique_ptr<MeasureSession> session;
  std::map<std::string, std::unique_ptr<LoadedKernel>> kernels;  // by binary hash
  std::string buf, line;
  while (read_blocking(in_fd, buf, line)) {
    nlohmann::json req;
    try {
      req = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      reply(out_fd, {{"type", "error"}, {"error", std::string("bad request: ") + e.what()}});
      return 2;
    }
    const std::string cmd = req.value("cmd", "");
    if (cmd == "quit") return 0;
    if (cmd == "problem") {
      try {
        const auto t_setup = std::chrono::steady_clock::now();
        session.reset();
        session = make_session(req.at("family").get<std::string>(), req.at("problem"), req.value("seed", 1ULL),
                               req.value("ref_rows", size_t(512)), size_t(dev.l2_bytes));
        reply(out_fd,
              {{"type", "ready"},
               {"setup_ms",
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_setup).count()}});
      } catch (const std::exception& e) {
        reply(out_fd, {{"type", "error"}, {"error", std::string("problem setup failed: ") + e.what()}});
        return 3;
      }
      continue;
    }
    if (cmd != "measure" || !session) {
      reply(out_fd, {{"type", "error"}, {"error", "unexpected request '" + cmd + "'"}});
      return 2;
    }
    nlohmann::json res = {{"type", "result"}};
    try {
      const std::string hash = req.at("binary_hash").get<std::string>();
      const auto t_load = std::chrono::steady_clock::now();
      auto it = kernels.find(hash);
      if (it == kernels.end()) {
        auto bin = db->get_binary(hash);
        if (!bin) throw std::runtime_error("binary " + hash + " is not in the database");
        it = kernels
                 .emplace(hash, std::make_unique<LoadedKernel>(bin->cubin, bin->lowered_name,
                                                               unsigned(bin->dynamic_smem_bytes)))
                 .first;
      }
      res["load_ms"] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_load).count();
      const auto out = session->measure(*it->second, req.at("config"), stream->get(), req.value("budget_ms", 100.0));
      res["check_ms"] = out.check_ms;
      res["time_ms"] = out.time_ms;
      res["status"] = db::status_name(out.status);
      res["error"] = out.error;
      res["rel_err"] = out.rel_err;
      res["median_us"] = out.timing.median_us;
      res["p20_us"] = out.timing.p20_us;
      res["p80_us"] = out.timing.p80_us;
      res["samples_us"] = out.timing.samples_us;
      res["sm_clock_mhz"] = out.status == db::Status::ok ? cuda::sm_clock_mhz(dev.uuid) : -1;
      reply(out_fd, res);
    } catch (const cuda::CudaError& e) {
      // The context may be poisoned (illegal address, ...): report and let the parent start a fresh worker.
      res["status"] = "launch_failed";
      res["error"] = e.what();
      reply(out_fd, res);
      return 3;
    } catch (const std::exception& e) {
      res["status"] = "launch_failed";
      res["error"] = e.what();
      reply(out_fd, res);
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------------

WorkerPool::WorkerPool(std::vector<std::string> argv, double watchdog_s, double setup_watchdog_s)
    : argv_(std::move(argv)), watchdog_s_(watchdog_s), setup_watchdog_s_(setup_watchdog_s) {}

WorkerPool::~WorkerPool() {
  if (pid_ > 0) {
    send({{"cmd", "quit"}});
    ::close(to_worker_);
    // Give it a moment, then make sure.
    for (int i = 0; i < 50; ++i) {
      int st;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      ::usleep(20000);
    }
    if (pid_ > 0) kill_worker();
    if (from_worker_ >= 0) ::close(from_worker_);
  }
}

void WorkerPool::start() {
  int to[2], from[2];
  if (::pipe2(to, O_CLOEXEC) != 0 || ::pipe2(from, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::vector<char*> args;
  for (auto& a : argv_) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Own process group: a Ctrl-C at the terminal reaches the tuner, which decides what to keep.
    ::setpgid(0, 0);
    ::dup2(to[0], 0);
    ::dup2(from[1], 1);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(to[0]);
  ::close(from[1]);
  pid_ = pid;
  to_worker_ = to[1];
  from_worker_ = from[0];
  buffer_.clear();
  problem_sent_ = false;
  ++started_;
  std::string line;
  bool timed_out = false;
  if (!read_line(line, setup_watchdog_s_, &timed_out)) {
    const std::string how = timed_out ? "did not answer" : "exited (" + reap() + ")";
    kill_worker();
    throw std::runtime_error("autotune worker " + how + " before saying hello");
  }
  const auto j = nlohmann::json::parse(line);
  if (j.value("type", "") != "hello") {
    kill_worker();
    throw std::runtime_error(j.value("error", "autotune worker failed to start"));
  }
  device_ = j.at("device");
  device_count_ = j.value("device_count", 1);
}

db::DeviceRecord WorkerPool::device() {
  if (pid_ <= 0) start();
  db::DeviceRecord d;
  d.name = device_.at("name");
  d.uuid = device_.at("uuid");
  d.cc_major = device_.at("cc_major");
  d.cc_minor = device_.at("cc_minor");
  d.sm_count = device_.at("sm_count");
  d.l2_bytes = device_.at("l2_bytes");
  d.driver_version = device_.at("driver_version");
  d.sm_clock_khz = device_.at("sm_clock_khz");
  d.mem_clock_khz = device_.at("mem_clock_khz");
  return d;
}

bool WorkerPool::send(const nlohmann::json& j) { return to_worker_ >= 0 && write_all(to_worker_, j.dump() + "\n"); }

bool WorkerPool::read_line(std::string& line, double timeout_s, bool* timed_out) {
  *timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return true;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      *timed_out = true;
      return false;
    }
    pollfd pfd{from_worker_, POLLIN, 0};
    int r = ::poll(&pfd, 1, int(std::min<long long>(left.count(), 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char tmp[65536];
    ssize_t n = ::read(from_worker_, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // EOF: the worker died
    buffer_.append(tmp, size_t(n));
  }
}

std::string WorkerPool::reap() {
  if (pid_ <= 0) return "not running";
  int st = 0;
  ::waitpid(pid_, &st, 0);
  pid_ = -1;
  if (to_worker_ >= 0) ::close(to_worker_);
  if (from_worker_ >= 0) ::close(from_worker_);
  to_worker_ = from_worker_ = -1;
  if (WIFSIGNALED(st))
    return std::string("signal ") + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")";
  return "exit status " + std::to_string(WEXITSTATUS(st));
}

void WorkerPool::kill_worker() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    reap();
  }
}

void WorkerPool::set_problem(const nlohmann::json& problem_cmd) {
  problem_ = problem_cmd;
  problem_sent_ = false;
  if (pid_ <= 0) start();
  send(problem_);
  std::string line;
  bool timed_out = false;
  if (!read_line(line, setup_watchdog_s_, &timed_out)) {
    std::string how = timed_out ? "timed out" : "died (" + reap() + ")";
    kill_worker();
    throw std::runtime_error("problem setup in the worker " + how);
  }
  const auto j = nlohmann::json::parse(line);
  if (j.value("type", "") != "ready") {
    kill_worker();
    throw std::runtime_error(j.value("error", "problem setup failed"));
  }
  problem_sent_ = true;
  setup_ms_ += j.value("setup_ms", 0.0);
}

namespace {
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
}  // namespace

WorkerResult merge_passes(const std::vector<WorkerResult>& passes) {
  if (passes.empty()) throw std::invalid_argument("merge_passes: no passes to merge");
  const auto bad = std::find_if(passes.begin(), passes.end(), [](auto& p) { return p.status != db::Status::ok; });
  WorkerResult r = bad != passes.end() ? *bad : passes.front();
  r.load_ms = r.check_ms = r.time_ms = 0;
  for (const auto& p : passes) {
    r.load_ms += p.load_ms;
    r.check_ms += p.check_ms;
    r.time_ms += p.time_ms;
  }
  if (r.status != db::Status::ok) return r;  // the failing pass's row as it is: no times from the others
  std::vector<double> med, p20, p80, clocks;
  r.samples_us.clear();
  for (const auto& p : passes) {
    r.samples_us.insert(r.samples_us.end(), p.samples_us.begin(), p.samples_us.end());
    med.push_back(p.median_us);
    p20.push_back(p.p20_us);
    p80.push_back(p.p80_us);
    r.rel_err = std::max(r.rel_err, p.rel_err);
    if (p.sm_clock_mhz > 0) clocks.push_back(p.sm_clock_mhz);
  }
  r.median_us = median_of(med);
  r.p20_us = median_of(p20);
  r.p80_us = median_of(p80);
  double sum = 0;
  for (double c : clocks) sum += c;
  r.sm_clock_mhz = clocks.empty() ? -1 : sum / clocks.size();
  return r;
}

WorkerResult WorkerPool::measure(const nlohmann::json& measure_cmd) {
  if (pid_ <= 0 || !problem_sent_) set_problem(problem_);
  WorkerResult r;
  std::string line;
  bool timed_out = false;
  if (!send(measure_cmd) || !read_line(line, watchdog_s_, &timed_out)) {
    if (timed_out) {
      kill_worker();
      r.status = db::Status::timeout;
      r.error = "no result within the " + std::to_string(int(watchdog_s_)) + " s watchdog: worker killed";
    } else {
      r.status = db::Status::launch_failed;
      r.error = "worker died without a result (" + reap() + ")";
    }
    return r;
  }
  const auto j = nlohmann::json::parse(line);
  if (j.value("type", "") != "result") {
    kill_worker();
    r.error = j.value("error", "unexpected worker reply");
    return r;
  }
  r.status = db::parse_status(j.at("status"));
  r.error = j.value("error", "");
  r.median_us = j.value("median_us", 0.0);
  r.p20_us = j.value("p20_us", 0.0);
  r.p80_us = j.value("p80_us", 0.0);
  r.samples_us = j.value("samples_us", std::vector<double>{});
  r.rel_err = j.value("rel_err", -1.0);
  r.sm_clock_mhz = j.value("sm_clock_mhz", -1.0);
  r.load_ms = j.value("load_ms", 0.0);
  r.check_ms = j.value("check_ms", 0.0);
  r.time_ms = j.value("time_ms", 0.0);
  if (r.status == db::Status::launch_failed) {
    // The worker exits after a CUDA fault; collect it so the next measure starts a fresh one.
    std::string rest;
    bool to = false;
    if (!read_line(rest, 5.0, &to)) {
      if (to) kill_worker();
      else reap();
    }
  }
  return r;
}

}  // namespace kt
