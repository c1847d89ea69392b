#include "tests/fault/fault_support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gpufed::testing {
namespace {

// True when nothing listens on (or otherwise holds) 127.0.0.1:`port` right now.
bool PortFree(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return free;
}

}  // namespace

bool Eventually(const std::function<bool()>& pred, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

std::vector<AgentRun> RunsInLog(const std::string& path) {
  std::ifstream in(path);
  std::map<std::pair<std::string, int>, AgentRun> runs;
  std::string line;
  while (std::getline(in, line)) {
    const std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.size() < 6 || words[2] != "workload" || words[4] != "attempt") continue;
    absl::Time at;
    std::string err;
    if (!absl::ParseTime("%Y-%m-%dT%H:%M:%E*S%Ez", words[0], &at, &err)) continue;
    int attempt = 0;
    std::string attempt_text = words[5];
    if (!attempt_text.empty() && attempt_text.back() == ':') attempt_text.pop_back();
    if (!absl::SimpleAtoi(attempt_text, &attempt) || words.size() < 7) continue;
    AgentRun& run = runs[{words[3], attempt}];
    run.workload = words[3];
    run.attempt = attempt;
    if (words[6] == "RUNNING") {
      run.start = at;
      ++run.starts;
    } else {
      run.end = at;
      run.end_state = words[6];
    }
  }
  std::vector<AgentRun> out;
  out.reserve(runs.size());
  for (auto& [key, run] : runs) out.push_back(std::move(run));
  return out;
}

absl::StatusOr<int> PortOutsideEphemeralRange() {
  int low = 32768;  // Linux's default when the file cannot be read
  {
    std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
    int from = 0;
    if (in >> from && from > 2048) low = from;
  }
  // Below the range, at most 20000 ports down and above the privileged ones; random, so that
  // two tests running side by side rarely try the same one.
  const int first = std::max(1024, low - 20000);
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> pick(first, low - 1);
  for (int tries = 0; tries < 100; ++tries) {
    const int port = pick(random);
    if (PortFree(port)) return port;
  }
  return absl::UnavailableError(absl::StrCat("no free port in ", first, "..", low - 1));
}

}  // namespace gpufed::testing
