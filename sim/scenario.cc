#include "sim/scenario.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "auth/principal.h"
#include "federation/agent_registry.h"
#include "federation/control_loop.h"
#include "federation/control_plane.h"
#include "federation/gpu_catalog.h"
#include "federation/ports.h"
#include "federation/quota.h"
#include "federation/routing.h"
#include "federation/scheduler.h"
#include "federation/status_macros.h"
#include "sim/memory_store.h"

namespace gpufed::sim {
namespace {

// What the control plane sends the simulated agent of one cluster.
class SimChannel final : public AgentChannel {
 public:
  void SendRegistered(const Cluster& /*cluster*/) override {}
  void SendAssignments(const std::vector<Workload>& workloads) override {
    assigned.insert(assigned.end(), workloads.begin(), workloads.end());
  }
  void SendCancels(const std::vector<WorkloadId>& ids) override {
    cancels.insert(cancels.end(), ids.begin(), ids.end());
  }
  void Close(CloseReason /*reason*/, const std::string& /*why*/) override {}

  std::vector<Workload> assigned;
  std::vector<WorkloadId> cancels;
};

class AlwaysLeader final : public LeaderElector {
 public:
  bool TryAcquire() override { return true; }
  bool StillHeld() override { return true; }
  void Release() override {}
};

class NoWatchers final : public EventSink {
 public:
  void Publish(const std::vector<WorkloadEvent>& /*events*/) override {}
};

Cluster MakeCluster(const ScenarioCluster& spec) {
  Cluster c;
  c.info.name = spec.name;
  c.info.provider = spec.provider;
  c.info.region = spec.region;
  c.info.jurisdiction = spec.jurisdiction;
  c.info.compliance_labels = spec.compliance_labels;
  const std::optional<GpuModel> model = FindGpuModel(spec.model);
  for (int n = 0; n < spec.nodes; ++n) {
    NodeInfo node;
    node.name = absl::StrCat(spec.name, "-n", n);
    node.rack = absl::StrCat(spec.name, "-r", n / 4);
    if (n >= spec.nodes - spec.spot_nodes) {
      node.labels[std::string(kCapacityTypeLabel)] =
          std::string(CapacityTypeName(CapacityType::kSpot));
    }
    for (int g = 0; g < spec.gpus_per_node; ++g) {
      GpuInfo gpu;
      gpu.uuid = absl::StrCat("GPU-", node.name, "-", g);
      gpu.index = static_cast<uint32_t>(g);
      gpu.model = spec.model;
      gpu.memory_mib = model ? model->memory_mib : 0;
      gpu.mig_capable = model && model->mig_capable;
      gpu.nvlink_domain = absl::StrCat(node.name, "-nvl");
      node.gpus.push_back(std::move(gpu));
    }
    c.nodes.push_back(std::move(node));
  }
  return c;
}

// The admin's side of a scenario cluster: its capacity type, prices and RTTs, in force from `from`.
ClusterDeclaration Declare(const ScenarioCluster& spec, Timestamp from) {
  ClusterDeclaration d;
  d.cluster = spec.name;
  d.default_capacity = spec.capacity;
  for (const auto& [capacity, micros] : spec.price_micros) {
    d.prices.push_back({spec.model, "", capacity, micros, from});
  }
  d.rtt_micros = spec.rtt_micros;
  return d;
}

bool Has(const std::vector<std::string>& list, const std::string& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

// The hard rule of `rules` a placement on `cluster` (on capacity of type `capacity`) breaks, from
// the scenario's own description of the cluster; "" when none.
std::string Violation(const ScenarioCluster& c, CapacityType capacity,
                      const PlacementConstraints& rules) {
  if (!rules.jurisdictions.empty() && !Has(rules.jurisdictions, c.jurisdiction)) {
    return "jurisdiction";
  }
  for (const std::string& label : rules.compliance_labels) {
    if (!Has(c.compliance_labels, label)) return "compliance";
  }
  if (!rules.providers.empty() && !Has(rules.providers, c.provider)) return "provider";
  if (!rules.regions.empty() && !Has(rules.regions, c.region)) return "region";
  if (!rules.clusters.empty() && !Has(rules.clusters, c.name)) return "clusters";
  if (Has(rules.denied_clusters, c.name)) return "denied";
  if (rules.max_rtt_micros > 0) {
    auto it = c.rtt_micros.find(rules.client_region);
    if (it == c.rtt_micros.end() || it->second > rules.max_rtt_micros) return "rtt";
  }
  if (capacity == CapacityType::kSpot && !rules.spot_tolerated) return "spot";
  if (rules.max_price_per_gpu_hour_micros > 0 && capacity != CapacityType::kCommitted) {
    auto it = c.price_micros.find(capacity);
    if (it == c.price_micros.end() || it->second > rules.max_price_per_gpu_hour_micros) {
      return "price";
    }
  }
  return "";
}

// MakeCluster names nodes "<cluster>-n<i>"; the last `spot_nodes` are spot.
CapacityType CapacityOfNode(const ScenarioCluster& c, const std::string& node) {
  int index = 0;
  if (node.size() > c.name.size() + 2 && absl::SimpleAtoi(node.substr(c.name.size() + 2), &index) &&
      index >= c.nodes - c.spot_nodes) {
    return CapacityType::kSpot;
  }
  return c.capacity;
}

struct Running {
  std::string tenant;
  std::string cluster;
  int64_t milli = 0;
  std::optional<double> price_per_hour;  // currency units; nullopt: unpriced
  Timestamp ends{};
  std::optional<Timestamp> stops;  // asked to stop: it does at this time
  uint32_t attempt = 0;
};

}  // namespace

namespace {

absl::StatusOr<ScenarioReport> RunOnce(const Scenario& scenario, VictimOrder victim_order,
                                       std::optional<Objective> objective = std::nullopt) {
  if (scenario.cycle <= std::chrono::seconds::zero()) {
    return absl::InvalidArgumentError("cycle: must be positive");
  }
  if (scenario.clusters.empty()) return absl::InvalidArgumentError("clusters: at least one");
  if (scenario.duration / scenario.cycle > 10'000'000) {
    return absl::InvalidArgumentError("duration: more than 10,000,000 cycles");
  }
  FakeClock clock;
  MemoryStore store(&clock);
  SchedulerOptions options;
  options.fair_share_half_life = scenario.half_life;
  options.victim_order = victim_order;
  options.reclaim_min_runtime = scenario.reclaim_min_runtime;
  options.reborrow_backoff = scenario.reborrow_backoff;
  options.starvation_bound = scenario.starvation_bound;
  Scheduler scheduler(&store, &store, options, &store, &clock);
  AgentRegistry agents(&clock);
  NoWatchers watchers;
  ControlPlanePorts ports;
  ports.workloads = &store;
  ports.clusters = &store;
  ports.tenants = &store;
  ports.quotas = &store;
  ports.events = &watchers;
  ports.agents = &agents;
  ports.scheduler = &scheduler;
  ports.clock = &clock;
  ControlPlane plane(ports);
  AlwaysLeader leader;
  ControlLoopOptions loop_options;
  // Simulated agents never go quiet; the queue is re-read (and quotas with it) now and then.
  loop_options.heartbeat_timeout = std::chrono::hours(24 * 365 * 10);
  loop_options.check_interval = std::chrono::hours(24 * 365);
  loop_options.reload_interval = std::chrono::minutes(10);
  loop_options.archive_after = std::chrono::hours(1);
  ControlLoop loop(&plane, &scheduler, &agents, &leader, &clock, nullptr, loop_options);
  const auth::Principal admin{"sim", auth::Role::kPlatformAdmin, "", ""};

  // The pool; every GPU of a cluster is of its one model.
  std::map<std::string, std::string> model_by_cluster;
  for (const ScenarioCluster& c : scenario.clusters) model_by_cluster[c.name] = c.model;
  const GpuModelLookup model_of = [&](const std::string& cluster, const std::string& /*node*/,
                                      const std::string& /*uuid*/) {
    auto it = model_by_cluster.find(cluster);
    return it == model_by_cluster.end() ? std::string() : it->second;
  };
  std::map<std::string, std::shared_ptr<SimChannel>> channels;
  std::map<std::string, std::shared_ptr<AgentLink>> links;
  int64_t capacity_milli = 0;
  for (const ScenarioCluster& c : scenario.clusters) {
    Cluster cluster = MakeCluster(c);
    capacity_milli += int64_t{c.nodes} * c.gpus_per_node * 1000;
    auto channel = std::make_shared<SimChannel>();
    ASSIGN_OR_RETURN(
        std::shared_ptr<AgentLink> link,
        plane.RegisterAgent({.subject = "agent", .role = auth::Role::kAgent, .cluster = c.name},
                            cluster.info, cluster.nodes, {}, channel));
    channels[c.name] = channel;
    links[c.name] = std::move(link);
  }
  std::map<std::string, const ScenarioCluster*> described;
  std::vector<ClusterDeclaration> declarations;
  for (const ScenarioCluster& c : scenario.clusters) {
    described[c.name] = &c;
    declarations.push_back(Declare(c, clock.Now() - std::chrono::hours(1)));
  }
  RETURN_IF_ERROR(plane.ApplyDeclarations(admin, declarations, false).status());
  std::map<std::string, ClusterDeclaration> declared_by_name;
  for (const ClusterDeclaration& d : declarations) declared_by_name[d.cluster] = d;
  // Tenants, projects, weights, quotas.
  std::map<std::string, int64_t> weights;
  for (const ScenarioTenant& t : scenario.tenants) {
    RETURN_IF_ERROR(store.CreateTenant(Tenant{t.name, t.name, {}}).status());
    weights[t.name] = t.weight;
    if (t.weight != 1)
      RETURN_IF_ERROR(plane.SetShareWeight(admin, {t.name, "", t.weight}).status());
    for (const ScenarioProject& p : t.projects) {
      RETURN_IF_ERROR(store.CreateProject(Project{t.name, p.name, {}}).status());
      if (p.weight != 1) {
        RETURN_IF_ERROR(plane.SetShareWeight(admin, {t.name, p.name, p.weight}).status());
      }
    }
    for (const Quota& q : t.quotas) RETURN_IF_ERROR(plane.SetQuota(admin, q, false).status());
    for (const ScenarioProject& p : t.projects) {
      for (const Quota& q : p.quotas) RETURN_IF_ERROR(plane.SetQuota(admin, q, false).status());
    }
  }

  // Arrivals, generated up front in time order.
  std::mt19937_64 rng(scenario.seed);
  struct Arrival {
    std::chrono::seconds at;
    size_t stream;
  };
  std::vector<Arrival> arrivals;
  for (size_t s = 0; s < scenario.streams.size(); ++s) {
    const ScenarioStream& stream = scenario.streams[s];
    if (!weights.contains(stream.tenant)) {
      return absl::InvalidArgumentError(
          absl::StrCat("streams[", s, "].tenant: \"", stream.tenant, "\" is not a tenant"));
    }
    const std::chrono::seconds end = stream.end.value_or(scenario.duration);
    if (stream.count > 0) {
      const double step = std::chrono::duration<double>(end - stream.start).count() /
                          static_cast<double>(stream.count);
      for (int64_t i = 0; i < stream.count; ++i) {
        arrivals.push_back({stream.start + std::chrono::seconds(
                                               static_cast<int64_t>(step * static_cast<double>(i))),
                            s});
      }
    } else if (stream.per_hour > 0) {
      std::exponential_distribution<double> gap(stream.per_hour / 3600.0);
      for (double t = static_cast<double>(stream.start.count()) + gap(rng);
           t < static_cast<double>(end.count()); t += gap(rng)) {
        arrivals.push_back({std::chrono::seconds(static_cast<int64_t>(t)), s});
      }
    }
  }
  std::stable_sort(arrivals.begin(), arrivals.end(),
                   [](const Arrival& a, const Arrival& b) { return a.at < b.at; });

  ScenarioReport report;
  report.name = scenario.name;
  std::map<std::string, TenantReport> tenants;
  double total_weight = 0;
  for (const ScenarioTenant& t : scenario.tenants) total_weight += static_cast<double>(t.weight);
  for (const ScenarioTenant& t : scenario.tenants) {
    TenantReport& r = tenants[t.name];
    r.name = t.name;
    r.weight = t.weight;
    r.fair_share = static_cast<double>(t.weight) / total_weight;
  }
  std::map<WorkloadId, Running> running;
  std::vector<double> client_rtts;  // ms, one per placement of a workload with a client region
  report.routing.objective = objective ? std::string(ObjectiveName(*objective)) : "as given";
  // Owners (work within its guarantee left waiting): when first seen waiting, and the cycles
  // spent waiting on victims to stop.
  struct OwnerWait {
    int64_t first_cycle = 0;
    int64_t stopping_cycles = 0;
    bool reclaimed = false;  // a reclaim was decided for it
    std::set<WorkloadId> victims;
  };
  std::map<WorkloadId, OwnerWait> owners;
  // Waiting for a first placement: since which cycle; and per tenant the waits of those placed.
  std::map<WorkloadId, int64_t> submitted_in;
  std::map<std::string, double> wait_sum;
  std::map<std::string, int64_t> placed_count;
  std::map<std::string, double> share_sum;  // tenant -> sum of its share after warm-up
  int64_t counted_cycles = 0;
  double utilisation_sum = 0;

  const Timestamp origin = clock.Now();
  auto since_origin = [&] {
    return std::chrono::duration_cast<std::chrono::seconds>(clock.Now() - origin);
  };
  size_t next_arrival = 0;
  const int64_t cycles = scenario.duration / scenario.cycle;
  for (int64_t cycle = 0; cycle < cycles; ++cycle) {
    const std::chrono::seconds now = since_origin();
    // Submissions due.
    for (; next_arrival < arrivals.size() && arrivals[next_arrival].at <= now; ++next_arrival) {
      const ScenarioStream& stream = scenario.streams[arrivals[next_arrival].stream];
      WorkloadSpec spec;
      spec.tenant = stream.tenant;
      spec.project = stream.project;
      spec.name = "sim";
      spec.priority = stream.priority;
      spec.replicas = stream.replicas;
      spec.gpus_per_replica = stream.gpus[rng() % stream.gpus.size()];
      spec.workload_class = WorkloadClass::kBatch;
      spec.retry.max_attempts = RetryPolicy::kMaxAttemptsLimit;
      spec.retry.on_preemption = true;
      spec.checkpoint_interval_ms = stream.checkpoint_every.count() * 1000;
      spec.placement = stream.placement;
      if (objective) spec.placement.objective = *objective;
      auto seconds = static_cast<double>(stream.duration.count());
      if (!stream.fixed_duration)
        seconds = std::exponential_distribution<double>(1.0 / seconds)(rng);
      spec.estimated_duration_ms = std::max<int64_t>(1000, static_cast<int64_t>(seconds * 1000));
      absl::StatusOr<SubmitResult> submitted;
      plane.Submit(admin, spec, absl::InfiniteFuture(),
                   [&](absl::StatusOr<SubmitResult> r) { submitted = std::move(r); });
      RETURN_IF_ERROR(submitted.status());
      ++tenants[stream.tenant].submitted;
      submitted_in[submitted->workload.id] = cycle;
      ++report.submitted;
    }
    // The agents: start what they were given, stop what they were told to (after the grace),
    // end what has run its course.
    const Timestamp wall = clock.Now();
    for (auto& [name, channel] : channels) {
      std::vector<AgentReport> reports;
      for (const Workload& w : std::exchange(channel->assigned, {})) {
        Running r;
        r.tenant = w.spec.tenant;
        r.cluster = name;
        r.milli = HeldResources(w, model_of)[kGpuEquivalents];
        // Priced as it runs: what the capacity it took costs per hour.
        const ScenarioCluster& c = *described.at(name);
        const ClusterDeclaration& book = declared_by_name.at(name);
        double price = 0;
        bool priced = true;
        for (const ReplicaAssignment& replica : w.assignment.replicas) {
          const std::optional<int64_t> micros =
              ReplicaPricePerHour(book, w.spec, c.model, CapacityOfNode(c, replica.node), wall);
          priced = priced && micros.has_value();
          price += static_cast<double>(micros.value_or(0)) / 1e6;
        }
        if (priced) r.price_per_hour = price;
        r.ends = wall + std::chrono::milliseconds(w.spec.estimated_duration_ms);
        r.attempt = w.attempts;
        running[w.id] = r;
        reports.push_back({w.id, WorkloadState::kRunning, 0, "", wall, w.attempts});
      }
      for (WorkloadId id : std::exchange(channel->cancels, {})) {
        if (auto it = running.find(id); it != running.end() && !it->second.stops) {
          it->second.stops = wall + scenario.stop_grace;
        }
      }
      for (auto it = running.begin(); it != running.end();) {
        const Running& r = it->second;
        if (r.cluster != name) {
          ++it;
          continue;
        }
        if (r.stops && *r.stops <= wall) {
          reports.push_back({it->first, WorkloadState::kCancelled, 0, "stopped", wall, r.attempt});
          it = running.erase(it);
        } else if (r.ends <= wall) {
          reports.push_back({it->first, WorkloadState::kSucceeded, 0, "", wall, r.attempt});
          ++tenants[r.tenant].finished;
          ++report.finished;
          it = running.erase(it);
        } else {
          ++it;
        }
      }
      if (!reports.empty()) RETURN_IF_ERROR(plane.ApplyAgentReports(*links[name], reports));
    }

    StepResult step = loop.RunOnce(clock.Monotonic());
    ++report.cycles;
    if (step.cycle) {
      // An owner no longer waiting within its guarantee (its own project's work took the
      // guarantee meanwhile) and not being reclaimed for is no longer an owner.
      const std::set<WorkloadId> waiting(step.cycle->owners_waiting.begin(),
                                         step.cycle->owners_waiting.end());
      std::erase_if(
          owners, [&](const auto& o) { return !o.second.reclaimed && !waiting.contains(o.first); });
      for (WorkloadId id : waiting) owners.try_emplace(id, OwnerWait{cycle, 0, false, {}});
      for (const ReclaimPlan& plan : step.cycle->reclaims) {
        ++report.reclaims;
        report.preemptions += static_cast<int64_t>(plan.victims.size());
        report.gpu_seconds_lost += plan.record.gpu_seconds_lost;
        if (plan.record.needed_milli > 0) {
          report.max_eviction_ratio = std::max(report.max_eviction_ratio,
                                               static_cast<double>(plan.record.evicted_milli) /
                                                   static_cast<double>(plan.record.needed_milli));
        }
        OwnerWait& o =
            owners.try_emplace(plan.record.preemptor, OwnerWait{cycle, 0, false, {}}).first->second;
        o.reclaimed = true;
        for (const PreemptionVictim& v : plan.record.victims) o.victims.insert(v.id);
      }
      for (const Workload& w : step.cycle->placed) {
        // Routing: how far from its users, and whether a hard rule was broken.
        const ScenarioCluster& c = *described.at(w.assignment.cluster);
        ++report.routing.placements;
        for (const ReplicaAssignment& replica : w.assignment.replicas) {
          if (!Violation(c, CapacityOfNode(c, replica.node), w.spec.placement).empty()) {
            ++report.routing.residency_violations;
            break;
          }
        }
        if (const std::string& region = w.spec.placement.client_region; !region.empty()) {
          if (auto rtt = c.rtt_micros.find(region); rtt != c.rtt_micros.end()) {
            client_rtts.push_back(static_cast<double>(rtt->second) / 1000.0);
          }
        }
        if (auto s = submitted_in.find(w.id); s != submitted_in.end()) {
          TenantReport& t = tenants[w.spec.tenant];
          t.max_wait_cycles = std::max(t.max_wait_cycles, cycle - s->second);
          wait_sum[w.spec.tenant] += static_cast<double>(cycle - s->second);
          ++placed_count[w.spec.tenant];
          submitted_in.erase(s);
        }
        auto o = owners.find(w.id);
        if (o == owners.end()) continue;
        report.max_owner_wait_cycles =
            std::max(report.max_owner_wait_cycles,
                     cycle - o->second.first_cycle + 1 - o->second.stopping_cycles);
        owners.erase(o);
      }
    }
    // Owners whose victims still run after this cycle wait on the agents, not on the scheduler.
    for (auto& [owner, o] : owners) {
      std::erase_if(o.victims, [&](WorkloadId v) { return !running.contains(v); });
      if (!o.victims.empty()) ++o.stopping_cycles;
    }

    // What the running work cost over this cycle.
    const double cycle_hours = std::chrono::duration<double>(scenario.cycle).count() / 3600.0;
    for (const auto& [id, r] : running) {
      if (r.price_per_hour) {
        report.routing.total_cost += *r.price_per_hour * cycle_hours;
      } else {
        report.routing.unpriced_gpu_hours += static_cast<double>(r.milli) / 1000.0 * cycle_hours;
      }
    }

    // Shares after warm-up.
    if (now >= scenario.warmup) {
      std::map<std::string, int64_t> held;
      int64_t allocated = 0;
      for (const auto& [id, r] : running) {
        held[r.tenant] += r.milli;
        allocated += r.milli;
      }
      ++counted_cycles;
      utilisation_sum += static_cast<double>(allocated) / static_cast<double>(capacity_milli);
      const double hours = std::chrono::duration<double>(scenario.cycle).count() / 3600.0;
      for (auto& [name, t] : tenants) {
        const int64_t mine = held.contains(name) ? held[name] : 0;
        if (allocated > 0) {
          share_sum[name] += static_cast<double>(mine) / static_cast<double>(allocated);
        }
        t.gpu_hours += static_cast<double>(mine) / 1000.0 * hours;
      }
    }
    clock.Advance(scenario.cycle);
  }

  // Those never placed have waited to the end.
  for (const auto& [id, since] : submitted_in) {
    absl::StatusOr<Workload> w = store.Get(id);
    if (!w.ok()) continue;
    TenantReport& t = tenants[w->spec.tenant];
    t.max_wait_cycles = std::max(t.max_wait_cycles, cycles - since);
    ++t.never_placed;
  }
  double all_hours = 0;
  for (const auto& [name, t] : tenants) all_hours += t.gpu_hours;
  for (auto& [name, t] : tenants) {
    t.mean_wait_cycles =
        placed_count[name] > 0 ? wait_sum[name] / static_cast<double>(placed_count[name]) : 0;
    t.mean_share = counted_cycles > 0 ? share_sum[name] / static_cast<double>(counted_cycles) : 0;
    t.gpu_hours_share = all_hours > 0 ? t.gpu_hours / all_hours : 0;
    // Relative to the share, 0..1 (a tenant with twice its share or more reads 1).
    report.max_deviation =
        std::max(report.max_deviation, std::min(1.0, std::abs(t.mean_share / t.fair_share - 1)));
    report.max_gpu_hours_deviation =
        std::max(report.max_gpu_hours_deviation,
                 std::min(1.0, std::abs(t.gpu_hours_share / t.fair_share - 1)));
    report.tenants.push_back(t);
  }
  report.mean_utilisation =
      counted_cycles > 0 ? utilisation_sum / static_cast<double>(counted_cycles) : 0;
  if (!client_rtts.empty()) {
    const auto mid = client_rtts.begin() + static_cast<std::ptrdiff_t>(client_rtts.size() / 2);
    std::nth_element(client_rtts.begin(), mid, client_rtts.end());
    report.routing.p50_client_rtt_ms = *mid;
  }
  return report;
}

}  // namespace

absl::StatusOr<ScenarioReport> RunScenario(const Scenario& scenario) {
  ASSIGN_OR_RETURN(ScenarioReport report, RunOnce(scenario, VictimOrder::kLeastWorkLost));
  if (report.reclaims > 0) {
    ASSIGN_OR_RETURN(const ScenarioReport baseline, RunOnce(scenario, VictimOrder::kNewestFirst));
    report.gpu_seconds_lost_newest_first = baseline.gpu_seconds_lost;
  }
  if (scenario.compare_objectives) {
    for (Objective o :
         {Objective::kCost, Objective::kLatency, Objective::kBalanced, Objective::kPack}) {
      ASSIGN_OR_RETURN(const ScenarioReport run, RunOnce(scenario, VictimOrder::kLeastWorkLost, o));
      report.objectives.push_back(run.routing);
      if (o == Objective::kPack) report.cost_blind_total_cost = run.routing.total_cost;
    }
  }
  return report;
}

nlohmann::json ToJson(const ScenarioReport& report) {
  nlohmann::json doc = {{"name", report.name},
                        {"cycles", report.cycles},
                        {"submitted", report.submitted},
                        {"finished", report.finished},
                        {"max_deviation", report.max_deviation},
                        {"max_gpu_hours_deviation", report.max_gpu_hours_deviation},
                        {"max_owner_wait_cycles", report.max_owner_wait_cycles},
                        {"reclaims", report.reclaims},
                        {"max_eviction_ratio", report.max_eviction_ratio},
                        {"preemptions", report.preemptions},
                        {"gpu_seconds_lost", report.gpu_seconds_lost},
                        {"gpu_seconds_lost_newest_first", report.gpu_seconds_lost_newest_first},
                        {"mean_utilisation", report.mean_utilisation}};
  auto routing = [](const RoutingReport& r) {
    return nlohmann::json{{"objective", r.objective},
                          {"total_cost", r.total_cost},
                          {"unpriced_gpu_hours", r.unpriced_gpu_hours},
                          {"p50_client_rtt_ms", r.p50_client_rtt_ms},
                          {"placements", r.placements},
                          {"residency_violations", r.residency_violations}};
  };
  doc["routing"] = routing(report.routing);
  int64_t violations = report.routing.residency_violations;
  if (!report.objectives.empty()) {
    doc["objectives"] = nlohmann::json::object();
    for (const RoutingReport& r : report.objectives) {
      doc["objectives"][r.objective] = routing(r);
      violations += r.residency_violations;
    }
    doc["cost_blind_total_cost"] = report.cost_blind_total_cost;
  }
  // Every run's together: the figure that must be 0.
  doc["residency_violations"] = violations;
  doc["tenants"] = nlohmann::json::array();
  for (const TenantReport& t : report.tenants) {
    doc["tenants"].push_back({{"name", t.name},
                              {"weight", t.weight},
                              {"fair_share", t.fair_share},
                              {"mean_share", t.mean_share},
                              {"gpu_hours", t.gpu_hours},
                              {"gpu_hours_share", t.gpu_hours_share},
                              {"submitted", t.submitted},
                              {"finished", t.finished},
                              {"max_wait_cycles", t.max_wait_cycles},
                              {"never_placed", t.never_placed},
                              {"mean_wait_cycles", t.mean_wait_cycles}});
  }
  return doc;
}

}  // namespace gpufed::sim
