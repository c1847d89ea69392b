#include "agent/process_backend.h"

#include <fcntl.h>
#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX sigset_t, kill
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace gpufed::agent {
namespace {

constexpr absl::string_view kReservedPrefix = "GPUFED_";
constexpr size_t kMaxIdLength = 128;
// How long Shutdown waits beyond the kill grace for processes stuck in uninterruptible sleep.
constexpr absl::Duration kShutdownSlack = absl::Seconds(5);

// Workload ids name log files, so they must be harmless path components.
bool IsSafeId(std::string_view id) {
  if (id.empty() || id.size() > kMaxIdLength || id.front() == '.') return false;
  for (char c : id) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

bool IsEnvName(std::string_view name) {
  return !name.empty() && name.find('=') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

// glibc 2.36's <sys/pidfd.h> lacks extern "C", so C++ cannot link its wrapper; use the syscall.
int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

std::string ErrorText(int err) { return std::error_code(err, std::system_category()).message(); }

std::string SignalText(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig);
}

// posix_spawn attributes and file actions, released on scope exit.
class SpawnSetup {
 public:
  explicit SpawnSetup(const std::string& log_path) {
    posix_spawnattr_init(&attr_);
    // Own process group, so cancel reaches grandchildren; an empty mask and default dispositions,
    // because the agent blocks SIGINT/SIGTERM for its signal thread and children inherit that.
    posix_spawnattr_setpgroup(&attr_, 0);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr_, &none);
    sigset_t all;
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    posix_spawnattr_setsigdefault(&attr_, &all);
    posix_spawnattr_setflags(
        &attr_, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

    posix_spawn_file_actions_init(&actions_);
    posix_spawn_file_actions_addopen(&actions_, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions_, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                     0640);
    posix_spawn_file_actions_adddup2(&actions_, 1, 2);
    // Nothing of the agent's (gRPC sockets, pidfds, epoll) leaks into a workload.
    posix_spawn_file_actions_addclosefrom_np(&actions_, 3);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions_);
    posix_spawnattr_destroy(&attr_);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;

  [[nodiscard]] const posix_spawnattr_t* attr() const { return &attr_; }
  [[nodiscard]] const posix_spawn_file_actions_t* actions() const { return &actions_; }

 private:
  posix_spawnattr_t attr_;
  posix_spawn_file_actions_t actions_;
};

// A NULL-terminated char* array over owned strings.
struct CStrings {
  std::vector<std::string> owned;
  std::vector<char*> ptrs;
  char* const* Get() {
    ptrs.clear();
    for (std::string& s : owned) ptrs.push_back(s.data());
    ptrs.push_back(nullptr);
    return ptrs.data();
  }
};

// This boot of the machine: process ids recorded under another boot mean nothing now.
std::string BootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

// Kills the process groups an earlier run of the backend recorded as running
// (<work_dir>/running/<id>: the boot id, then one group id per line) and forgets them. Their
// agent died without stopping them (kill -9, a crash): they must not run on beside what the
// restarted agent is told to run. Returns how many groups were signalled.
int KillOrphans(const std::filesystem::path& running) {
  const std::string boot = BootId();
  int killed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(running, ec)) {
    std::ifstream in(entry.path());
    std::string recorded_boot;
    std::getline(in, recorded_boot);
    pid_t pgid = 0;
    while (in >> pgid) {
      if (pgid > 1 && !boot.empty() && recorded_boot == boot && kill(-pgid, SIGKILL) == 0) {
        ++killed;
      }
    }
    in.close();
    std::filesystem::remove(entry.path(), ec);
  }
  return killed;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessBackend>> ProcessBackend::Create(
    ProcessBackendOptions options, EventCallback callback) {
  if (!callback) return absl::InvalidArgumentError("process backend: callback is required");
  if (options.kill_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("kill_grace: must not be negative");
  }
  if (!options.work_dir.empty()) {
    std::error_code ec;
    const std::filesystem::path logs = std::filesystem::path(options.work_dir) / "logs";
    std::filesystem::create_directories(logs, ec);
    if (ec || !std::filesystem::is_directory(logs)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "work dir: cannot create ", logs.string(), ": ", ec ? ec.message() : "not a directory"));
    }
    const std::filesystem::path running = std::filesystem::path(options.work_dir) / "running";
    std::filesystem::create_directories(running, ec);
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("work dir: cannot create ", running.string(), ": ", ec.message()));
    }
    if (const int killed = KillOrphans(running); killed > 0) {
      spdlog::warn("process backend: killed {} process group(s) an earlier agent left running",
                   killed);
    }
  }
  const int probe = PidfdOpen(getpid());
  if (probe < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("process backend needs pidfd_open (Linux >= 5.3): ", ErrorText(errno)));
  }
  close(probe);

  // One pidfd per running replica: lift the soft descriptor limit to the hard one so a few
  // thousand concurrent replicas do not hit the usual 1024.
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }

  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) return absl::InternalError(absl::StrCat("epoll_create1: ", ErrorText(errno)));
  const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    close(epoll_fd);
    return absl::InternalError(absl::StrCat("eventfd: ", ErrorText(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd;
  if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &ev) != 0) {
    const int err = errno;
    close(wake_fd);
    close(epoll_fd);
    return absl::InternalError(absl::StrCat("epoll_ctl: ", ErrorText(err)));
  }

  std::map<std::string, std::string> base_env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    absl::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == absl::string_view::npos || absl::StartsWith(entry, kReservedPrefix)) continue;
    base_env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return std::unique_ptr<ProcessBackend>(new ProcessBackend(
      std::move(options), std::move(callback), std::move(base_env), epoll_fd, wake_fd));
}

ProcessBackend::ProcessBackend(ProcessBackendOptions options, EventCallback callback,
                               std::map<std::string, std::string> base_env, int epoll_fd,
                               int wake_fd)
    : options_(std::move(options)),
      clock_(*ClockOrSystem(options_.clock)),
      callback_(std::move(callback)),
      base_env_(std::move(base_env)),
      epoll_fd_(epoll_fd),
      wake_fd_(wake_fd) {
  if (!options_.work_dir.empty()) {
    // Logs an earlier run left, oldest first, count towards max_logs.
    std::vector<std::pair<std::filesystem::file_time_type, std::string>> found;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(
             std::filesystem::path(options_.work_dir) / "logs", ec)) {
      if (entry.is_regular_file(ec)) found.emplace_back(entry.last_write_time(ec), entry.path());
    }
    std::sort(found.begin(), found.end());
    absl::MutexLock lock(&mu_);
    for (auto& [time, path] : found) ended_logs_.push_back(std::move(path));
  }
  thread_ = std::thread([this] { Loop(); });
}

ProcessBackend::~ProcessBackend() { Shutdown(); }

std::string ProcessBackend::RunningPath(std::string_view workload_id) const {
  return (std::filesystem::path(options_.work_dir) / "running" / std::string(workload_id)).string();
}

std::string ProcessBackend::LogPath(std::string_view workload_id) const {
  if (options_.work_dir.empty()) return "/dev/null";
  return (std::filesystem::path(options_.work_dir) / "logs" /
          absl::StrCat(std::string(workload_id), ".log"))
      .string();
}

absl::Status ProcessBackend::Start(const v1::WorkAssignment& work) {
  const std::string& id = work.workload_id();
  if (!IsSafeId(id)) {
    return absl::InvalidArgumentError(
        "workload_id: must be 1..128 characters of [A-Za-z0-9._-], not starting with '.'");
  }
  const v1::RunSpec& run = work.spec().run();
  if (run.command().empty()) {
    return absl::InvalidArgumentError("spec.run.command: required by the process backend");
  }
  CStrings argv;
  if (run.command_size() == 1) {
    argv.owned = {"/bin/sh", "-c", run.command(0)};
  } else {
    argv.owned.assign(run.command().begin(), run.command().end());
  }
  for (const std::string& arg : argv.owned) {
    if (arg.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError("spec.run.command: must not contain NUL characters");
    }
  }
  if (argv.owned.front().empty()) {
    return absl::InvalidArgumentError("spec.run.command[0]: must not be empty");
  }
  std::map<std::string, std::string> env = base_env_;
  for (const auto& [name, value] : run.env()) {
    if (!IsEnvName(name)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("spec.run.env: invalid variable name \"%s\"", name));
    }
    if (value.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrFormat("spec.run.env.%s: must not contain NUL characters", name));
    }
    env[name] = value;
  }
  const auto& replicas = work.assignment().replicas();
  if (replicas.empty()) {
    return absl::InvalidArgumentError("assignment.replicas: at least one replica is required");
  }

  Workload* w = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::FailedPreconditionError("process backend: shutting down");
    auto [it, inserted] = active_.try_emplace(id, nullptr);
    if (!inserted) return absl::AlreadyExistsError(absl::StrCat("workload ", id, " is active"));
    it->second = std::make_unique<Workload>();
    w = it->second.get();
    w->id = id;
  }

  // Spawn without the lock: the reaper keeps serving other workloads meanwhile, and it cannot
  // see these children before they are attached below (an early exit just waits as a zombie).
  // posix_spawn (vfork-style in glibc) is safe in a threaded process and far cheaper than fork.
  SpawnSetup setup(LogPath(id));
  std::vector<Replica> spawned;
  int spawn_error = 0;
  std::string spawn_message;
  for (int r = 0; r < replicas.size(); ++r) {
    const v1::ReplicaAssignment& ra = replicas[r];
    std::map<std::string, std::string> replica_env = env;
    // Placement decides the devices; the spec cannot override them or the identity variables.
    replica_env["CUDA_VISIBLE_DEVICES"] = !ra.gpu_indices().empty()
                                              ? absl::StrJoin(ra.gpu_indices(), ",")
                                              : absl::StrJoin(ra.gpu_uuids(), ",");
    replica_env["GPUFED_WORKLOAD_ID"] = id;
    replica_env["GPUFED_REPLICA_INDEX"] = absl::StrCat(r);
    replica_env["GPUFED_REPLICA_COUNT"] = absl::StrCat(replicas.size());
    replica_env["GPUFED_NODE"] = ra.node();
    // Part of a GPU: the share, or the MIG instance. CUDA_VISIBLE_DEVICES stays the GPU index;
    // a backend on real GPUs would hand the replica the MIG device's UUID instead.
    for (const char* name : {"GPUFED_GPU_MILLI", "GPUFED_MIG_PROFILE", "GPUFED_MIG_START"}) {
      replica_env.erase(name);
    }
    if (!ra.mig_profile().empty()) {
      replica_env["GPUFED_MIG_PROFILE"] = ra.mig_profile();
      replica_env["GPUFED_MIG_START"] = absl::StrCat(ra.mig_start());
    } else if (ra.gpu_milli() > 0) {
      replica_env["GPUFED_GPU_MILLI"] = absl::StrCat(ra.gpu_milli());
    }
    CStrings envp;
    envp.owned.reserve(replica_env.size());
    for (const auto& [name, value] : replica_env)
      envp.owned.push_back(absl::StrCat(name, "=", value));

    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, argv.owned.front().c_str(), setup.actions(), setup.attr(),
                                argv.Get(), envp.Get());
    if (rc != 0) {
      spawn_error = rc;
      spawn_message =
          absl::StrFormat("replica %d: cannot start %s: %s", r, argv.owned.front(), ErrorText(rc));
      break;
    }
    const int pidfd = PidfdOpen(pid);
    if (pidfd < 0) {
      spawn_error = errno;
      spawn_message = absl::StrFormat("replica %d: pidfd_open: %s", r, ErrorText(spawn_error));
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      break;
    }
    spawned.push_back({pid, pidfd, false});
  }

  if (!options_.work_dir.empty() && !spawned.empty()) {
    // Every replica leads its process group: if the agent dies, its successor kills them.
    std::ofstream record(RunningPath(id), std::ios::trunc);
    record << BootId() << "\n";
    for (const Replica& rep : spawned) record << rep.pid << "\n";
  }

  absl::MutexLock lock(&mu_);
  const absl::Time now = AbslNow(clock_);
  w->replicas = std::move(spawned);
  w->attached = true;
  for (size_t r = 0; r < w->replicas.size(); ++r) {
    Replica& rep = w->replicas[r];
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = rep.pidfd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, rep.pidfd, &ev) != 0) {
      // Cannot watch it, so do not leave it running: kill and reap it here.
      if (spawn_error == 0) {
        spawn_error = errno;
        spawn_message = absl::StrFormat("replica %d: epoll_ctl: %s", r, ErrorText(spawn_error));
      }
      kill(-rep.pid, SIGKILL);
      waitpid(rep.pid, nullptr, 0);
      close(rep.pidfd);
      rep.pidfd = -1;
      rep.done = true;
      continue;
    }
    by_pidfd_[rep.pidfd] = {w, r};
    ++w->live;
  }
  if (spawn_error != 0) {
    w->failed = true;
    w->exit_code = spawn_error == ENOENT ? 127 : 126;  // the shell's convention
    w->message = spawn_message;
    Signal(*w, SIGKILL);
    w->killed = true;
    MaybeFinish(*w, now);  // may destroy *w
  } else if (stopping_) {
    Signal(*w, SIGKILL);
    w->killed = true;
  } else {
    ready_.push_back({id, v1::WORKLOAD_STATE_RUNNING, 0,
                      absl::StrFormat("%d replica(s) started", replicas.size()), now});
    if (w->cancel_requested) Terminate(*w, now);
  }
  Wake();
  return absl::OkStatus();
}

absl::Status ProcessBackend::Cancel(std::string_view id_view) {
  const std::string workload_id(id_view);
  absl::MutexLock lock(&mu_);
  auto it = active_.find(workload_id);
  if (it == active_.end()) {
    return absl::NotFoundError(absl::StrCat("workload ", workload_id, " is not active"));
  }
  Workload& w = *it->second;
  // A gang already failing keeps FAILED: that is the state it reached first.
  if (w.cancel_requested || w.failed) return absl::OkStatus();
  w.cancel_requested = true;
  if (w.attached) Terminate(w, AbslNow(clock_));  // else Start terminates it once spawned
  Wake();
  return absl::OkStatus();
}

size_t ProcessBackend::Active() const {
  absl::MutexLock lock(&mu_);
  return active_.size();
}

void ProcessBackend::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      stopped_.store(true);
      ready_.clear();
      const absl::Time now = AbslNow(clock_);
      for (auto& [id, w] : active_) {
        w->cancel_requested = true;
        if (w->attached && !w->killed && !terminating_.contains(w.get())) Terminate(*w, now);
      }
      Wake();
      const absl::Time give_up = now + options_.kill_grace + kShutdownSlack;
      while (!active_.empty()) {
        if (WaitUntil(idle_, &mu_, clock_, give_up)) break;
      }
      if (!active_.empty()) {
        spdlog::warn("process backend: {} workload(s) did not exit after SIGKILL; leaving them",
                     active_.size());
      }
      exit_loop_ = true;
      Wake();
    }
    thread_.join();
    absl::MutexLock lock(&mu_);
    for (const auto& [fd, where] : by_pidfd_) close(fd);
    by_pidfd_.clear();
    close(wake_fd_);
    close(epoll_fd_);
  });
}

void ProcessBackend::Wake() {
  const uint64_t one = 1;
  // EAGAIN means the counter is already non-zero: the loop wakes anyway.
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void ProcessBackend::Signal(Workload& w, int sig) {
  for (const Replica& rep : w.replicas) {
    // The leader is alive or an unreaped zombie, so its pid still names this group.
    if (!rep.done) kill(-rep.pid, sig);
  }
}

void ProcessBackend::Terminate(Workload& w, absl::Time now) {
  if (options_.kill_grace <= absl::ZeroDuration()) {
    Signal(w, SIGKILL);
    w.killed = true;
    return;
  }
  Signal(w, SIGTERM);
  w.kill_deadline = now + options_.kill_grace;
  terminating_.insert(&w);
}

void ProcessBackend::MaybeFinish(Workload& w, absl::Time now) {
  if (!w.attached || w.live > 0) return;
  if (!stopping_) {
    WorkloadEvent event{w.id, v1::WORKLOAD_STATE_SUCCEEDED, 0, "all replicas exited with code 0",
                        now};
    if (w.failed) {
      event.state = v1::WORKLOAD_STATE_FAILED;
      event.exit_code = w.exit_code;
      event.message = w.message;
    } else if (w.cancel_requested) {
      event.state = v1::WORKLOAD_STATE_CANCELLED;
      event.message = w.killed ? "cancelled; killed after the grace period" : "cancelled";
    }
    ready_.push_back(std::move(event));
  }
  if (!options_.work_dir.empty()) {
    std::error_code gone;  // never written when nothing was spawned
    std::filesystem::remove(RunningPath(w.id), gone);
    ended_logs_.push_back(LogPath(w.id));
    while (options_.max_logs > 0 && ended_logs_.size() > options_.max_logs) {
      std::error_code ec;  // already gone: nothing to do
      std::filesystem::remove(ended_logs_.front(), ec);
      ended_logs_.pop_front();
    }
  }
  terminating_.erase(&w);
  active_.erase(w.id);  // destroys w
  if (active_.empty()) idle_.SignalAll();
}

void ProcessBackend::HandleExit(int pidfd) {
  auto it = by_pidfd_.find(pidfd);
  if (it == by_pidfd_.end()) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, pidfd, nullptr);
    return;
  }
  Workload& w = *it->second.first;
  const size_t r = it->second.second;
  Replica& rep = w.replicas[r];

  // Look without reaping: while the zombie stays, its pid cannot be reused, so signalling the
  // group below cannot hit an unrelated process.
  siginfo_t info{};
  int code = 0;
  std::string what;
  if (waitid(P_PID, rep.pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno != ECHILD) return;
    code = 255;
    what = absl::StrFormat("replica %d: exit status lost (reaped elsewhere)", r);
  } else if (info.si_pid == 0) {
    return;  // not exited yet
  } else if (info.si_code == CLD_EXITED) {
    code = info.si_status;
    what = absl::StrFormat("replica %d exited with code %d", r, code);
  } else {
    code = 128 + info.si_status;
    what = absl::StrFormat("replica %d killed by %s", r, SignalText(info.si_status));
  }
  // The replica is over once its main process is: sweep what it left in its group.
  kill(-rep.pid, SIGKILL);
  waitpid(rep.pid, nullptr, WNOHANG);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, pidfd, nullptr);
  close(pidfd);
  by_pidfd_.erase(it);
  rep.pidfd = -1;
  rep.done = true;
  --w.live;

  const absl::Time now = AbslNow(clock_);
  if (code != 0 && !w.failed && !w.cancel_requested && !stopping_) {
    w.failed = true;
    w.exit_code = code;
    w.message = what;
    if (w.live > 0) Terminate(w, now);
  }
  MaybeFinish(w, now);
}

void ProcessBackend::Loop() {
  std::vector<epoll_event> events(256);
  std::vector<WorkloadEvent> due;
  while (true) {
    int timeout_ms = -1;
    {
      absl::MutexLock lock(&mu_);
      if (exit_loop_) return;
      absl::Time next = absl::InfiniteFuture();
      for (const Workload* w : terminating_) {
        if (!w->killed) next = std::min(next, w->kill_deadline);
      }
      if (next != absl::InfiniteFuture()) {
        const absl::Duration left = std::max(next - AbslNow(clock_), absl::ZeroDuration());
        timeout_ms = static_cast<int>(std::min<int64_t>(
            absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))), INT_MAX));
      }
    }
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout_ms);
    if (n < 0 && errno != EINTR) {
      spdlog::error("process backend: epoll_wait: {}", ErrorText(errno));
      absl::SleepFor(absl::Milliseconds(10));  // keep a broken epoll from spinning a core
    }
    {
      absl::MutexLock lock(&mu_);
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == wake_fd_) {
          uint64_t value = 0;
          [[maybe_unused]] ssize_t got = read(wake_fd_, &value, sizeof(value));
        } else {
          HandleExit(fd);
        }
      }
      const absl::Time now = AbslNow(clock_);
      std::vector<Workload*> overdue;
      for (Workload* w : terminating_) {
        if (!w->killed && w->kill_deadline <= now) overdue.push_back(w);
      }
      for (Workload* w : overdue) {
        Signal(*w, SIGKILL);
        w->killed = true;
        terminating_.erase(w);
      }
      due.swap(ready_);
    }
    // Deliver without the lock: the callback may take the agent's locks or call back in.
    for (WorkloadEvent& event : due) {
      if (stopped_.load()) break;
      callback_(std::move(event));
    }
    due.clear();
  }
}

}  // namespace gpufed::agent
