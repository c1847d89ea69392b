#include "bench/fleet_bench.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <google/protobuf/util/time_util.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/convert.h"
#include "bench/resuming_watch.h"
#include "federation/gpu_catalog.h"
#include "federation/pool.h"
#include "federation/types.h"
#include "gpufed/v1/agent_service.grpc.pb.h"
#include "gpufed/v1/cluster_service.grpc.pb.h"
#include "gpufed/v1/tenant_service.grpc.pb.h"
#include "gpufed/v1/workload_service.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "nlohmann/json.hpp"
#include "tests/support/process_harness.h"

namespace gpufed::bench {
namespace {

using Clock = std::chrono::steady_clock;
using google::protobuf::util::TimeUtil;

constexpr char kTenant[] = "fleet";
constexpr char kProject[] = "bench";
constexpr char kSpotLabel[] = "gpufed.io/capacity-type";

int Fail(const std::string& what) {
  std::cerr << "gpufed-bench fleet: " << what << "\n";
  return 1;
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
double Sec(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

double Round3(double x) { return static_cast<double>(std::llround(x * 1000)) / 1000; }

nlohmann::json Dist(const std::vector<double>& v) {
  return {{"n", v.size()},
          {"p50", Round3(Percentile(v, 0.50))},
          {"p99", Round3(Percentile(v, 0.99))},
          {"max", Round3(v.empty() ? 0 : *std::max_element(v.begin(), v.end()))}};
}

void Progress(const std::string& line) { std::cerr << "fleet: " << line << std::endl; }

// ---- /proc ----

struct ProcStat {
  bool ok = false;
  std::string comm;
  int ppid = 0;
  uint64_t ticks = 0;  // utime + stime
};

ProcStat ReadStat(const std::string& path) {
  ProcStat out;
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return out;
  const size_t open = line.find('(');
  const size_t close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 > line.size()) {
    return out;
  }
  out.comm = line.substr(open + 1, close - open - 1);
  std::istringstream rest(line.substr(close + 2));
  std::vector<std::string> f;  // f[0] is field 3 (state): field n is f[n - 3]
  for (std::string w; rest >> w;) f.push_back(w);
  if (f.size() < 13) return out;
  out.ppid = std::stoi(f[1]);
  out.ticks = std::stoull(f[11]) + std::stoull(f[12]);
  out.ok = true;
  return out;
}

// A field of /proc/<pid>/status in KiB ("VmRSS", "VmHWM"); -1 if unreadable.
double StatusKib(pid_t pid, const std::string& field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(field.size() + 1));
    double kib = 0;
    fields >> kib;
    return kib;
  }
  return -1;
}

std::vector<int> NumericDirs(const std::string& path) {
  std::vector<int> out;
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return out;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): one directory stream, read by this thread alone
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (!name.empty() && absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) {
      out.push_back(std::stoi(name));
    }
  }
  closedir(d);
  return out;
}

// The embedded PostgreSQL's postmaster: the `postgres` process whose command line names the
// server's data folder (pg_ctl daemonises it: it is not the server's child).
int FindPostmaster(const std::string& data_dir, pid_t server) {
  for (int pid : NumericDirs("/proc")) {
    if (pid == server) continue;
    std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (absl::StrContains(cmdline, data_dir) &&
        ReadStat(absl::StrCat("/proc/", pid, "/stat")).comm == "postgres") {
      return pid;
    }
  }
  return 0;
}

// CPU ticks at one moment: the server, its threads by name, PostgreSQL's processes, this one.
struct CpuSnapshot {
  Clock::time_point at;
  uint64_t server = 0;
  std::map<int, std::pair<std::string, uint64_t>> server_threads;  // tid -> (name, ticks)
  std::map<int, uint64_t> postgres;                                // pid -> ticks
  uint64_t bench = 0;
};

CpuSnapshot TakeCpu(pid_t server, int postmaster) {
  CpuSnapshot s;
  s.at = Clock::now();
  s.server = ReadStat(absl::StrCat("/proc/", server, "/stat")).ticks;
  const std::string tasks = absl::StrCat("/proc/", server, "/task");
  for (int tid : NumericDirs(tasks)) {
    ProcStat t = ReadStat(absl::StrCat(tasks, "/", tid, "/stat"));
    if (t.ok) s.server_threads[tid] = {t.comm, t.ticks};
  }
  if (postmaster != 0) {
    for (int pid : NumericDirs("/proc")) {
      ProcStat p = ReadStat(absl::StrCat("/proc/", pid, "/stat"));
      if (p.ok && (pid == postmaster || p.ppid == postmaster)) s.postgres[pid] = p.ticks;
    }
  }
  s.bench = ReadStat("/proc/self/stat").ticks;
  return s;
}

// PostgreSQL's ticks between two snapshots (a process born in between counts whole).
uint64_t PostgresTicks(const CpuSnapshot& start, const CpuSnapshot& end) {
  uint64_t ticks = 0;
  for (const auto& [pid, t] : end.postgres) {
    auto before = start.postgres.find(pid);
    ticks += t - std::min(t, before == start.postgres.end() ? 0 : before->second);
  }
  return ticks;
}

double TicksToPercent(uint64_t ticks, double seconds) {
  static const auto kHz = static_cast<double>(sysconf(_SC_CLK_TCK));
  return seconds <= 0 ? 0 : 100.0 * static_cast<double>(ticks) / kHz / seconds;
}

// ---- The server's /metrics ----

// GET http://127.0.0.1:<port><path> (HTTP/1.0, the whole answer); empty on failure.
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (send(fd, req.data(), req.size(), 0) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;)
        out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return out;
}

// The scheduler's figures from /metrics: cycles and their total time, placements.
struct SchedulerFigures {
  double cycles = 0;
  double cycle_seconds = 0;
  double placements = 0;
};

SchedulerFigures ScrapeScheduler(int http_port) {
  SchedulerFigures f;
  std::istringstream lines(HttpGet(http_port, "/metrics"));
  for (std::string line; std::getline(lines, line);) {
    auto value = [&]() { return std::stod(line.substr(line.rfind(' ') + 1)); };
    if (absl::StartsWith(line, "gpufed_scheduler_cycle_seconds_count")) f.cycles = value();
    if (absl::StartsWith(line, "gpufed_scheduler_cycle_seconds_sum")) f.cycle_seconds = value();
    if (absl::StartsWith(line, "gpufed_scheduler_placements_total")) f.placements += value();
  }
  return f;
}

// ---- The fleet ----

constexpr const char* kClientRegions[] = {"us-east", "us-west", "eu-west", "ap-northeast"};
constexpr int kClientRegionCount = 4;

enum class Hw { kTraining, kMixed, kInference };

// Where clusters stand and what they are like. RTTs in ms to each of kClientRegions.
struct Site {
  const char* provider;
  const char* region;
  const char* zone;
  const char* jurisdiction;
  std::vector<std::string> labels;
  bool committed;  // owned: the cluster's default capacity is committed (free to use)
  bool spot;       // half of its clusters sell a third of their 8-GPU nodes as spot
  Hw hw;
  double price_factor;
  double weight;
  int rtt_ms[kClientRegionCount];
};

const std::vector<Site>& Sites() {
  // clang-format off
  static const auto* const kSites = new std::vector<Site>{
      // provider, region, zone, jurisdiction, labels, committed, spot, hardware, price factor,
      // weight, RTT ms to us-east, us-west, eu-west, ap-northeast
      {"onprem", "us-east", "dc1", "us", {"hipaa"}, true, false, Hw::kTraining, 1.0, 0.10, {2, 65, 80, 160}},
      {"onprem", "eu-central", "dc2", "de", {"gdpr"}, true, false, Hw::kTraining, 1.0, 0.06, {90, 150, 12, 230}},
      {"aws", "us-east-1", "use1-az1", "us", {"hipaa"}, false, true, Hw::kMixed, 1.0, 0.16, {3, 62, 78, 155}},
      {"aws", "us-west-2", "usw2-az1", "us", {}, false, true, Hw::kMixed, 1.0, 0.12, {62, 4, 140, 100}},
      {"aws", "eu-west-1", "euw1-az1", "eu", {"gdpr"}, false, true, Hw::kMixed, 1.05, 0.10, {75, 140, 3, 220}},
      {"gcp", "europe-west4", "europe-west4-a", "eu", {"gdpr"}, false, true, Hw::kTraining, 0.95, 0.08, {85, 145, 9, 240}},
      {"gcp", "asia-northeast1", "asia-northeast1-a", "jp", {}, false, true, Hw::kMixed, 1.1, 0.08, {160, 105, 225, 4}},
      {"azure", "eastus", "eastus-1", "us", {"hipaa"}, false, false, Hw::kTraining, 1.05, 0.10, {5, 65, 82, 165}},
      {"edge", "edge-fra", "fra1", "de", {"gdpr"}, false, false, Hw::kInference, 1.2, 0.08, {92, 152, 8, 235}},
      {"edge", "edge-tyo", "tyo1", "jp", {}, false, false, Hw::kInference, 1.2, 0.06, {165, 110, 230, 6}},
      {"neocloud", "us-central", "ord1", "us", {}, false, false, Hw::kTraining, 0.7, 0.06, {25, 40, 105, 130}},
  };
  // clang-format on
  return *kSites;
}

// Catalogue price per GPU-hour, in micro-units, on demand.
int64_t BasePrice(const std::string& model) {
  if (model == "H100-80GB") return 3900000;
  if (model == "A100-80GB") return 2400000;
  if (model == "L40S") return 1400000;
  return 750000;  // L4
}

struct ClusterPlan {
  std::string name;
  const Site* site = nullptr;
  v1::ClusterInfo info;  // what its agent reports: provider, region, zone
  v1::Inventory inventory;
  std::set<std::string> spot_nodes;
  v1::ClusterDeclaration declaration;  // what the admin declares
};

void AddNode(ClusterPlan* plan, int index, const std::string& model_name, int gpus, bool nvlink,
             bool spot) {
  const GpuModel model = *FindGpuModel(model_name);
  v1::Node* node = plan->inventory.add_nodes();
  const std::string name = absl::StrFormat("n-%03d", index);
  node->set_name(name);
  node->set_rack(absl::StrFormat("r%02d", index / 4));
  node->set_block(absl::StrFormat("b%d", index / 16));
  node->set_cpu_millis(nvlink ? 224000 : 96000);
  node->set_memory_mib(nvlink ? 2097152 : 786432);
  node->set_schedulable(true);
  (*node->mutable_labels())["gpufed.io/driver-version"] = "550.90.07";
  (*node->mutable_labels())["gpufed.io/cuda-version"] = "12.4";
  if (spot) {
    (*node->mutable_labels())[kSpotLabel] = "spot";
    plan->spot_nodes.insert(name);
  }
  for (int g = 0; g < gpus; ++g) {
    v1::Gpu* gpu = node->add_gpus();
    gpu->set_uuid(absl::StrCat("GPU-", plan->name, "-", name, "-", g));
    gpu->set_index(static_cast<uint32_t>(g));
    gpu->set_model(model_name);
    gpu->set_memory_mib(model.memory_mib);
    if (nvlink) gpu->set_nvlink_domain(name + "-nvl");
    gpu->set_pcie_switch(absl::StrCat("pcie", g / 2));
    gpu->set_numa_node(g * 2 / std::max(gpus, 1));
    gpu->set_mig_capable(model.mig_capable);
    gpu->set_healthy(true);
  }
}

std::vector<ClusterPlan> MakeFleet(const FleetBenchOptions& o, std::mt19937_64& rng) {
  std::vector<double> weights;
  for (const Site& s : Sites()) weights.push_back(s.weight);
  std::discrete_distribution<size_t> pick_site(weights.begin(), weights.end());
  std::uniform_real_distribution<double> u(0, 1);
  google::protobuf::Timestamp since =
      TimeUtil::SecondsToTimestamp(absl::ToUnixSeconds(absl::Now()) - 86400);
  std::vector<ClusterPlan> fleet(static_cast<size_t>(o.clusters));
  for (int c = 0; c < o.clusters; ++c) {
    ClusterPlan& plan = fleet[c];
    plan.name = absl::StrFormat("c%04d", c + 1);
    plan.site = &Sites()[pick_site(rng)];
    const Site& site = *plan.site;
    plan.info.set_provider(site.provider);
    plan.info.set_region(site.region);
    plan.info.set_zone(site.zone);
    const int gpus = o.gpus / o.clusters + (c < o.gpus % o.clusters ? 1 : 0);
    std::string big, small;
    switch (site.hw) {
      case Hw::kTraining:
        big = small = u(rng) < 0.6 ? "H100-80GB" : "A100-80GB";
        break;
      case Hw::kMixed:
        big = u(rng) < 0.5 ? "H100-80GB" : "A100-80GB";
        small = "L40S";
        break;
      case Hw::kInference:
        big = small = u(rng) < 0.6 ? "L4" : "L40S";
        break;
    }
    const int full = gpus / 8;
    const bool has_spot = site.spot && u(rng) < 0.5;
    int index = 1;
    for (int n = 0; n < full; ++n) {
      const std::string& model = (n % 2 == 1) ? small : big;
      const bool nvlink = model == "H100-80GB" || model == "A100-80GB";
      const bool spot = has_spot && n >= full - full / 3;
      AddNode(&plan, index++, model, 8, nvlink, spot);
    }
    if (gpus % 8 != 0) AddNode(&plan, index++, "L4", gpus % 8, false, false);

    v1::ClusterDeclaration& d = plan.declaration;
    d.set_cluster(plan.name);
    d.set_jurisdiction(site.jurisdiction);
    d.mutable_compliance_labels();  // declared, even when it has none
    for (const std::string& l : site.labels) d.mutable_compliance_labels()->add_labels(l);
    d.set_default_capacity(site.committed ? v1::CAPACITY_TYPE_COMMITTED
                                          : v1::CAPACITY_TYPE_ON_DEMAND);
    if (!site.committed) {
      std::set<std::string> models;
      for (const v1::Node& n : plan.inventory.nodes()) {
        for (const v1::Gpu& g : n.gpus()) models.insert(g.model());
      }
      const double jitter = 0.9 + 0.2 * u(rng);
      for (const std::string& m : models) {
        // Whole cents.
        const int64_t on_demand = static_cast<int64_t>(static_cast<double>(BasePrice(m)) *
                                                       site.price_factor * jitter / 10000) *
                                  10000;
        v1::PriceEntry* p = d.add_prices();
        p->set_gpu_model(m);
        p->set_capacity_type(v1::CAPACITY_TYPE_ON_DEMAND);
        p->set_price_per_hour_micros(on_demand);
        *p->mutable_effective_from() = since;
        if (!plan.spot_nodes.empty()) {
          v1::PriceEntry* s = d.add_prices();
          *s = *p;
          s->set_capacity_type(v1::CAPACITY_TYPE_SPOT);
          s->set_price_per_hour_micros(on_demand * 4 / 10 / 10000 * 10000);
        }
      }
    }
    for (int r = 0; r < kClientRegionCount; ++r) {
      const int64_t ms = site.rtt_ms[r] + static_cast<int64_t>(u(rng) * 6);
      (*d.mutable_client_rtts())[kClientRegions[r]] = TimeUtil::MillisecondsToDuration(ms);
    }
  }
  return fleet;
}

// What a cycle that changed the pool pays for Scheduler::Publish, measured here on this fleet:
// a workload released and placed again on one cluster (which the published copy shares, so the
// pool copies that cluster first), then a copy of the pool (make_shared<const Pool>) and the
// release of the previous one. The pool holds about what the fill leaves (half the 8-GPU nodes
// held, by one or two workloads each); the server's also carries the load's work and its caches.
struct PoolCopyFigures {
  double ms = 0;
  size_t allocations = 0;
};

PoolCopyFigures MeasurePoolCopy(const std::vector<ClusterPlan>& fleet, int rounds) {
  Pool pool;
  WorkloadId next = 1;
  std::vector<std::pair<WorkloadId, Assignment>> placed;
  for (const ClusterPlan& plan : fleet) {
    Cluster c;
    c.info.name = plan.name;
    c.info.provider = plan.info.provider();
    c.info.region = plan.info.region();
    c.info.zone = plan.info.zone();
    // As the server reads an agent's inventory.
    c.nodes = api::NodesFromProto(plan.inventory);
    pool.UpsertCluster(c);
    for (size_t i = 0; i < c.nodes.size() / 2; ++i) {
      const NodeInfo& n = c.nodes[i];
      const size_t parts = (i % 2 == 0 || n.gpus.size() < 8) ? 1 : 2;
      const size_t each = n.gpus.size() / parts;
      for (size_t part = 0; part < parts; ++part) {
        Assignment a;
        a.cluster = c.info.name;
        ReplicaAssignment& r = a.replicas.emplace_back();
        r.node = n.name;
        for (size_t g = part * each; g < (part + 1) * each; ++g) {
          r.gpu_uuids.push_back(n.gpus[g].uuid);
          r.gpu_indices.push_back(n.gpus[g].index);
        }
        if (pool.Allocate(next, a).ok()) placed.emplace_back(next++, std::move(a));
      }
    }
  }
  auto snapshot = std::make_shared<const Pool>(pool);
  const Clock::time_point t0 = Clock::now();
  for (int r = 0; r < rounds && !placed.empty(); ++r) {
    // Spread over the fleet: each round changes another cluster.
    const auto& [id, assignment] = placed[(r * placed.size()) / rounds];
    pool.Release(id);
    if (!pool.Allocate(id, assignment).ok()) std::abort();  // it held exactly this a moment ago
    snapshot = std::make_shared<const Pool>(pool);
  }
  return {Ms(Clock::now() - t0) / rounds, pool.allocation_count()};
}

// ---- Simulated agents ----

struct FleetStats {
  std::atomic<int64_t> heartbeats_sent{0};
  std::atomic<int64_t> heartbeats_acked{0};
  std::atomic<int64_t> statuses_sent{0};
  std::atomic<int64_t> statuses_acked{0};
  std::atomic<int64_t> status_reports{0};
  std::atomic<int64_t> assignments{0};
  std::atomic<int64_t> cancels{0};
  std::atomic<int64_t> fenced{0};
  std::atomic<int64_t> inventory_updates{0};
  std::atomic<int64_t> registrations{0};
  std::atomic<int64_t> clusters_registered{0};
  std::atomic<int64_t> stream_ends{0};
  std::atomic<bool> in_window{false};
  std::mutex mu;
  std::map<std::string, int> stream_end_reasons;
  std::vector<double> register_ms;       // connect to first Registered, per cluster
  std::vector<double> heartbeat_rtt_ms;  // heartbeat sent to its LeaseRenewal, in the window
};

class Ticker {
 public:
  enum Kind { kHeartbeat, kFinish, kReconnect };
  struct Event {
    Clock::time_point at;
    Kind kind;
    int agent;
    uint64_t gen = 0;  // the agent's stream generation (heartbeats, reconnects)
    std::string id;    // kFinish
    uint32_t attempt = 0;
    bool operator>(const Event& other) const { return at > other.at; }
  };
  // A heartbeat or reconnect of stream generation `gen`.
  static Event Of(Clock::time_point at, Kind kind, int agent, uint64_t gen) {
    Event e;
    e.at = at;
    e.kind = kind;
    e.agent = agent;
    e.gen = gen;
    return e;
  }
  using Handler = std::function<void(std::vector<Event>&)>;

  void Start(Handler handler) {
    handler_ = std::move(handler);
    thread_ = std::thread([this] { Loop(); });
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void Schedule(Event e) {
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      wake = queue_.empty() || e.at < queue_.top().at;
      queue_.push(std::move(e));
    }
    if (wake) cv_.notify_all();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    std::vector<Event> due;
    while (!stopping_) {
      if (queue_.empty()) {
        cv_.wait(lock);
        continue;
      }
      const Clock::time_point now = Clock::now();
      if (queue_.top().at > now) {
        cv_.wait_until(lock, queue_.top().at);
        continue;
      }
      // Whatever is due within a millisecond goes out together.
      while (!queue_.empty() && queue_.top().at <= now + std::chrono::milliseconds(1)) {
        due.push_back(queue_.top());
        queue_.pop();
      }
      lock.unlock();
      handler_(due);
      due.clear();
      lock.lock();
    }
  }

  Handler handler_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

class SimAgent;

// One stream of one simulated agent. Writes go out one at a time from a queue; a hold keeps the
// call open while writes may still start, released once the stream is closing and no write is
// in flight, so that no write ever starts after OnDone. Never deleted before the bench ends.
class AgentStream final : public grpc::ClientBidiReactor<v1::AgentMessage, v1::ServerMessage> {
 public:
  AgentStream(SimAgent* owner, uint64_t gen, const std::string& token) : owner_(owner), gen_(gen) {
    ctx_.AddMetadata("authorization", "Bearer " + token);
  }

  void Begin(v1::AgentService::Stub* stub, v1::AgentMessage first) {
    stub->async()->Connect(&ctx_, this);
    AddHold();
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = true;
      current_ = std::move(first);
    }
    StartWrite(&current_);
    StartRead(&in_);
    StartCall();
  }

  // Queues `m`; true when the caller must call Flush() (no write was in flight).
  bool Enqueue(v1::AgentMessage m) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return false;
    queue_.push_back(std::move(m));
    if (writing_) return false;
    writing_ = true;
    current_ = std::move(queue_.front());
    queue_.pop_front();
    return true;
  }
  void Flush() { StartWrite(&current_); }
  void Cancel() { ctx_.TryCancel(); }
  bool WaitDone(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return done_cv_.wait_until(lock, deadline, [this] { return done_; });
  }
  [[nodiscard]] uint64_t gen() const { return gen_; }

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override {
    bool write = false;
    bool release = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok) closing_ = true;
      if (!closing_ && !queue_.empty()) {
        current_ = std::move(queue_.front());
        queue_.pop_front();
        writing_ = write = true;
      } else if (closing_ && !hold_released_) {
        hold_released_ = release = true;
      }
    }
    if (write) StartWrite(&current_);
    if (release) RemoveHold();
  }
  void OnDone(const grpc::Status& status) override;

 private:
  void ReadsEnded() {
    bool release = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
      if (!writing_ && !hold_released_) hold_released_ = release = true;
    }
    if (release) RemoveHold();
  }

  SimAgent* const owner_;
  const uint64_t gen_;
  grpc::ClientContext ctx_;
  v1::ServerMessage in_;
  std::mutex mu_;
  std::condition_variable done_cv_;
  std::deque<v1::AgentMessage> queue_;
  v1::AgentMessage current_;  // owned by the write in flight
  bool writing_ = false;
  bool closing_ = false;
  bool hold_released_ = false;
  bool done_ = false;
};

bool IsTerminal(v1::WorkloadState s) {
  return s == v1::WORKLOAD_STATE_SUCCEEDED || s == v1::WORKLOAD_STATE_FAILED ||
         s == v1::WORKLOAD_STATE_CANCELLED || s == v1::WORKLOAD_STATE_LOST;
}

// One cluster's agent, as agent/agent.cc speaks the protocol with the `sim` backend: register
// (with what it still runs or has not had acknowledged), heartbeat, start what it is assigned
// (RUNNING at once, SUCCEEDED after the spec's estimated duration), apply MIG repartitions and
// report the new inventory, answer cancels, keep every status until acknowledged and send the
// unacknowledged ones again after a reconnect.
class SimAgent {
 public:
  SimAgent(int index, const ClusterPlan* plan, std::string token,
           std::shared_ptr<grpc::Channel> channel, Ticker* ticker, FleetStats* stats, uint64_t seed)
      : index_(index),
        plan_(plan),
        token_(std::move(token)),
        channel_(std::move(channel)),
        stub_(v1::AgentService::NewStub(channel_)),
        ticker_(ticker),
        stats_(stats),
        inventory_(plan->inventory),
        rng_(seed) {}

  void Connect() {
    AgentStream* s = nullptr;
    v1::AgentMessage reg;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ || stream_ != nullptr) return;
      ++gen_;
      seq_ = 0;
      registered_ = false;
      hb_inflight_.clear();
      reg.set_seq(++seq_);
      reg.set_epoch(epoch_);
      v1::Register* r = reg.mutable_register_();
      r->set_cluster(plan_->name);
      *r->mutable_info() = plan_->info;
      *r->mutable_inventory() = inventory_;
      r->set_agent_version("gpufed-bench-fleet");
      for (const auto& [id, run] : runs_) {
        if (!run.acked) *r->add_known_workloads() = StatusOf(id, run);
      }
      inventory_dirty_ = false;
      streams_.push_back(std::make_unique<AgentStream>(this, gen_, token_));
      s = stream_ = streams_.back().get();
      connect_started_ = Clock::now();
    }
    s->Begin(stub_.get(), std::move(reg));
  }

  void Reconnect(uint64_t gen) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (gen != gen_) return;
    }
    Connect();
  }

  void OnMessage(AgentStream* s, const v1::ServerMessage& m) {
    std::vector<v1::AgentMessage> out;
    std::vector<Ticker::Event> events;
    AgentStream* flush = nullptr;
    const Clock::time_point now = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (s != stream_) return;
      switch (m.body_case()) {
        case v1::ServerMessage::kRegistered: {
          epoch_ = m.registered().epoch();
          const int64_t hb = TimeUtil::DurationToMilliseconds(m.registered().heartbeat_interval());
          if (hb > 0) heartbeat_interval_ = std::chrono::milliseconds(hb);
          registered_ = true;
          backoff_ms_ = 1000;
          stats_->registrations++;
          Clock::duration first = heartbeat_interval_;
          if (!ever_registered_) {
            ever_registered_ = true;
            stats_->clusters_registered++;
            std::lock_guard<std::mutex> slock(stats_->mu);
            stats_->register_ms.push_back(Ms(now - connect_started_));
            // The fleet's heartbeats are spread over the interval.
            first = std::chrono::milliseconds(std::uniform_int_distribution<int64_t>(
                1, std::max<int64_t>(1, heartbeat_interval_.count()))(rng_));
          }
          events.push_back(Ticker::Of(now + first, Ticker::kHeartbeat, index_, gen_));
          // Everything unacknowledged goes out again, oldest first.
          std::vector<v1::WorkloadStatus> again;
          again.reserve(outbox_.size());
          for (const auto& [key, st] : outbox_) again.push_back(st);
          AddReports(again, &out);
          break;
        }
        case v1::ServerMessage::kLease: {
          const uint64_t answered = m.lease().heartbeat_seq();
          std::optional<Clock::time_point> sent;
          while (!hb_inflight_.empty() && hb_inflight_.front().first <= answered) {
            if (hb_inflight_.front().first == answered) sent = hb_inflight_.front().second;
            hb_inflight_.pop_front();
          }
          if (sent) {
            stats_->heartbeats_acked++;
            if (stats_->in_window.load()) {
              std::lock_guard<std::mutex> slock(stats_->mu);
              stats_->heartbeat_rtt_ms.push_back(Ms(now - *sent));
            }
          }
          break;
        }
        case v1::ServerMessage::kAssign:
          HandleAssignLocked(m.assign(), now, &out, &events);
          break;
        case v1::ServerMessage::kCancel: {
          std::vector<v1::WorkloadStatus> statuses;
          for (const std::string& id : m.cancel().workload_ids()) {
            stats_->cancels++;
            auto it = runs_.find(id);
            if (it == runs_.end()) {
              Run r;
              r.state = v1::WORKLOAD_STATE_CANCELLED;
              r.message = "cancelled before it was assigned here";
              it = runs_.emplace(id, r).first;
            } else if (it->second.state == v1::WORKLOAD_STATE_RUNNING) {
              it->second.state = v1::WORKLOAD_STATE_CANCELLED;
              it->second.message = "cancelled";
              --active_;
            }
            it->second.acked = false;
            statuses.push_back(StatusOf(id, it->second));
          }
          AddReports(statuses, &out);
          break;
        }
        case v1::ServerMessage::kAck:
          for (const v1::WorkloadStatus& st : m.ack().statuses()) {
            stats_->statuses_acked++;
            outbox_.erase(Key(st.workload_id(), st.state(), st.attempt()));
            if (!IsTerminal(st.state())) continue;
            outbox_.erase(Key(st.workload_id(), v1::WORKLOAD_STATE_RUNNING, st.attempt()));
            auto it = runs_.find(st.workload_id());
            if (it != runs_.end() && it->second.attempt == st.attempt() &&
                IsTerminal(it->second.state)) {
              it->second.acked = true;
            }
          }
          break;
        default:
          break;
      }
      flush = QueueLocked(&out);
    }
    if (flush != nullptr) flush->Flush();
    for (Ticker::Event& e : events) ticker_->Schedule(std::move(e));
  }

  void OnStreamDone(AgentStream* s, const grpc::Status& status) {
    uint64_t gen = 0;
    int wait_ms = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (s != stream_) return;
      stream_ = nullptr;
      registered_ = false;
      if (stopping_) return;
      gen = gen_;
      wait_ms = std::uniform_int_distribution<int>(backoff_ms_ / 2, backoff_ms_)(rng_);
      backoff_ms_ = std::min(backoff_ms_ * 2, 5000);
    }
    stats_->stream_ends++;
    {
      std::lock_guard<std::mutex> slock(stats_->mu);
      stats_->stream_end_reasons[absl::StrCat(status.error_code(), " ", status.error_message())]++;
    }
    ticker_->Schedule(Ticker::Of(Clock::now() + std::chrono::milliseconds(wait_ms),
                                 Ticker::kReconnect, index_, gen));
  }

  void Heartbeat(uint64_t gen) {
    AgentStream* flush = nullptr;
    Clock::time_point next;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (gen != gen_ || !registered_ || stream_ == nullptr) return;
      const Clock::time_point now = Clock::now();
      std::vector<v1::AgentMessage> out(1);
      out[0].mutable_heartbeat()->set_running(static_cast<uint32_t>(active_));
      flush = QueueLocked(&out);
      hb_inflight_.emplace_back(seq_, now);
      if (hb_inflight_.size() > 64) hb_inflight_.pop_front();
      stats_->heartbeats_sent++;
      next = now + heartbeat_interval_;
    }
    if (flush != nullptr) flush->Flush();
    ticker_->Schedule(Ticker::Of(next, Ticker::kHeartbeat, index_, gen));
  }

  void Finish(const std::vector<std::pair<std::string, uint32_t>>& ended) {
    AgentStream* flush = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<v1::WorkloadStatus> statuses;
      for (const auto& [id, attempt] : ended) {
        auto it = runs_.find(id);
        if (it == runs_.end() || it->second.attempt != attempt ||
            it->second.state != v1::WORKLOAD_STATE_RUNNING) {
          continue;
        }
        it->second.state = v1::WORKLOAD_STATE_SUCCEEDED;
        it->second.message = "sim: done";
        --active_;
        statuses.push_back(StatusOf(id, it->second));
      }
      std::vector<v1::AgentMessage> out;
      AddReports(statuses, &out);
      flush = QueueLocked(&out);
    }
    if (flush != nullptr) flush->Flush();
  }

  // Cancels the current stream; WaitStopped waits for every stream to be done.
  void Stop() {
    AgentStream* s = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      s = stream_;
    }
    if (s != nullptr) s->Cancel();
  }
  bool WaitStopped(Clock::time_point deadline) {
    std::vector<AgentStream*> all;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& s : streams_) all.push_back(s.get());
    }
    for (AgentStream* s : all) {
      if (!s->WaitDone(deadline)) return false;
    }
    return true;
  }

 private:
  struct Run {
    uint32_t attempt = 0;
    v1::WorkloadState state = v1::WORKLOAD_STATE_RUNNING;
    uint64_t epoch = 0;
    std::string message;
    bool acked = false;  // its end was acknowledged
  };
  using StatusKey = std::tuple<std::string, int, uint32_t>;
  static StatusKey Key(const std::string& id, v1::WorkloadState s, uint32_t attempt) {
    return {id, static_cast<int>(s), attempt};
  }

  static v1::WorkloadStatus StatusOf(const std::string& id, const Run& r) {
    v1::WorkloadStatus s;
    s.set_workload_id(id);
    s.set_state(r.state);
    s.set_exit_code(r.state == v1::WORKLOAD_STATE_FAILED ? 1 : 0);
    s.set_message(r.message);
    // Not TimeUtil::GetCurrentTime: Debian's protobuf 3.21 answers whole seconds, which would
    // meter a run of a few milliseconds as none (or a whole second).
    *s.mutable_time() = TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(absl::Now()));
    s.set_epoch(r.epoch);
    s.set_attempt(r.attempt);
    return s;
  }

  // Into the outbox, and into reports of at most 1000 updates.
  void AddReports(const std::vector<v1::WorkloadStatus>& statuses,
                  std::vector<v1::AgentMessage>* out) {
    v1::AgentMessage* m = nullptr;
    for (const v1::WorkloadStatus& st : statuses) {
      outbox_[Key(st.workload_id(), st.state(), st.attempt())] = st;
      if (m == nullptr || m->status().updates_size() >= 1000) {
        out->emplace_back();
        m = &out->back();
      }
      *m->mutable_status()->add_updates() = st;
    }
  }

  void HandleAssignLocked(const v1::AssignBatch& batch, Clock::time_point now,
                          std::vector<v1::AgentMessage>* out, std::vector<Ticker::Event>* events) {
    std::vector<v1::WorkloadStatus> statuses;
    for (const v1::WorkAssignment& a : batch.assignments()) {
      stats_->assignments++;
      const std::string& id = a.workload_id();
      auto it = runs_.find(id);
      if (it != runs_.end() && it->second.attempt >= a.attempt()) {
        // Known: an ended one has its end sent again; a running one is left alone.
        if (IsTerminal(it->second.state)) {
          it->second.acked = false;
          statuses.push_back(StatusOf(id, it->second));
        }
        continue;
      }
      if (it != runs_.end() && it->second.state == v1::WORKLOAD_STATE_RUNNING) --active_;
      Run run;
      run.attempt = a.attempt();
      run.epoch = a.assignment().epoch() != 0 ? a.assignment().epoch() : epoch_;
      if (a.assignment().epoch() != 0 && a.assignment().epoch() != epoch_) {
        stats_->fenced++;
        run.state = v1::WORKLOAD_STATE_FAILED;
        run.message = absl::StrCat("not started: placed under epoch ", a.assignment().epoch(),
                                   ", the cluster's is ", epoch_);
        runs_[id] = run;
        statuses.push_back(StatusOf(id, run));
        continue;
      }
      for (const v1::Repartition& r : a.assignment().repartitions()) ApplyRepartitionLocked(r);
      run.message = "sim: started";
      runs_[id] = run;
      ++active_;
      statuses.push_back(StatusOf(id, run));
      const int64_t ms = TimeUtil::DurationToMilliseconds(a.spec().estimated_duration());
      Ticker::Event end =
          Ticker::Of(now + std::chrono::milliseconds(ms), Ticker::kFinish, index_, 0);
      end.id = id;
      end.attempt = a.attempt();
      events->push_back(std::move(end));
    }
    if (inventory_dirty_) {
      // Before the statuses: the server learns the layout before it hears the work runs.
      out->emplace_back();
      *out->back().mutable_inventory()->mutable_inventory() = inventory_;
      inventory_dirty_ = false;
      stats_->inventory_updates++;
    }
    AddReports(statuses, out);
  }

  void ApplyRepartitionLocked(const v1::Repartition& r) {
    for (v1::Node& node : *inventory_.mutable_nodes()) {
      if (node.name() != r.node()) continue;
      for (v1::Gpu& gpu : *node.mutable_gpus()) {
        if (gpu.uuid() != r.gpu_uuid()) continue;
        if (gpu.mig_enabled() == r.mig_enabled() && gpu.mig_layout_size() == r.layout_size()) {
          bool same = true;
          for (int i = 0; i < r.layout_size() && same; ++i) {
            same = gpu.mig_layout(i).profile() == r.layout(i).profile() &&
                   gpu.mig_layout(i).start() == r.layout(i).start();
          }
          if (same) return;  // already in effect
        }
        gpu.set_mig_enabled(r.mig_enabled());
        *gpu.mutable_mig_layout() = r.layout();
        inventory_dirty_ = true;
        return;
      }
    }
  }

  // Stamps and queues `out` on the current registered stream; the stream to Flush, if any.
  // Unregistered, the statuses wait in the outbox for the next Registered.
  AgentStream* QueueLocked(std::vector<v1::AgentMessage>* out) {
    if (stream_ == nullptr || !registered_) {
      out->clear();
      return nullptr;
    }
    bool flush = false;
    for (v1::AgentMessage& m : *out) {
      m.set_seq(++seq_);
      m.set_epoch(epoch_);
      if (m.has_status()) {
        stats_->status_reports++;
        stats_->statuses_sent += m.status().updates_size();
      }
      flush = stream_->Enqueue(std::move(m)) || flush;
    }
    out->clear();
    return flush ? stream_ : nullptr;
  }

  const int index_;
  const ClusterPlan* const plan_;
  const std::string token_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::AgentService::Stub> stub_;
  Ticker* const ticker_;
  FleetStats* const stats_;

  std::mutex mu_;
  AgentStream* stream_ = nullptr;
  std::vector<std::unique_ptr<AgentStream>> streams_;
  uint64_t gen_ = 0;
  uint64_t seq_ = 0;
  uint64_t epoch_ = 0;
  bool registered_ = false;
  bool ever_registered_ = false;
  bool stopping_ = false;
  bool inventory_dirty_ = false;
  Clock::time_point connect_started_;
  std::chrono::milliseconds heartbeat_interval_{5000};
  std::deque<std::pair<uint64_t, Clock::time_point>> hb_inflight_;
  std::map<std::string, Run> runs_;
  std::map<StatusKey, v1::WorkloadStatus> outbox_;
  int64_t active_ = 0;
  v1::Inventory inventory_;
  int backoff_ms_ = 1000;
  std::mt19937_64 rng_;
};

void AgentStream::OnReadDone(bool ok) {
  if (!ok) {
    ReadsEnded();
    return;
  }
  owner_->OnMessage(this, in_);
  StartRead(&in_);
}

void AgentStream::OnDone(const grpc::Status& status) {
  owner_->OnStreamDone(this, status);
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  done_cv_.notify_all();
}

// ---- Users: submissions and a Watch ----

class Submitter {
 public:
  using Done = std::function<void(const grpc::Status&, const v1::SubmitResponse&)>;

  Submitter(const std::string& address, std::string token, int channels)
      : token_(std::move(token)) {
    for (int c = 0; c < channels; ++c) {
      grpc::ChannelArguments args;
      args.SetInt("gpufed.bench.fleet.user", c);  // a connection each
      stubs_.push_back(v1::WorkloadService::NewStub(
          grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
    }
  }
  ~Submitter() { WaitBelow(1, Clock::now() + std::chrono::seconds(60)); }

  void Submit(v1::SubmitRequest request, Done done) {
    auto* call = new Call;
    call->request = std::move(request);
    call->done = std::move(done);
    call->context.AddMetadata("authorization", "Bearer " + token_);
    call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++in_flight_;
    }
    const size_t i = next_.fetch_add(1) % stubs_.size();
    stubs_[i]->async()->Submit(&call->context, &call->request, &call->response,
                               [this, call](const grpc::Status& s) {
                                 call->done(s, call->response);
                                 delete call;
                                 std::lock_guard<std::mutex> lock(mu_);
                                 --in_flight_;
                                 cv_.notify_all();
                               });
  }

  // Waits until fewer than `n` calls are in flight; false at the deadline.
  bool WaitBelow(int n, Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, deadline, [&] { return in_flight_ < n; });
  }

 private:
  struct Call {
    grpc::ClientContext context;
    v1::SubmitRequest request;
    v1::SubmitResponse response;
    Done done;
  };
  const std::string token_;
  std::vector<std::unique_ptr<v1::WorkloadService::Stub>> stubs_;
  std::atomic<size_t> next_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  int in_flight_ = 0;
};

// One Watch of every workload of the tenant: when each workload's PLACED event arrived, and
// whether its placement kept its rules (as the bench declared the clusters).
class Watcher {
 public:
  struct Placed {
    Clock::time_point at;
    double server_ms = 0;  // the event's time minus the workload's create_time
    std::string cluster;
  };

  Watcher(const std::string& address, std::string token,
          const std::unordered_map<std::string, const ClusterPlan*>* plans)
      : plans_(plans) {
    grpc::ChannelArguments args;
    args.SetInt("gpufed.bench.fleet.watch", 1);
    watch_ = std::make_unique<ResumingWatch>(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args),
        std::move(token), [this](const v1::WorkloadEvent& e) { OnEvent(e); }, "fleet");
  }
  ~Watcher() { Stop(); }

  void Stop() { watch_->Stop(); }

  [[nodiscard]] int64_t events() const { return watch_->events(); }
  std::optional<Placed> PlacedAt(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = placed_.find(id);
    if (it == placed_.end()) return std::nullopt;
    return it->second;
  }
  size_t CountPlaced(const std::vector<std::string>& ids) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const std::string& id : ids) n += placed_.count(id);
    return n;
  }
  [[nodiscard]] int64_t restarts() const { return watch_->restarts(); }
  std::map<std::string, int> violations() {
    std::lock_guard<std::mutex> lock(mu_);
    return violations_;
  }
  [[nodiscard]] int64_t checked() const { return checked_.load(); }

 private:
  void OnEvent(const v1::WorkloadEvent& e) {
    const Clock::time_point now = Clock::now();
    if (e.resync() || e.to_state() != v1::WORKLOAD_STATE_PLACED) return;
    Placed p;
    p.at = now;
    p.server_ms = static_cast<double>(
                      TimeUtil::DurationToMicroseconds(e.time() - e.workload().create_time())) /
                  1000;
    p.cluster = e.workload().assignment().cluster();
    const std::string violation = CheckRules(e.workload());
    std::lock_guard<std::mutex> lock(mu_);
    placed_.emplace(e.workload().id(), std::move(p));
    if (!violation.empty()) violations_[violation]++;
  }

  // The hard rules the bench's mix uses, judged against what the bench declared.
  std::string CheckRules(const v1::Workload& w) {
    auto it = plans_->find(w.assignment().cluster());
    if (it == plans_->end()) return "placed on a cluster the bench does not know";
    const ClusterPlan& plan = *it->second;
    const v1::PlacementConstraints& rules = w.spec().placement();
    checked_++;
    if (!rules.jurisdictions().empty() &&
        std::find(rules.jurisdictions().begin(), rules.jurisdictions().end(),
                  plan.declaration.jurisdiction()) == rules.jurisdictions().end()) {
      return "jurisdiction";
    }
    for (const std::string& l : rules.compliance_labels()) {
      const auto& have = plan.declaration.compliance_labels().labels();
      if (std::find(have.begin(), have.end(), l) == have.end()) return "compliance label";
    }
    if (!rules.spot_tolerated()) {
      for (const v1::ReplicaAssignment& r : w.assignment().replicas()) {
        if (plan.spot_nodes.count(r.node()) != 0) return "spot";
      }
    }
    return "";
  }

  const std::unordered_map<std::string, const ClusterPlan*>* const plans_;
  std::mutex mu_;
  std::unordered_map<std::string, Placed> placed_;  // guarded by mu_
  std::map<std::string, int> violations_;           // guarded by mu_
  std::atomic<int64_t> checked_{0};
  std::unique_ptr<ResumingWatch> watch_;  // made last: it calls OnEvent at once
};

// ---- The submission mix ----

struct Shape {
  const char* name;
  double weight;
};

// The steady load: what a fleet's users submit, a third of it with placement rules.
const std::vector<Shape>& Mix() {
  static const auto* const kMix = new std::vector<Shape>{
      {"batch-1gpu", 0.35},         // one GPU, anywhere, tightest fit
      {"cost-spot-1gpu", 0.15},     // one A100/H100, cheapest, spot welcome, restartable
      {"eu-gdpr-8gpu", 0.10},       // a node of H100/A100 in eu or de with gdpr, cheapest
      {"latency-share", 0.10},      // half an L4/L40S within 50 ms of its clients, closest
      {"us-hipaa-2gpu", 0.10},      // two GPUs in the us with hipaa, balanced from us-east
      {"gang-2x8", 0.05},           // two H100 nodes in one cluster
      {"price-capped-4gpu", 0.10},  // four GPUs at most 2.00 per GPU-hour, cheapest
      {"mig-3g", 0.05},             // a 3g.40gb MIG instance, cheapest
  };
  return *kMix;
}

v1::SubmitRequest BaseRequest(const std::string& name, const std::string& key, int64_t seconds) {
  v1::SubmitRequest req;
  v1::WorkloadSpec* spec = req.mutable_spec();
  spec->set_tenant(kTenant);
  spec->set_project(kProject);
  spec->set_name(name);
  spec->set_idempotency_key(key);
  spec->set_replicas(1);
  spec->set_workload_class(v1::WORKLOAD_CLASS_BATCH);
  *spec->mutable_estimated_duration() = TimeUtil::SecondsToDuration(seconds);
  return req;
}

v1::SubmitRequest MakeSteady(size_t shape, const std::string& key, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> short_run(30, 90);
  std::uniform_int_distribution<int64_t> long_run(60, 120);
  const std::string name = Mix()[shape].name;
  v1::SubmitRequest req = BaseRequest(name, key, short_run(rng));
  v1::WorkloadSpec* spec = req.mutable_spec();
  v1::PlacementConstraints* p = spec->mutable_placement();
  switch (shape) {
    case 0:
      spec->mutable_per_replica()->set_gpus(1);
      spec->clear_placement();
      break;
    case 1:
      spec->mutable_per_replica()->set_gpus(1);
      spec->add_gpu_models("A100-80GB");
      spec->add_gpu_models("H100-80GB");
      p->set_objective(v1::OBJECTIVE_COST);
      p->set_spot_tolerated(true);
      spec->mutable_retry()->set_max_attempts(3);
      spec->mutable_retry()->add_on(v1::RETRY_ON_NODE_FAILURE);
      break;
    case 2:
      *spec->mutable_estimated_duration() = TimeUtil::SecondsToDuration(long_run(rng));
      spec->set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
      spec->mutable_per_replica()->set_gpus(8);
      spec->add_gpu_models("H100-80GB");
      spec->add_gpu_models("A100-80GB");
      p->add_jurisdictions("eu");
      p->add_jurisdictions("de");
      p->add_compliance_labels("gdpr");
      p->set_objective(v1::OBJECTIVE_COST);
      break;
    case 3:
      spec->set_workload_class(v1::WORKLOAD_CLASS_INFERENCE);
      spec->mutable_per_replica()->set_gpu_milli(500);
      spec->add_gpu_models("L4");
      spec->add_gpu_models("L40S");
      p->set_objective(v1::OBJECTIVE_LATENCY);
      p->set_client_region(
          kClientRegions[std::uniform_int_distribution<int>(0, kClientRegionCount - 1)(rng)]);
      *p->mutable_max_rtt() = TimeUtil::MillisecondsToDuration(50);
      break;
    case 4:
      spec->mutable_per_replica()->set_gpus(2);
      p->add_jurisdictions("us");
      p->add_compliance_labels("hipaa");
      p->set_objective(v1::OBJECTIVE_BALANCED);
      p->set_client_region("us-east");
      break;
    case 5:
      *spec->mutable_estimated_duration() = TimeUtil::SecondsToDuration(long_run(rng));
      spec->set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
      spec->set_replicas(2);
      spec->mutable_per_replica()->set_gpus(8);
      spec->add_gpu_models("H100-80GB");
      spec->clear_placement();
      break;
    case 6:
      spec->mutable_per_replica()->set_gpus(4);
      p->set_max_price_per_gpu_hour_micros(2000000);
      p->set_objective(v1::OBJECTIVE_COST);
      break;
    default:
      spec->set_workload_class(v1::WORKLOAD_CLASS_INFERENCE);
      spec->mutable_per_replica()->set_mig_profile("3g.40gb");
      spec->add_gpu_models("A100-80GB");
      spec->add_gpu_models("H100-80GB");
      p->set_objective(v1::OBJECTIVE_COST);
      break;
  }
  return req;
}

// Long work that takes `fill` of the GPUs before the load: whole nodes, halves and pairs.
std::vector<v1::SubmitRequest> MakeFill(const FleetBenchOptions& o, std::mt19937_64& rng) {
  std::vector<v1::SubmitRequest> out;
  const auto target = static_cast<int64_t>(o.fill * o.gpus);
  std::discrete_distribution<int> pick({0.60 / 8, 0.20 / 4, 0.20 / 2});  // GPU shares 60/20/20
  const int gpus[] = {8, 4, 2};
  int64_t taken = 0;
  while (taken < target) {
    const int g = gpus[pick(rng)];
    v1::SubmitRequest req = BaseRequest(absl::StrCat("fill-", g, "gpu"),
                                        absl::StrCat("fill-", out.size()), int64_t{4} * 3600);
    req.mutable_spec()->mutable_per_replica()->set_gpus(static_cast<uint32_t>(g));
    out.push_back(std::move(req));
    taken += g;
  }
  return out;
}

// ---- Set-up calls ----

absl::Status CreateAgentTokens(const std::string& address, const std::string& admin_token,
                               const std::vector<ClusterPlan>& fleet,
                               std::vector<std::string>* tokens) {
  tokens->assign(fleet.size(), "");
  std::atomic<size_t> next{0};
  std::mutex mu;
  absl::Status first_error;
  std::vector<std::thread> threads;
  threads.reserve(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      grpc::ChannelArguments args;
      args.SetInt("gpufed.bench.fleet.setup", t);
      auto stub = v1::TenantService::NewStub(
          grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
      for (size_t i = next.fetch_add(1); i < fleet.size(); i = next.fetch_add(1)) {
        grpc::ClientContext ctx;
        ctx.AddMetadata("authorization", "Bearer " + admin_token);
        v1::CreateTokenRequest req;
        req.set_subject("agent-" + fleet[i].name);
        req.set_role(v1::ROLE_AGENT);
        req.set_cluster(fleet[i].name);
        v1::CreateTokenResponse resp;
        const grpc::Status s = stub->CreateToken(&ctx, req, &resp);
        std::lock_guard<std::mutex> lock(mu);
        if (!s.ok()) {
          if (first_error.ok())
            first_error = absl::UnavailableError("CreateToken: " + s.error_message());
          return;
        }
        (*tokens)[i] = resp.token();
      }
    });
  }
  for (auto& t : threads) t.join();
  return first_error;
}

absl::Status Declare(const std::string& address, const std::string& admin_token,
                     const std::vector<ClusterPlan>& fleet) {
  auto stub = v1::ClusterService::NewStub(gpufed::testing::Connect(address));
  for (size_t start = 0; start < fleet.size(); start += 250) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + admin_token);
    v1::ApplyClustersRequest req;
    for (size_t i = start; i < std::min(fleet.size(), start + 250); ++i) {
      *req.add_declarations() = fleet[i].declaration;
    }
    v1::ApplyClustersResponse resp;
    const grpc::Status s = stub->ApplyClusters(&ctx, req, &resp);
    if (!s.ok()) return absl::UnavailableError("ApplyClusters: " + s.error_message());
  }
  return absl::OkStatus();
}

// Workloads of the bench's tenant PENDING now; -1 if List fails.
int64_t CountPending(const std::string& address, const std::string& token) {
  auto stub = v1::WorkloadService::NewStub(gpufed::testing::Connect(address));
  int64_t n = 0;
  std::string page;
  do {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    v1::ListWorkloadsRequest req;
    req.set_tenant(kTenant);
    req.add_states(v1::WORKLOAD_STATE_PENDING);
    req.set_page_size(1000);
    req.set_page_token(page);
    v1::ListWorkloadsResponse resp;
    if (!stub->List(&ctx, req, &resp).ok()) return -1;
    n += resp.workloads_size();
    page = resp.next_page_token();
  } while (!page.empty());
  return n;
}

// Why the workloads still pending are pending (their reason codes), from a sample of them.
std::map<std::string, int> PendingReasons(const std::string& address, const std::string& token,
                                          const std::vector<std::string>& ids) {
  std::map<std::string, int> out;
  auto stub = v1::WorkloadService::NewStub(gpufed::testing::Connect(address));
  for (size_t i = 0; i < ids.size() && i < 200; ++i) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    v1::GetWorkloadRequest req;
    req.set_id(ids[i]);
    v1::Workload w;
    if (!stub->Get(&ctx, req, &w).ok()) {
      out["(Get failed)"]++;
      continue;
    }
    if (w.state() != v1::WORKLOAD_STATE_PENDING && w.state() != v1::WORKLOAD_STATE_ADMITTED) {
      out[absl::StrCat("state ", v1::WorkloadState_Name(w.state()))]++;
    } else {
      out[absl::StrCat(w.spec().name(), ": ", w.pending_reason_code())]++;
    }
  }
  return out;
}

// ---- The run ----

struct Submission {
  size_t shape = 0;
  Clock::time_point sent;
  Clock::time_point acked;
  bool done = false;
  bool ok = false;
  std::string id;
};

int Run(FleetBenchOptions o) {
  // The same load per GPU whatever the fleet's size: 20 per second on 100,000 GPUs.
  if (o.rate <= 0) o.rate = std::max(0.5, 20.0 * o.gpus / 100000);
  const Clock::time_point bench_start = Clock::now();
  std::mt19937_64 rng(o.seed);
  gpufed::testing::TempDir dir("gpufed-fleet");
  gpufed::testing::ServerOptions so;
  so.data_dir = dir.path() + "/server";
  // Agents heartbeat every interval; the lease (40 % of the timeout) must cover two of them.
  const int timeout_s = std::max(20, (o.heartbeat_interval_ms * 6 + 999) / 1000);
  // One token submits at --rate (up to 100,000/s): no per-caller write limit.
  so.extra_args = {absl::StrCat("--heartbeat-interval-ms=", o.heartbeat_interval_ms),
                   absl::StrCat("--heartbeat-timeout=", timeout_s), "--write-rate=0"};
  auto server = gpufed::testing::StartServer(so);
  if (!server.ok()) return Fail(server.status().ToString());
  const pid_t server_pid = server->process->pid();
  const std::string address = server->address();
  auto user_token =
      gpufed::testing::BootstrapTenant(address, server->admin_token, kTenant, kProject);
  if (!user_token.ok()) return Fail(user_token.status().ToString());
  const int postmaster = FindPostmaster(dir.path(), server_pid);
  Progress(absl::StrCat("server pid ", server_pid, " on ", address, ", PostgreSQL postmaster pid ",
                        postmaster, "; log ", server->process->log_path()));

  // The fleet, declared, with a token per cluster.
  std::vector<ClusterPlan> fleet = MakeFleet(o, rng);
  std::unordered_map<std::string, const ClusterPlan*> by_name;
  size_t nodes = 0;
  for (const ClusterPlan& p : fleet) {
    by_name[p.name] = &p;
    nodes += static_cast<size_t>(p.inventory.nodes_size());
  }
  Clock::time_point t0 = Clock::now();
  if (absl::Status s = Declare(address, server->admin_token, fleet); !s.ok()) {
    return Fail(s.ToString());
  }
  const double declare_s = Sec(Clock::now() - t0);
  t0 = Clock::now();
  std::vector<std::string> tokens;
  if (absl::Status s = CreateAgentTokens(address, server->admin_token, fleet, &tokens); !s.ok()) {
    return Fail(s.ToString());
  }
  const double tokens_s = Sec(Clock::now() - t0);
  Progress(
      absl::StrFormat("%d clusters (%d nodes, %d GPUs) declared in %.2f s; agent tokens in %.2f s",
                      o.clusters, nodes, o.gpus, declare_s, tokens_s));

  // The agents: all dial at once, as after a server restart.
  FleetStats stats;
  Ticker ticker;
  std::vector<std::unique_ptr<SimAgent>> agents;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  const int connections = o.connections > 0 ? o.connections : o.clusters;
  for (int c = 0; c < connections; ++c) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 5 * 60 * 1000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20 * 1000);
    args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection per channel
    channels.push_back(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }
  agents.reserve(static_cast<size_t>(o.clusters));
  for (int c = 0; c < o.clusters; ++c) {
    agents.push_back(std::make_unique<SimAgent>(c, &fleet[c], tokens[c],
                                                channels[static_cast<size_t>(c % connections)],
                                                &ticker, &stats, o.seed * 7919 + c));
  }
  ticker.Start([&](std::vector<Ticker::Event>& due) {
    std::map<int, std::vector<std::pair<std::string, uint32_t>>> finished;
    for (Ticker::Event& e : due) {
      switch (e.kind) {
        case Ticker::kHeartbeat:
          agents[e.agent]->Heartbeat(e.gen);
          break;
        case Ticker::kReconnect:
          agents[e.agent]->Reconnect(e.gen);
          break;
        case Ticker::kFinish:
          finished[e.agent].emplace_back(std::move(e.id), e.attempt);
          break;
      }
    }
    for (auto& [agent, list] : finished) agents[agent]->Finish(list);
  });
  t0 = Clock::now();
  for (auto& a : agents) a->Connect();
  const Clock::time_point register_deadline = t0 + std::chrono::seconds(180);
  while (stats.clusters_registered.load() < o.clusters && Clock::now() < register_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double register_all_s = Sec(Clock::now() - t0);
  const int64_t registered = stats.clusters_registered.load();
  Progress(absl::StrFormat("%d of %d clusters registered in %.2f s (%d stream ends so far)",
                           registered, o.clusters, register_all_s, stats.stream_ends.load()));
  const double rss_after_register = StatusKib(server_pid, "VmRSS") / 1024;

  // The fill: long work on half the fleet (by default), placed before anything is measured.
  // Its end is read with List (no workload PENDING), not on a Watch: 11,000 submissions in a
  // few seconds make a Watch of every workload fall behind (RESOURCE_EXHAUSTED, "watcher too
  // slow") on this machine, whose two cores the server, PostgreSQL and this bench share.
  Submitter submitter(address, *user_token, 4);
  std::vector<v1::SubmitRequest> fill = MakeFill(o, rng);
  int fill_acked = 0;
  std::mutex fill_mu;
  int fill_errors = 0;
  t0 = Clock::now();
  for (v1::SubmitRequest& req : fill) {
    submitter.WaitBelow(32, Clock::now() + std::chrono::seconds(60));
    submitter.Submit(std::move(req), [&](const grpc::Status& s, const v1::SubmitResponse&) {
      std::lock_guard<std::mutex> lock(fill_mu);
      if (s.ok()) {
        ++fill_acked;
      } else if (++fill_errors <= 3) {
        std::cerr << "fleet: fill submit: " << s.error_message() << "\n";
      }
    });
  }
  submitter.WaitBelow(1, Clock::now() + std::chrono::seconds(60));
  const double fill_submit_s = Sec(Clock::now() - t0);
  int64_t fill_pending = -1;
  const Clock::time_point fill_deadline = Clock::now() + std::chrono::seconds(300);
  for (;;) {
    fill_pending = CountPending(address, *user_token);
    if (fill_pending == 0 || Clock::now() > fill_deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const double fill_s = Sec(Clock::now() - t0);
  Progress(absl::StrFormat(
      "fill: %d workloads (%.0f%% of the GPUs) submitted in %.2f s, all but %d placed after %.2f s",
      fill_acked, o.fill * 100, fill_submit_s, fill_pending, fill_s));

  // The fleet idle but for its heartbeats (and the fill running): the floor under the load.
  CpuSnapshot idle_start = TakeCpu(server_pid, postmaster);
  std::this_thread::sleep_for(std::chrono::duration<double>(o.idle_seconds));
  CpuSnapshot idle_end = TakeCpu(server_pid, postmaster);
  const double idle_s = Sec(idle_end.at - idle_start.at);
  const bool idle_measured = o.idle_seconds > 0;
  const double idle_server_cpu =
      idle_measured ? TicksToPercent(idle_end.server - idle_start.server, idle_s) : 0;
  const double idle_postgres_cpu =
      idle_measured ? TicksToPercent(PostgresTicks(idle_start, idle_end), idle_s) : 0;
  Progress(
      absl::StrFormat("idle (heartbeats only) for %.0f s: server %.1f%% CPU, PostgreSQL %.1f%%",
                      idle_s, idle_server_cpu, idle_postgres_cpu));

  // The Watch the latencies are read from.
  Watcher watcher(address, *user_token, &by_name);
  for (int i = 0; i < 200 && watcher.events() == 0; ++i) {
    // The stream subscribes a moment after it opens: poke until it delivers.
    v1::SubmitRequest poke = BaseRequest("poke", absl::StrCat("poke-", i), 1);
    poke.mutable_spec()->mutable_per_replica()->set_gpu_milli(100);
    submitter.Submit(std::move(poke), [](const grpc::Status&, const v1::SubmitResponse&) {});
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (watcher.events() == 0) {
    for (auto& a : agents) a->Stop();
    for (auto& a : agents) a->WaitStopped(Clock::now() + std::chrono::seconds(30));
    ticker.Stop();
    return Fail("the Watch delivered nothing");
  }

  // The steady load; the window is its last `seconds`.
  const int total = static_cast<int>(o.rate * (o.warmup_seconds + o.seconds));
  std::vector<Submission> subs(static_cast<size_t>(total));
  std::mutex subs_mu;
  std::vector<double> mix_weights;
  for (const Shape& s : Mix()) mix_weights.push_back(s.weight);
  std::discrete_distribution<size_t> pick_shape(mix_weights.begin(), mix_weights.end());
  std::atomic<bool> sampling{true};
  double rss_window_peak_kib = 0;
  std::thread sampler;
  CpuSnapshot cpu_start;
  CpuSnapshot cpu_end;
  int64_t hb_acked_start = 0;
  int64_t hb_sent_start = 0;
  int64_t statuses_acked_start = 0;
  SchedulerFigures sched_start;
  const Clock::time_point load_start = Clock::now();
  const Clock::time_point window_start =
      load_start +
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.warmup_seconds));
  const Clock::time_point window_end = window_start + std::chrono::duration_cast<Clock::duration>(
                                                          std::chrono::duration<double>(o.seconds));
  bool window_open = false;
  Progress(absl::StrFormat("load: %.1f submissions/s, %.0f s warm-up, %.0f s measured", o.rate,
                           o.warmup_seconds, o.seconds));
  for (int i = 0; i < total; ++i) {
    const Clock::time_point due =
        load_start + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(static_cast<double>(i) / o.rate));
    if (!window_open && due >= window_start) {
      std::this_thread::sleep_until(window_start);
      cpu_start = TakeCpu(server_pid, postmaster);
      hb_acked_start = stats.heartbeats_acked.load();
      hb_sent_start = stats.heartbeats_sent.load();
      statuses_acked_start = stats.statuses_acked.load();
      sched_start = ScrapeScheduler(server->http_port);
      stats.in_window = true;
      window_open = true;
      sampler = std::thread([&] {
        while (sampling.load()) {
          rss_window_peak_kib = std::max(rss_window_peak_kib, StatusKib(server_pid, "VmRSS"));
          std::this_thread::sleep_for(std::chrono::milliseconds(250));
        }
      });
    }
    std::this_thread::sleep_until(due);
    const size_t shape = pick_shape(rng);
    v1::SubmitRequest req = MakeSteady(shape, absl::StrCat("load-", i), rng);
    {
      std::lock_guard<std::mutex> lock(subs_mu);
      subs[i].shape = shape;
      subs[i].sent = Clock::now();
    }
    submitter.Submit(std::move(req), [&, i](const grpc::Status& s, const v1::SubmitResponse& r) {
      const Clock::time_point now = Clock::now();
      std::lock_guard<std::mutex> lock(subs_mu);
      subs[i].done = true;
      subs[i].acked = now;
      subs[i].ok = s.ok();
      if (s.ok()) {
        subs[i].id = r.workload().id();
      } else {
        std::cerr << "fleet: submit: " << s.error_code() << " " << s.error_message() << "\n";
      }
    });
  }
  std::this_thread::sleep_until(window_end);
  cpu_end = TakeCpu(server_pid, postmaster);
  const SchedulerFigures sched_end = ScrapeScheduler(server->http_port);
  stats.in_window = false;
  const int64_t hb_acked_window = stats.heartbeats_acked.load() - hb_acked_start;
  const int64_t hb_sent_window = stats.heartbeats_sent.load() - hb_sent_start;
  const int64_t statuses_acked_window = stats.statuses_acked.load() - statuses_acked_start;
  sampling = false;
  if (sampler.joinable()) sampler.join();
  const double rss_end_kib = StatusKib(server_pid, "VmRSS");
  const double rss_hwm_kib = StatusKib(server_pid, "VmHWM");

  // What was submitted in the window and is still on its way, for up to 15 s.
  submitter.WaitBelow(1, Clock::now() + std::chrono::seconds(30));
  std::vector<std::string> window_ids;
  {
    std::lock_guard<std::mutex> lock(subs_mu);
    for (const Submission& s : subs) {
      if (s.ok && s.sent >= window_start && s.sent < window_end) window_ids.push_back(s.id);
    }
  }
  const Clock::time_point grace = Clock::now() + std::chrono::seconds(15);
  while (watcher.CountPlaced(window_ids) < window_ids.size() && Clock::now() < grace) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  // Figures.
  const double window_s = Sec(cpu_end.at - cpu_start.at);
  std::vector<double> ack_to_placed, sent_to_placed, server_placed, submit_ms;
  std::vector<std::vector<double>> by_shape(Mix().size());
  std::vector<int> by_shape_unplaced(Mix().size(), 0);
  std::vector<std::string> unplaced;
  int submitted = 0, submit_errors = 0, placed_before_ack = 0;
  {
    std::lock_guard<std::mutex> lock(subs_mu);
    for (const Submission& s : subs) {
      if (s.sent < window_start || s.sent >= window_end) continue;
      ++submitted;
      if (!s.ok) {
        ++submit_errors;
        continue;
      }
      submit_ms.push_back(Ms(s.acked - s.sent));
      std::optional<Watcher::Placed> p = watcher.PlacedAt(s.id);
      if (!p) {
        unplaced.push_back(s.id);
        by_shape_unplaced[s.shape]++;
        continue;
      }
      if (p->at < s.acked) ++placed_before_ack;
      const double ms = std::max(0.0, Ms(p->at - s.acked));
      ack_to_placed.push_back(ms);
      sent_to_placed.push_back(Ms(p->at - s.sent));
      server_placed.push_back(p->server_ms);
      by_shape[s.shape].push_back(ms);
    }
  }
  const std::map<std::string, int> pending = PendingReasons(address, *user_token, unplaced);

  // The server's busiest threads over the window, each as "name/tid" (most of the server's
  // threads keep the process's name: the control loop is one of the "gpufed-server" ones).
  std::vector<std::pair<uint64_t, std::string>> ranked;
  for (const auto& [tid, thread] : cpu_end.server_threads) {
    auto before = cpu_start.server_threads.find(tid);
    const uint64_t start = before == cpu_start.server_threads.end() ? 0 : before->second.second;
    ranked.emplace_back(thread.second - std::min(thread.second, start),
                        absl::StrCat(thread.first, "/", tid));
  }
  std::sort(ranked.rbegin(), ranked.rend());
  nlohmann::json threads = nlohmann::json::object();
  for (size_t i = 0; i < ranked.size() && i < 5; ++i) {
    threads[ranked[i].second] = Round3(TicksToPercent(ranked[i].first, window_s));
  }
  const uint64_t pg_ticks = PostgresTicks(cpu_start, cpu_end);
  nlohmann::json shapes = nlohmann::json::object();
  for (size_t k = 0; k < Mix().size(); ++k) {
    nlohmann::json d = Dist(by_shape[k]);
    d["unplaced"] = by_shape_unplaced[k];
    shapes[Mix()[k].name] = d;
  }
  std::vector<double> register_ms, hb_rtt;
  std::map<std::string, int> end_reasons;
  {
    std::lock_guard<std::mutex> lock(stats.mu);
    register_ms = stats.register_ms;
    hb_rtt = stats.heartbeat_rtt_ms;
    end_reasons = stats.stream_end_reasons;
  }

  // Done: the agents hang up, the server stops.
  watcher.Stop();
  for (auto& a : agents) a->Stop();
  const Clock::time_point stop_deadline = Clock::now() + std::chrono::seconds(30);
  for (auto& a : agents) a->WaitStopped(stop_deadline);
  ticker.Stop();
  const CpuSnapshot bench_end = TakeCpu(server_pid, postmaster);
  server->process->Stop();
  // With the server stopped, so as not to disturb it.
  const PoolCopyFigures pool_copy = MeasurePoolCopy(fleet, 10);
  const double cycles = sched_end.cycles - sched_start.cycles;

  nlohmann::json out = {
      {"bench", "fleet"},
      {"clusters", o.clusters},
      {"gpus", o.gpus},
      {"nodes", nodes},
      {"connections", connections},
      {"heartbeat_interval_ms", o.heartbeat_interval_ms},
      {"rate_per_second", o.rate},
      {"fill", o.fill},
      {"window_seconds", Round3(window_s)},
      {"server_cpu_percent", Round3(TicksToPercent(cpu_end.server - cpu_start.server, window_s))},
      {"server_top_threads_cpu_percent", threads},
      {"postgres_cpu_percent", Round3(TicksToPercent(pg_ticks, window_s))},
      {"bench_cpu_percent", Round3(TicksToPercent(cpu_end.bench - cpu_start.bench, window_s))},
      {"server_rss_mib", Round3(rss_hwm_kib / 1024)},  // peak over the server's life (VmHWM)
      {"server_rss_window_peak_mib", Round3(rss_window_peak_kib / 1024)},
      {"server_rss_end_mib", Round3(rss_end_kib / 1024)},
      {"server_rss_after_register_mib", Round3(rss_after_register)},
      {"placement_latency_p50_ms", Round3(Percentile(ack_to_placed, 0.50))},
      {"placement_latency_p99_ms", Round3(Percentile(ack_to_placed, 0.99))},
      {"placement_latency_max_ms",
       Round3(ack_to_placed.empty()
                  ? 0
                  : *std::max_element(ack_to_placed.begin(), ack_to_placed.end()))},
      {"submit_to_placed_ms", Dist(sent_to_placed)},
      {"server_create_to_placed_ms", Dist(server_placed)},
      {"submit_ack_ms", Dist(submit_ms)},
      {"submitted", submitted},
      {"submit_errors", submit_errors},
      {"placed", ack_to_placed.size()},
      {"placed_before_ack", placed_before_ack},
      {"unplaced", unplaced.size()},
      {"unplaced_reasons", pending},
      {"by_shape", shapes},
      {"rule_violations", watcher.violations()},
      {"placements_checked", watcher.checked()},
      {"scheduler_cycles_per_second", Round3(cycles / window_s)},
      {"scheduler_cycle_ms_mean",
       Round3(cycles > 0 ? 1000 * (sched_end.cycle_seconds - sched_start.cycle_seconds) / cycles
                         : 0)},
      {"scheduler_placements", sched_end.placements - sched_start.placements},
      {"pool_copy_ms", Round3(pool_copy.ms)},
      {"pool_copy_allocations", pool_copy.allocations},
      {"heartbeats_per_second", Round3(static_cast<double>(hb_acked_window) / window_s)},
      {"heartbeats_sent_per_second", Round3(static_cast<double>(hb_sent_window) / window_s)},
      {"heartbeats_acknowledged", hb_acked_window},
      {"heartbeat_rtt_ms", Dist(hb_rtt)},
      {"statuses_acknowledged_per_second",
       Round3(static_cast<double>(statuses_acked_window) / window_s)},
      {"clusters_registered", registered},
      {"register_all_s", Round3(register_all_s)},
      {"register_ms", Dist(register_ms)},
      {"registrations", stats.registrations.load()},
      {"stream_ends", stats.stream_ends.load()},
      {"stream_end_reasons", end_reasons},
      {"assignments", stats.assignments.load()},
      {"inventory_updates", stats.inventory_updates.load()},
      {"fenced", stats.fenced.load()},
      {"fill_workloads", fill_acked},
      {"fill_pending", fill_pending},
      {"idle_seconds", Round3(idle_s)},
      {"idle_server_cpu_percent", Round3(idle_server_cpu)},
      {"idle_postgres_cpu_percent", Round3(idle_postgres_cpu)},
      {"fill_errors", fill_errors},
      {"fill_seconds", Round3(fill_s)},
      {"watch_restarts", watcher.restarts()},
      {"declare_s", Round3(declare_s)},
      {"tokens_s", Round3(tokens_s)},
      {"bench_cpu_percent_whole_run",
       Round3(TicksToPercent(bench_end.bench, Sec(bench_end.at - bench_start)))},
      {"run_seconds", Round3(Sec(Clock::now() - bench_start))},
  };
  std::cout << out.dump() << std::endl;
  return registered == o.clusters && submit_errors == 0 ? 0 : 1;
}

}  // namespace

void AddFleetOptions(CLI::App* fleet, FleetBenchOptions* o) {
  fleet->add_option("--clusters", o->clusters, "simulated clusters (agents in this process)")
      ->check(CLI::Range(1, 100000));
  fleet->add_option("--gpus", o->gpus, "GPUs in all, spread evenly over the clusters")
      ->check(CLI::Range(1, 10000000));
  fleet->add_option("--seconds", o->seconds, "measured window")->check(CLI::Range(1.0, 3600.0));
  fleet->add_option("--warmup", o->warmup_seconds, "seconds of load before the window")
      ->check(CLI::Range(0.0, 3600.0));
  fleet
      ->add_option("--rate", o->rate,
                   "submissions per second (0, the default: 20 per 100,000 GPUs, at least 0.5)")
      ->check(CLI::Range(0.0, 100000.0));
  fleet->add_option("--fill", o->fill, "share of the GPUs taken by long work before the load")
      ->check(CLI::Range(0.0, 0.95));
  fleet
      ->add_option("--idle", o->idle_seconds,
                   "seconds of heartbeats only after the fill, measured (0: skip)")
      ->check(CLI::Range(0.0, 3600.0));
  fleet
      ->add_option("--heartbeat-interval-ms", o->heartbeat_interval_ms,
                   "the server's heartbeat interval")
      ->check(CLI::Range(100, 600000));
  fleet
      ->add_option("--connections", o->connections,
                   "TCP connections the agent streams share (0: one per cluster)")
      ->check(CLI::Range(0, 100000));
  fleet->add_option("--seed", o->seed, "fleet and load seed");
}

int RunFleetBench(const FleetBenchOptions& options) {
  if (options.gpus < options.clusters) {
    std::cerr << "gpufed-bench fleet: --gpus must be at least --clusters\n";
    return 2;
  }
  return Run(options);
}

}  // namespace gpufed::bench
