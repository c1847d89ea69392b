#include "agent/gpu_health.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX kill
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "spdlog/spdlog.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX, for posix_spawn

namespace gpufed::agent {
namespace {

// nvidia-smi's column names, as --query-gpu takes them.
constexpr absl::string_view kUuid = "uuid";
constexpr absl::string_view kPciBus = "pci.bus_id";

// A column whose non-zero count fails the GPU, and a column whose "Yes" does.
constexpr absl::string_view kCountColumns[] = {
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
    "remapped_rows.uncorrectable",
};
constexpr absl::string_view kYesColumns[] = {
    "remapped_rows.pending",
    "remapped_rows.failure",
    "retired_pages.pending",
};

// "name [MiB]" (a header without nounits) → "name".
std::string ColumnName(absl::string_view header_field) {
  absl::string_view name = absl::StripAsciiWhitespace(header_field);
  if (size_t unit = name.find(" ["); unit != absl::string_view::npos) name = name.substr(0, unit);
  return absl::AsciiStrToLower(name);
}

// The value nvidia-smi prints for a GPU it cannot read.
bool IsErrorValue(absl::string_view value) {
  if (value == "ERR!") return true;
  if (!absl::StartsWith(value, "[")) return false;
  const std::string lower = absl::AsciiStrToLower(value);
  return absl::StrContains(lower, "error") || absl::StrContains(lower, "requires reset");
}

// Why a row shows its GPU failed; empty when it does not.
std::string RowProblem(const std::vector<std::string>& columns,
                       const std::vector<absl::string_view>& values) {
  for (size_t i = 0; i < columns.size(); ++i) {
    const absl::string_view value = values[i];
    if (IsErrorValue(value)) return absl::StrCat(columns[i], ": ", value);
    for (absl::string_view c : kCountColumns) {
      uint64_t n = 0;
      if (columns[i] == c && absl::SimpleAtoi(value, &n) && n > 0) {
        return absl::StrCat(columns[i], ": ", n);
      }
    }
    for (absl::string_view c : kYesColumns) {
      if (columns[i] == c && absl::EqualsIgnoreCase(value, "yes")) {
        return absl::StrCat(columns[i], ": Yes");
      }
    }
  }
  return "";
}

// "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, ..." → the XID; nullopt for any other line.
std::optional<XidEvent> ParseXidLine(absl::string_view line) {
  constexpr absl::string_view kMarker = "NVRM: Xid (PCI:";
  const size_t at = line.find(kMarker);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view rest = line.substr(at + kMarker.size());
  const size_t close = rest.find(')');
  if (close == absl::string_view::npos) return std::nullopt;
  XidEvent event;
  event.pci_bus = NormalizePciBus(rest.substr(0, close));
  rest = rest.substr(close + 1);
  if (!absl::ConsumePrefix(&rest, ":")) return std::nullopt;
  rest = absl::StripLeadingAsciiWhitespace(rest);
  const size_t end = rest.find_first_not_of("0123456789");
  if (!absl::SimpleAtoi(rest.substr(0, end), &event.xid)) return std::nullopt;
  return event;
}

std::string XidReason(int xid) {
  switch (xid) {
    case 48:
      return "Xid 48 (double-bit ECC error)";
    case 74:
      return "Xid 74 (NVLink error)";
    case 79:
      return "Xid 79 (GPU has fallen off the bus)";
    case 95:
      return "Xid 95 (uncontained memory error)";
    default:
      return absl::StrCat("Xid ", xid, " (NVIDIA: reset the GPU or drain)");
  }
}

}  // namespace

std::string NormalizePciBus(absl::string_view bus) {
  // [domain:]bus:device[.function]
  std::vector<absl::string_view> parts = absl::StrSplit(absl::StripAsciiWhitespace(bus), ':');
  if (parts.size() < 2) return absl::AsciiStrToLower(bus);
  absl::string_view device = parts.back();
  device = device.substr(0, device.find('.'));
  const absl::string_view bus_part = parts[parts.size() - 2];
  absl::string_view domain = parts.size() >= 3 ? parts[parts.size() - 3] : "0000";
  while (domain.size() > 4 && domain.front() == '0') domain.remove_prefix(1);
  return absl::AsciiStrToLower(
      absl::StrCat(std::string(4 - std::min<size_t>(4, domain.size()), '0'), domain, ":", bus_part,
                   ":", device));
}

absl::StatusOr<GpuProbe> ParseGpuProbe(absl::string_view output) {
  GpuProbe probe;
  std::vector<std::string> columns;
  int uuid_column = -1;
  int bus_column = -1;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    if (absl::StrContains(line, "NVRM:")) {
      if (std::optional<XidEvent> xid = ParseXidLine(line)) probe.xids.push_back(*xid);
      continue;
    }
    std::vector<absl::string_view> fields = absl::StrSplit(line, ',');
    for (absl::string_view& f : fields) f = absl::StripAsciiWhitespace(f);
    if (uuid_column < 0) {
      // Before the header: nvidia-smi's own messages. The header names a `uuid` column.
      std::vector<std::string> names;
      names.reserve(fields.size());
      for (absl::string_view f : fields) names.push_back(ColumnName(f));
      for (size_t i = 0; i < names.size(); ++i) {
        if (names[i] == kUuid) uuid_column = static_cast<int>(i);
        if (names[i] == kPciBus) bus_column = static_cast<int>(i);
      }
      if (uuid_column >= 0) columns = std::move(names);
      continue;
    }
    // Anything else (a warning, a GPU nvidia-smi could not open) is not a row.
    if (fields.size() != columns.size()) continue;
    ProbedGpu gpu;
    gpu.uuid = std::string(fields[uuid_column]);
    if (bus_column >= 0) gpu.pci_bus = NormalizePciBus(fields[bus_column]);
    gpu.problem = RowProblem(columns, fields);
    probe.gpus.push_back(std::move(gpu));
  }
  if (uuid_column < 0) {
    return absl::InvalidArgumentError(
        "probe output: no CSV header with a uuid column (nvidia-smi --query-gpu=uuid,... "
        "--format=csv)");
  }
  return probe;
}

bool XidCallsForDrain(int xid) {
  switch (xid) {
    case 46:
    case 48:
    case 62:
    case 64:
    case 74:
    case 79:
    case 95:
    case 109:
    case 110:
    case 119:
    case 120:
    case 136:
    case 140:
    case 143:
    case 151:
    case 155:
    case 156:
    case 158:
      return true;
    default:
      return xid >= 144 && xid <= 150;  // NVLink 5 errors
  }
}

absl::flat_hash_map<std::string, std::string> FailedGpus(const GpuProbe& probe,
                                                         const v1::Inventory& inventory) {
  absl::flat_hash_map<std::string, const ProbedGpu*> listed;
  absl::flat_hash_map<std::string, std::string> by_bus;
  for (const ProbedGpu& g : probe.gpus) {
    listed[g.uuid] = &g;
    if (!g.pci_bus.empty()) by_bus[g.pci_bus] = g.uuid;
  }
  absl::flat_hash_map<std::string, std::string> failed;
  for (const XidEvent& x : probe.xids) {
    if (!XidCallsForDrain(x.xid)) continue;
    auto uuid = by_bus.find(x.pci_bus);
    if (uuid != by_bus.end()) failed.try_emplace(uuid->second, XidReason(x.xid));
  }
  for (const v1::Node& node : inventory.nodes()) {
    bool reached = false;
    for (const v1::Gpu& gpu : node.gpus()) reached = reached || listed.contains(gpu.uuid());
    if (!reached) continue;
    for (const v1::Gpu& gpu : node.gpus()) {
      auto row = listed.find(gpu.uuid());
      if (row == listed.end()) {
        failed.try_emplace(gpu.uuid(), "not listed by the probe (fallen off the bus?)");
      } else if (!row->second->problem.empty()) {
        failed.try_emplace(gpu.uuid(), row->second->problem);
      }
    }
  }
  // Only the inventory's GPUs: the probe may see GPUs this cluster does not offer.
  absl::flat_hash_set<std::string> known;
  for (const v1::Node& node : inventory.nodes()) {
    for (const v1::Gpu& gpu : node.gpus()) known.insert(gpu.uuid());
  }
  absl::erase_if(failed, [&](const auto& entry) { return !known.contains(entry.first); });
  return failed;
}

absl::StatusOr<std::string> RunProbeCommand(const std::string& command,
                                            std::chrono::milliseconds timeout, size_t max_bytes) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return absl::InternalError("probe: pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // A group of its own, so a timeout kills whatever the shell started; signals unblocked (the
  // agent blocks its stop signals in every thread).
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  std::string shell = "/bin/sh", dash_c = "-c", cmd = command;
  char* argv[] = {shell.data(), dash_c.data(), cmd.data(), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(pipe_fds[1]);
  if (spawned != 0) {
    close(pipe_fds[0]);
    return absl::InternalError(absl::StrCat("probe: cannot start /bin/sh: errno ", spawned));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string out;
  absl::Status status = absl::OkStatus();
  char buf[8192];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      status = absl::DeadlineExceededError(
          absl::StrCat("probe: no end after ", timeout.count(), " ms; killed"));
      break;
    }
    pollfd p{pipe_fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;  // the deadline check above ends it
    const ssize_t n = read(pipe_fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the command closed its output
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      status = absl::ResourceExhaustedError(
          absl::StrCat("probe: more than ", max_bytes, " bytes of output; killed"));
      break;
    }
  }
  close(pipe_fds[0]);
  // A command that closed its output may still run: it gets what is left of the timeout.
  int wstatus = 0;
  while (status.ok()) {
    const pid_t done = waitpid(pid, &wstatus, WNOHANG);
    if (done == pid || (done < 0 && errno != EINTR)) return out;
    if (std::chrono::steady_clock::now() >= deadline) {
      status = absl::DeadlineExceededError(
          absl::StrCat("probe: no end after ", timeout.count(), " ms; killed"));
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(-pid, SIGKILL);
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  return status;
}

GpuHealthMonitor::GpuHealthMonitor(Options options, v1::Inventory inventory, Report report)
    : options_(std::move(options)), report_(std::move(report)), inventory_(std::move(inventory)) {}

GpuHealthMonitor::~GpuHealthMonitor() { Stop(); }

void GpuHealthMonitor::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void GpuHealthMonitor::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void GpuHealthMonitor::Reset(v1::Inventory inventory) {
  absl::MutexLock report_lock(&report_mu_);
  {
    absl::MutexLock lock(&mu_);
    inventory_ = inventory;
    failed_.clear();
  }
  report_(std::move(inventory));
}

absl::StatusOr<absl::flat_hash_map<std::string, std::string>> GpuHealthMonitor::ProbeOnce() {
  absl::StatusOr<std::string> output = RunProbeCommand(options_.command, options_.timeout);
  if (!output.ok()) return output.status();
  absl::StatusOr<GpuProbe> probe = ParseGpuProbe(*output);
  if (!probe.ok()) return probe.status();
  absl::MutexLock report_lock(&report_mu_);
  absl::flat_hash_map<std::string, std::string> fresh;
  v1::Inventory report;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [uuid, why] : FailedGpus(*probe, inventory_)) {
      if (failed_.try_emplace(uuid, why).second) fresh.emplace(uuid, why);
    }
    if (fresh.empty()) return fresh;
    for (v1::Node& node : *inventory_.mutable_nodes()) {
      for (v1::Gpu& gpu : *node.mutable_gpus()) {
        if (failed_.contains(gpu.uuid())) gpu.set_healthy(false);
      }
    }
    report = inventory_;
  }
  for (const auto& [uuid, why] : fresh) spdlog::error("GPU {} failed: {}", uuid, why);
  report_(std::move(report));
  return fresh;
}

void GpuHealthMonitor::Loop() {
  for (;;) {
    absl::StatusOr<absl::flat_hash_map<std::string, std::string>> probed = ProbeOnce();
    if (!probed.ok()) {
      spdlog::warn("GPU health probe: {}; nothing changed", probed.status().ToString());
    }
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(options_.interval));
    if (stopping_) return;
  }
}

}  // namespace gpufed::agent
