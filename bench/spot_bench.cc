#include "bench/spot_bench.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "gpufed/v1/cluster_service.grpc.pb.h"
#include "gpufed/v1/workload_service.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/support/process_harness.h"

namespace gpufed::bench {
namespace {

using gpufed::testing::ChildProcess;

constexpr char kSpotCluster[] = "spot-a";
constexpr char kOtherCluster[] = "ondemand-b";

int Fail(const std::string& what) {
  std::cerr << "gpufed-bench spot: " << what << "\n";
  return 1;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!pred()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

absl::Time FromProto(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

// One "spot reclaim N: ..." line of the agent's log.
struct ReclaimLine {
  int number = 0;
  bool begins = false;  // "the provider takes back ..."; else "... back after ..."
  absl::Time at;
  std::string text;
};

std::vector<ReclaimLine> ReclaimLines(const std::string& log_path) {
  std::vector<ReclaimLine> out;
  std::ifstream in(log_path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find(" spot reclaim ");
    if (at == std::string::npos) continue;
    const bool begins = absl::StrContains(line, ": the provider takes back ");
    if (!begins && !absl::StrContains(line, " spot node(s) back after ")) continue;
    const std::vector<std::string> words = absl::StrSplit(line, ' ');
    ReclaimLine r;
    std::string err;
    if (words.size() < 5 || !absl::ParseTime("%Y-%m-%dT%H:%M:%E*S%Ez", words[0], &r.at, &err)) {
      continue;
    }
    std::string number = words[4];
    if (!number.empty() && number.back() == ':') number.pop_back();
    if (!absl::SimpleAtoi(number, &r.number)) continue;
    r.begins = begins;
    r.text = line.substr(at + 1);
    out.push_back(std::move(r));
  }
  return out;
}

// The line of reclaim `number` that begins it (or that ends it); nullopt until it is written.
std::optional<ReclaimLine> FindLine(const std::string& log_path, int number, bool begins) {
  for (ReclaimLine& r : ReclaimLines(log_path)) {
    if (r.number == number && r.begins == begins) return std::move(r);
  }
  return std::nullopt;
}

class SpotBench {
 public:
  SpotBench(SpotBenchTarget target, SpotBenchOptions options) : t_(std::move(target)), o_(options) {
    auto channel = gpufed::testing::Connect(t_.address);
    clusters_ = v1::ClusterService::NewStub(channel);
    workloads_ = v1::WorkloadService::NewStub(channel);
  }

  ~SpotBench() {
    if (watch_ctx_ != nullptr) watch_ctx_->TryCancel();
    if (watcher_.joinable()) watcher_.join();
    for (auto& agent : agents_) {
      if (agent) agent->Stop();
    }
  }

  int Run();

 private:
  absl::Status StartAgent(const std::string& cluster, std::vector<std::string> extra_args) {
    auto token = gpufed::testing::CreateAgentToken(t_.address, t_.admin_token, cluster);
    if (!token.ok()) return token.status();
    gpufed::testing::AgentOptions ao;
    ao.server_address = t_.address;
    ao.token = *token;
    ao.topology = gpufed::testing::SourceDir() + "/bench/topologies/" + cluster + ".yaml";
    ao.work_dir = t_.dir + "/" + cluster;
    ao.log_path = LogOf(cluster);
    ao.extra_args = std::move(extra_args);
    auto agent = gpufed::testing::StartAgent(ao);
    if (!agent.ok()) return agent.status();
    agents_.push_back(*std::move(agent));
    const bool ready = WaitFor(
        [&] {
          grpc::ClientContext ctx;
          ctx.AddMetadata("authorization", "Bearer " + t_.admin_token);
          v1::GetClusterRequest req;
          req.set_name(cluster);
          v1::Cluster c;
          return clusters_->GetCluster(&ctx, req, &c).ok() && c.state() == v1::CLUSTER_STATE_READY;
        },
        absl::Seconds(30));
    if (!ready) return absl::DeadlineExceededError(cluster + " did not register within 30 s");
    return absl::OkStatus();
  }

  [[nodiscard]] std::string LogOf(const std::string& cluster) const {
    return t_.dir + "/" + cluster + ".log";
  }

  // Submits a job of `gpus` GPUs that runs for a day on the sim backend, restarts after a node
  // failure (up to 100 attempts), tolerates spot when `spot`, and may use only `cluster` (empty:
  // any). Its id, or "" on failure.
  std::string Submit(const std::string& key, uint32_t gpus, bool spot, const std::string& cluster) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + t_.token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::SubmitRequest req;
    v1::WorkloadSpec* spec = req.mutable_spec();
    spec->set_tenant(t_.tenant);
    spec->set_project("bench");
    spec->set_name("spot-bench");
    spec->set_idempotency_key(key);
    spec->set_replicas(1);
    spec->mutable_per_replica()->set_gpus(gpus);
    spec->set_workload_class(v1::WORKLOAD_CLASS_BATCH);
    spec->mutable_estimated_duration()->set_seconds(int64_t{24} * 3600);
    spec->mutable_retry()->set_max_attempts(100);
    spec->mutable_retry()->add_on(v1::RETRY_ON_NODE_FAILURE);
    spec->mutable_placement()->set_spot_tolerated(spot);
    if (!cluster.empty()) spec->mutable_placement()->add_clusters(cluster);
    v1::SubmitResponse resp;
    const grpc::Status s = workloads_->Submit(&ctx, req, &resp);
    if (!s.ok()) std::cerr << "submit " << key << ": " << s.error_message() << "\n";
    return s.ok() ? resp.workload().id() : "";
  }

  v1::Workload Get(const std::string& id) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + t_.token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::GetWorkloadRequest req;
    req.set_id(id);
    v1::Workload w;
    if (!workloads_->Get(&ctx, req, &w).ok()) w.Clear();
    return w;
  }

  bool Cancel(const std::string& id) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + t_.token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::CancelRequest req;
    req.set_id(id);
    v1::Workload w;
    return workloads_->Cancel(&ctx, req, &w).ok();
  }

  // Every one of `ids` RUNNING; with `spot_only`, each on a spot node.
  bool AllRunning(const std::vector<std::string>& ids, bool spot_only) {
    for (const std::string& id : ids) {
      const v1::Workload w = Get(id);
      if (w.state() != v1::WORKLOAD_STATE_RUNNING || w.assignment().replicas_size() == 0) {
        return false;
      }
      if (spot_only && !absl::StartsWith(w.assignment().replicas(0).node(), "spot-")) return false;
    }
    return true;
  }

  bool Ended(const std::string& id) {
    const v1::WorkloadState s = Get(id).state();
    return s == v1::WORKLOAD_STATE_CANCELLED || s == v1::WORKLOAD_STATE_SUCCEEDED ||
           s == v1::WORKLOAD_STATE_FAILED;
  }

  // Starts a Watch of every workload that records each placement: (id, attempt) -> (event time,
  // cluster).
  absl::Status StartWatch() {
    watch_channel_ = gpufed::testing::Connect(t_.address);
    watch_stub_ = v1::WorkloadService::NewStub(watch_channel_);
    watch_ctx_ = std::make_unique<grpc::ClientContext>();
    watch_ctx_->AddMetadata("authorization", "Bearer " + t_.token);
    v1::WatchRequest req;
    watch_ = watch_stub_->Watch(watch_ctx_.get(), req);
    watcher_ = std::thread([this] {
      v1::WorkloadEvent e;
      while (watch_->Read(&e)) {
        if (e.to_state() != v1::WORKLOAD_STATE_PLACED) continue;
        absl::MutexLock lock(&mu_);
        placed_[{e.workload().id(), e.workload().attempts()}] = {
            FromProto(e.time()), e.workload().assignment().cluster()};
      }
      absl::MutexLock lock(&mu_);
      watch_ended_ = true;
    });
    return absl::OkStatus();
  }

  // When `id` was placed as attempt `attempt`, and on which cluster; nullopt if not (yet).
  std::optional<std::pair<absl::Time, std::string>> Placed(const std::string& id,
                                                           uint32_t attempt) {
    absl::MutexLock lock(&mu_);
    auto it = placed_.find({id, attempt});
    if (it == placed_.end()) return std::nullopt;
    return it->second;
  }

  bool WatchEnded() {
    absl::MutexLock lock(&mu_);
    return watch_ended_;
  }

  // Waits until every one of `ids` is placed at an attempt after `before[i]`, on `cluster`; the
  // seconds from `since` to each placement go to `out` (and from `since2`, when given, to
  // `out2`).
  absl::Status AwaitPlacements(const std::vector<std::string>& ids,
                               const std::vector<uint32_t>& before, const std::string& cluster,
                               absl::Time since, std::vector<double>* out, absl::Duration timeout,
                               std::optional<absl::Time> since2 = std::nullopt,
                               std::vector<double>* out2 = nullptr) {
    std::vector<bool> done(ids.size(), false);
    size_t left = ids.size();
    const absl::Time deadline = absl::Now() + timeout;
    while (left > 0) {
      if (WatchEnded()) return absl::UnavailableError("the Watch stream ended");
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat(left, " workload(s) not placed on ",
                                                        cluster, " within ",
                                                        absl::FormatDuration(timeout)));
      }
      for (size_t i = 0; i < ids.size(); ++i) {
        if (done[i]) continue;
        auto placed = Placed(ids[i], before[i] + 1);
        if (!placed) continue;
        if (placed->second != cluster) {
          return absl::InternalError(absl::StrCat("workload ", ids[i], " placed on ",
                                                  placed->second, ", expected ", cluster));
        }
        done[i] = true;
        --left;
        out->push_back(absl::ToDoubleSeconds(placed->first - since));
        if (since2 && out2 != nullptr)
          out2->push_back(absl::ToDoubleSeconds(placed->first - *since2));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return absl::OkStatus();
  }

  std::vector<uint32_t> Attempts(const std::vector<std::string>& ids) {
    std::vector<uint32_t> out;
    out.reserve(ids.size());
    for (const std::string& id : ids) out.push_back(Get(id).attempts());
    return out;
  }

  // Submits `jobs` workloads allowed on either cluster while ondemand-b is full, waits until
  // they run on spot-a's spot nodes, then frees ondemand-b. Returns their ids (empty on failure).
  std::vector<std::string> PlaceElsewhereCase(int round) {
    const std::string blocker = Submit(absl::StrCat("b-blocker-", round), 8, false, kOtherCluster);
    if (blocker.empty() ||
        !WaitFor([&] { return AllRunning({blocker}, false); }, absl::Seconds(30))) {
      return {};
    }
    std::vector<std::string> ids;
    for (int j = 0; j < o_.jobs; ++j) {
      ids.push_back(Submit(absl::StrCat("elsewhere-", round, "-", j), 1, true, ""));
      if (ids.back().empty()) return {};
    }
    if (!WaitFor([&] { return AllRunning(ids, true); }, absl::Seconds(30))) return {};
    if (!Cancel(blocker) || !WaitFor([&] { return Ended(blocker); }, absl::Seconds(30))) return {};
    return ids;
  }

  const SpotBenchTarget t_;
  const SpotBenchOptions o_;
  std::unique_ptr<v1::ClusterService::Stub> clusters_;
  std::unique_ptr<v1::WorkloadService::Stub> workloads_;
  std::vector<std::unique_ptr<ChildProcess>> agents_;

  std::shared_ptr<grpc::Channel> watch_channel_;
  std::unique_ptr<v1::WorkloadService::Stub> watch_stub_;
  std::unique_ptr<grpc::ClientContext> watch_ctx_;
  std::unique_ptr<grpc::ClientReader<v1::WorkloadEvent>> watch_;
  std::thread watcher_;
  absl::Mutex mu_;
  std::map<std::pair<std::string, uint32_t>, std::pair<absl::Time, std::string>> placed_
      ABSL_GUARDED_BY(mu_);
  bool watch_ended_ ABSL_GUARDED_BY(mu_) = false;
};

int SpotBench::Run() {
  if (absl::Status s = StartWatch(); !s.ok()) return Fail(s.ToString());
  // ondemand-b first; spot-a's reclaim schedule starts with its agent.
  if (absl::Status s = StartAgent(kOtherCluster, {}); !s.ok()) return Fail(s.ToString());
  if (absl::Status s = StartAgent(
          kSpotCluster, {absl::StrCat("--spot-reclaim-every=", absl::FormatDuration(o_.every)),
                         absl::StrCat("--spot-reclaim-for=", absl::FormatDuration(o_.away))});
      !s.ok()) {
    return Fail(s.ToString());
  }
  const std::string log = LogOf(kSpotCluster);
  // spot-a's on-demand node is full for the whole run: work that does not tolerate spot.
  const std::string a_blocker = Submit("a-blocker", 8, false, kSpotCluster);
  if (a_blocker.empty() ||
      !WaitFor([&] { return AllRunning({a_blocker}, false); }, absl::Seconds(30))) {
    return Fail("the on-demand blocker did not run on spot-a");
  }
  // "none": kept to spot-a; they wait for the spot nodes at every reclaim and go back there.
  std::vector<std::string> kept;
  for (int j = 0; j < o_.jobs; ++j) {
    kept.push_back(Submit(absl::StrCat("kept-", j), 1, true, kSpotCluster));
    if (kept.back().empty()) return Fail("submit failed");
  }
  if (!WaitFor([&] { return AllRunning(kept, true); }, absl::Seconds(30))) {
    return Fail("the kept-to-spot-a work did not run on spot nodes");
  }
  // "elsewhere": allowed on both clusters, put on spot-a's spot nodes while ondemand-b is full.
  std::vector<std::string> elsewhere = PlaceElsewhereCase(0);
  if (elsewhere.empty()) return Fail("could not put the elsewhere case on spot nodes");

  std::vector<double> elsewhere_s, none_s, none_after_return_s;
  for (int run = 1; run <= o_.runs; ++run) {
    if (FindLine(log, run, true)) {
      return Fail(absl::StrCat("reclaim ", run,
                               " came before the work was in place: --every is too short"));
    }
    const std::vector<uint32_t> elsewhere_before = Attempts(elsewhere);
    const std::vector<uint32_t> kept_before = Attempts(kept);
    std::optional<ReclaimLine> began;
    if (!WaitFor([&] { return (began = FindLine(log, run, true)).has_value(); },
                 o_.every + absl::Seconds(30))) {
      return Fail(absl::StrCat("reclaim ", run, " did not come"));
    }
    for (const std::string& id : elsewhere) {
      if (!absl::StrContains(began->text, id)) {
        return Fail(absl::StrCat("reclaim ", run, " did not stop ", id, ": ", began->text));
      }
    }
    if (absl::Status s = AwaitPlacements(elsewhere, elsewhere_before, kOtherCluster, began->at,
                                         &elsewhere_s, absl::Seconds(60));
        !s.ok()) {
      return Fail(absl::StrCat("reclaim ", run, ", elsewhere case: ", s.ToString()));
    }
    std::optional<ReclaimLine> back;
    if (!WaitFor([&] { return (back = FindLine(log, run, false)).has_value(); },
                 o_.away + absl::Seconds(60))) {
      return Fail(absl::StrCat("the spot nodes of reclaim ", run, " did not come back"));
    }
    if (absl::Status s = AwaitPlacements(kept, kept_before, kSpotCluster, began->at, &none_s,
                                         absl::Seconds(60), back->at, &none_after_return_s);
        !s.ok()) {
      return Fail(absl::StrCat("reclaim ", run, ", no-capacity case: ", s.ToString()));
    }
    const size_t n = elsewhere.size();
    std::cerr
        << "reclaim " << run << ": " << n << " workload(s) placed on " << kOtherCluster << " after "
        << *std::max_element(elsewhere_s.end() - static_cast<std::ptrdiff_t>(n), elsewhere_s.end())
        << " s (slowest); " << kept.size() << " kept to " << kSpotCluster << " placed again "
        << *std::max_element(none_s.end() - static_cast<std::ptrdiff_t>(kept.size()), none_s.end())
        << " s after the reclaim, "
        << *std::max_element(none_after_return_s.end() - static_cast<std::ptrdiff_t>(kept.size()),
                             none_after_return_s.end())
        << " s after the spot nodes came back (" << absl::FormatDuration(back->at - began->at)
        << " away)\n";
    if (run == o_.runs) break;
    // The elsewhere case again, on spot nodes, before the next reclaim.
    for (const std::string& id : elsewhere) {
      if (!Cancel(id)) return Fail("cancel failed");
    }
    if (!WaitFor(
            [&] {
              return std::all_of(elsewhere.begin(), elsewhere.end(),
                                 [&](const std::string& id) { return Ended(id); });
            },
            absl::Seconds(30))) {
      return Fail("the moved work did not end when cancelled");
    }
    elsewhere = PlaceElsewhereCase(run);
    if (elsewhere.empty()) return Fail("could not put the elsewhere case on spot nodes again");
  }

  auto figures = [](const std::vector<double>& v) {
    return nlohmann::json{{"p50", Percentile(v, 0.50)},
                          {"p99", Percentile(v, 0.99)},
                          {"max", v.empty() ? 0.0 : *std::max_element(v.begin(), v.end())},
                          {"n", v.size()}};
  };
  const nlohmann::json out = {
      {"bench", "spot"},
      {"runs", o_.runs},
      {"jobs_per_case", o_.jobs},
      {"reclaim_every_s", absl::ToDoubleSeconds(o_.every)},
      {"reclaim_for_s", absl::ToDoubleSeconds(o_.away)},
      // Capacity elsewhere (ondemand-b): reclaim (agent's report) to PLACED; target <= 5 s.
      {"elsewhere_reclaim_to_placed_s", figures(elsewhere_s)},
      // No capacity until the spot nodes return: reclaim to PLACED (target <= 60 s) and the
      // nodes' return (the agent's report) to PLACED.
      {"none_reclaim_to_placed_s", figures(none_s)},
      {"none_return_to_placed_s", figures(none_after_return_s)},
  };
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace

int RunSpotBench(const SpotBenchTarget& target, const SpotBenchOptions& options) {
  if (options.jobs < 1 || options.jobs > 8) return Fail("--jobs: 1..8");
  if (options.away <= absl::ZeroDuration() || options.away >= options.every) {
    return Fail("--for must be > 0 and shorter than --every");
  }
  SpotBench bench(target, options);
  return bench.Run();
}

}  // namespace gpufed::bench
