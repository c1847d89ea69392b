#include "agent/ledger.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <limits>
#include <system_error>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"

namespace gpufed::agent {
namespace {

// Past this many lines for each live entry (and a floor), the file is rewritten.
constexpr uint64_t kCompactFloor = 4096;
constexpr uint64_t kLinesPerLive = 4;

std::string Key(const std::string& id, uint32_t attempt) { return absl::StrCat(id, " ", attempt); }

// Only the server's workload ids (the canonical decimal spelling of 1..2^63-1) are kept: the
// server refuses a registration that reports anything else, so a ledger holding one would keep
// the agent from ever registering again.
bool Writable(const std::string& id) {
  uint64_t n = 0;
  return !id.empty() && id.size() <= 19 && id[0] != '0' &&
         id.find_first_not_of("0123456789") == std::string::npos && absl::SimpleAtoi(id, &n) &&
         n <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

int OpenAppend(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Ledger>> Ledger::Open(const std::string& dir,
                                                     std::vector<Entry>* unfinished) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("state dir: cannot create ", dir, ": ", ec.message()));
  }
  const std::string path = (std::filesystem::path(dir) / "ledger").string();
  std::ifstream in(path);
  absl::flat_hash_map<std::string, std::pair<uint64_t, Entry>> live;
  uint64_t order = 0;
  std::string line;
  while (std::getline(in, line)) {
    const std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    uint32_t attempt = 0;
    if (f.size() < 3 || !absl::SimpleAtoi(f[2], &attempt)) continue;  // a torn last line
    const std::string key = Key(f[1], attempt);
    if (f[0] == "S" && f.size() == 4) {
      Entry e;
      e.workload_id = f[1];
      e.attempt = attempt;
      if (!absl::SimpleAtoi(f[3], &e.epoch)) continue;
      live[key] = {order++, std::move(e)};
    } else if (f[0] == "E" && f.size() == 5) {
      int state = 0;
      int32_t exit_code = 0;
      if (!absl::SimpleAtoi(f[3], &state) || !absl::SimpleAtoi(f[4], &exit_code) ||
          !v1::WorkloadState_IsValid(state)) {
        continue;
      }
      auto [it, inserted] = live.try_emplace(key);
      if (inserted) {
        it->second.first = order++;
        it->second.second.workload_id = f[1];
        it->second.second.attempt = attempt;
      }
      it->second.second.state = static_cast<v1::WorkloadState>(state);
      it->second.second.exit_code = exit_code;
    } else if (f[0] == "A") {
      live.erase(key);
    }
  }
  if (in.bad()) {
    return absl::FailedPreconditionError(absl::StrCat("ledger: cannot read ", path));
  }
  in.close();
  const int fd = OpenAppend(path);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("ledger: cannot open ", path, ": ", std::generic_category().message(errno)));
  }
  std::unique_ptr<Ledger> ledger(new Ledger(path, fd));
  ledger->live_ = std::move(live);
  ledger->next_order_ = order;
  ledger->Compact();
  std::vector<std::pair<uint64_t, Entry>> sorted;
  sorted.reserve(ledger->live_.size());
  for (const auto& [key, v] : ledger->live_) sorted.push_back(v);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  unfinished->clear();
  for (auto& [o, e] : sorted) unfinished->push_back(std::move(e));
  return ledger;
}

Ledger::~Ledger() {
  if (fd_ >= 0) ::close(fd_);
}

void Ledger::Started(const std::string& workload_id, uint32_t attempt, uint64_t epoch) {
  if (!Writable(workload_id)) return;
  Entry e;
  e.workload_id = workload_id;
  e.attempt = attempt;
  e.epoch = epoch;
  live_[Key(workload_id, attempt)] = {next_order_++, e};
  Append(absl::StrCat("S ", workload_id, " ", attempt, " ", epoch, "\n"));
}

void Ledger::Ended(const std::string& workload_id, uint32_t attempt, v1::WorkloadState state,
                   int32_t exit_code) {
  if (!Writable(workload_id)) return;
  auto [it, inserted] = live_.try_emplace(Key(workload_id, attempt));
  if (inserted) {
    it->second.first = next_order_++;
    it->second.second.workload_id = workload_id;
    it->second.second.attempt = attempt;
  }
  it->second.second.state = state;
  it->second.second.exit_code = exit_code;
  Append(absl::StrCat("E ", workload_id, " ", attempt, " ", static_cast<int>(state), " ", exit_code,
                      "\n"));
}

void Ledger::Acked(const std::string& workload_id, uint32_t attempt) {
  if (!Writable(workload_id) || live_.erase(Key(workload_id, attempt)) == 0) return;
  Append(absl::StrCat("A ", workload_id, " ", attempt, "\n"));
}

void Ledger::Append(const std::string& line) {
  if (fd_ < 0) return;
  if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    spdlog::warn("ledger {}: write failed: {}", path_, std::generic_category().message(errno));
  }
  if (++lines_ > std::max(kCompactFloor, kLinesPerLive * live_.size())) Compact();
}

void Ledger::Compact() {
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    std::vector<std::pair<uint64_t, const Entry*>> sorted;
    sorted.reserve(live_.size());
    for (const auto& [key, v] : live_) sorted.emplace_back(v.first, &v.second);
    std::sort(sorted.begin(), sorted.end());
    for (const auto& [order, e] : sorted) {
      out << "S " << e->workload_id << " " << e->attempt << " " << e->epoch << "\n";
      if (e->state != v1::WORKLOAD_STATE_PLACED) {
        out << "E " << e->workload_id << " " << e->attempt << " " << static_cast<int>(e->state)
            << " " << e->exit_code << "\n";
      }
    }
    if (!out) {
      spdlog::warn("ledger {}: cannot write {}", path_, tmp);
      return;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path_, ec);
  if (ec) {
    spdlog::warn("ledger {}: cannot replace it: {}", path_, ec.message());
    return;
  }
  const int fd = OpenAppend(path_);
  if (fd >= 0) {
    ::close(fd_);
    fd_ = fd;
  }
  lines_ = live_.size();
}

}  // namespace gpufed::agent
