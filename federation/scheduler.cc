#include "federation/scheduler.h"

#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "federation/placement.h"
#include "federation/status_macros.h"

namespace gpufed {
namespace {

// Workloads with the same shape get the same answer within a cycle once one of them failed, until
// the next allocation changes the pool: the engine would answer them the same (same pool, same
// request), reason figures included. This keeps a long queue of identical jobs cheap.
using ShapeKey = std::tuple<uint32_t, uint32_t, std::vector<std::string>, uint64_t, Topology,
                            std::string, uint32_t, uint64_t, uint64_t>;

ShapeKey ShapeOf(const WorkloadSpec& spec) {
  return {spec.replicas,           spec.gpus_per_replica, spec.gpu_models,
          spec.min_gpu_memory_mib, spec.topology,         spec.mig_profile,
          spec.gpu_milli,          spec.cpu_millis,       spec.memory_mib};
}

// An engine for `options`; an unknown policy name falls back to the default policy (the server
// validates the name before it gets here).
std::unique_ptr<PlacementEngine> MakeEngine(PlacementOptions options) {
  absl::StatusOr<std::unique_ptr<PlacementEngine>> engine = PlacementEngine::Create(options);
  if (!engine.ok()) {
    options.policy = PlacementOptions().policy;
    engine = PlacementEngine::Create(std::move(options));
  }
  return *std::move(engine);
}

}  // namespace

Scheduler::Scheduler(WorkloadStore* workloads, ClusterStore* clusters, SchedulerOptions options)
    : workloads_(workloads), clusters_(clusters), options_(std::move(options)) {
  engine_ = MakeEngine(options_.placement);
  absl::MutexLock lock(&mu_);
  snapshot_ = std::make_shared<const Pool>();
}

absl::Status Scheduler::Rebuild() {
  {
    // Notifications are sent after their commit, so everything queued so far is already in
    // what the reads below return. Drop them before reading, never after: a notification
    // arriving during the reads may describe a commit the reads missed, and must survive to be
    // applied on top (every notification is idempotent).
    absl::MutexLock lock(&mu_);
    inbox_ = Inbox{};
  }
  ASSIGN_OR_RETURN(std::vector<Cluster> clusters, clusters_->ListClusters(/*include_nodes=*/true));
  ASSIGN_OR_RETURN(std::vector<Workload> active, workloads_->ListActive(""));
  pool_ = Pool();
  for (const Cluster& cluster : clusters) pool_.UpsertCluster(cluster);
  for (const Workload& w : active) {
    // Conflicts cannot happen for committed data unless two schedulers ran at once; keep the
    // first holder and let the operator see the error in the log via the status.
    (void)pool_.Allocate(w.id, w.assignment, HostDemand{w.spec.cpu_millis, w.spec.memory_mib});
  }
  // The workload mix starts from what runs and waits now (running first, pending as the most
  // recent), so that a restarted or newly active scheduler measures fragmentation against the
  // fleet's real work from its first cycle, not against nothing.
  recent_specs_.clear();
  for (const Workload& w : active) RememberSpec(w.spec);
  RETURN_IF_ERROR(ReloadPending());
  engine_->SetMix(MixOf(pool_, {recent_specs_.begin(), recent_specs_.end()}));
  mix_stale_ = false;
  Publish();
  return absl::OkStatus();
}

absl::Status Scheduler::ReloadPending() {
  ASSIGN_OR_RETURN(std::vector<Workload> pending, workloads_->ListPending(options_.reload_limit));
  queue_.clear();
  queued_ids_.clear();
  mig_demand_.clear();
  dirty_ = Dirty{};
  for (const Workload& w : pending) Enqueue(w);
  return absl::OkStatus();
}

void Scheduler::Enqueue(const Workload& workload) {
  if (workload.state != WorkloadState::kPending || queued_ids_.contains(workload.id)) return;
  // A late notification (or a reload racing a placement) may carry a stale PENDING copy of a
  // workload this scheduler already placed; the pool knows better.
  if (pool_.Holds(workload.id)) return;
  RememberSpec(workload.spec);
  QueueKey key{-workload.spec.priority, workload.id};
  Queued& queued = queue_[key];
  queued.workload = workload;
  queued.last_reason = workload.pending_reason;
  queued.written_cycle = cycle_;
  queued_ids_[workload.id] = key;
  if (!workload.spec.mig_profile.empty()) {
    mig_demand_[workload.spec.mig_profile] += workload.spec.replicas;
  }
  dirty_.fresh.push_back(workload.id);
}

void Scheduler::Dequeue(std::map<QueueKey, Queued>::iterator it) {
  const WorkloadSpec& spec = it->second.workload.spec;
  if (!spec.mig_profile.empty()) {
    auto demand = mig_demand_.find(spec.mig_profile);
    demand->second -= std::min(demand->second, spec.replicas);
    if (demand->second == 0) mig_demand_.erase(demand);
  }
  queued_ids_.erase(it->second.workload.id);
  queue_.erase(it);
}

PendingReason Scheduler::QueuedReason() const {
  return PendingReason(ReasonCode::kQueueDepth).Set(figure::kConsidered, options_.max_considered);
}

void Scheduler::NotifySubmitted(const Workload& workload) {
  absl::MutexLock lock(&mu_);
  inbox_.submitted.push_back(workload);
}

void Scheduler::NotifyReleased(WorkloadId id) {
  absl::MutexLock lock(&mu_);
  inbox_.released.push_back(id);
}

void Scheduler::NotifyClusterChanged(const Cluster& cluster) {
  absl::MutexLock lock(&mu_);
  inbox_.clusters.push_back(cluster);
}

void Scheduler::NotifyClusterState(const std::string& cluster, ClusterState state) {
  absl::MutexLock lock(&mu_);
  inbox_.states.emplace_back(cluster, state);
}

bool Scheduler::DrainInbox() {
  Inbox inbox;
  {
    absl::MutexLock lock(&mu_);
    std::swap(inbox, inbox_);
  }
  for (const Cluster& cluster : inbox.clusters) pool_.UpsertCluster(cluster);
  for (const auto& [cluster, state] : inbox.states) pool_.SetClusterState(cluster, state);
  for (WorkloadId id : inbox.released) {
    pool_.Release(id);
    // A released workload may also still sit in the queue (cancelled while pending).
    if (auto it = queued_ids_.find(id); it != queued_ids_.end()) Dequeue(queue_.find(it->second));
  }
  for (const Workload& w : inbox.submitted) Enqueue(w);
  return !inbox.clusters.empty() || !inbox.states.empty() || !inbox.released.empty();
}

void Scheduler::RememberSpec(const WorkloadSpec& spec) {
  recent_specs_.push_back(spec);
  while (recent_specs_.size() > options_.mix_window) recent_specs_.pop_front();
  mix_stale_ = true;
}

void Scheduler::RefreshMix() {
  if (!mix_stale_ || (cycle_ % options_.mix_refresh_cycles != 1 && cycle_ > 1)) return;
  engine_->SetMix(MixOf(pool_, {recent_specs_.begin(), recent_specs_.end()}));
  mix_stale_ = false;
}

void Scheduler::UpdateReason(Queued& queued, PendingReason reason,
                             std::vector<std::pair<WorkloadId, PendingReason>>& out) const {
  const ReasonChange change = CompareReasons(queued.last_reason, reason);
  if (change == ReasonChange::kNone) {
    queued.unwritten.reset();
    return;
  }
  const bool stale = cycle_ - queued.written_cycle >= options_.reason_refresh_cycles;
  if (change == ReasonChange::kCode || stale) {
    out.emplace_back(queued.workload.id, reason);
    queued.last_reason = std::move(reason);
    queued.written_cycle = cycle_;
    queued.unwritten.reset();
  } else {
    queued.unwritten = std::move(reason);
  }
}

bool Scheduler::WindowStands(const Dirty& dirty) const {
  if (dirty.pool || !window_end_.last || window_end_.unwritten) return false;
  for (WorkloadId id : dirty.fresh) {
    auto it = queued_ids_.find(id);
    if (it != queued_ids_.end() && it->second < *window_end_.last) return false;
  }
  return true;
}

int Scheduler::WalkWindow(bool pool_changed, MigQueue& mig_queue,
                          std::vector<Transition>& transitions,
                          std::vector<std::pair<WorkloadId, PendingReason>>& reasons,
                          CycleStats& stats) {
  std::map<ShapeKey, PendingReason> failed_shapes;
  int considered = 0;
  QueueKey last{};
  dirty_.window.reserve(std::min(queue_.size(), static_cast<size_t>(options_.max_considered)));
  for (auto it = queue_.begin(); it != queue_.end() && considered < options_.max_considered;) {
    auto& [key, queued] = *it;
    if (pool_.Holds(queued.workload.id)) {
      // Already placed (see Enqueue); it must not be placed again.
      Dequeue(it++);
      continue;
    }
    ++it;
    ++considered;
    last = key;
    queued.window_cycle = cycle_;
    dirty_.window.push_back(queued.workload.id);
    if (queued.judged && !pool_changed) {
      // Same capacity, same answer; only figures waiting for their refresh may be due.
      if (queued.unwritten) UpdateReason(queued, *queued.unwritten, reasons);
      window_end_.unwritten |= queued.unwritten.has_value();
      continue;
    }
    queued.judged = true;
    const WorkloadSpec& spec = queued.workload.spec;
    PendingReason reason;
    const ShapeKey shape = ShapeOf(spec);
    if (auto failed = failed_shapes.find(shape);
        options_.reuse_failed_shapes && failed != failed_shapes.end()) {
      reason = failed->second;
    } else {
      PlacementDecision decision = engine_->Place(pool_, spec, queued.workload.id, mig_queue);
      if (decision.assignment) {
        if (pool_
                .Allocate(queued.workload.id, *decision.assignment,
                          HostDemand{spec.cpu_millis, spec.memory_mib})
                .ok()) {
          // The pool changed: an answer remembered for a shape may no longer be the engine's.
          failed_shapes.clear();
          if (!spec.mig_profile.empty()) {
            uint32_t& left = mig_queue[spec.mig_profile];
            left -= std::min(left, spec.replicas);
          }
          Transition t;
          t.id = queued.workload.id;
          t.from = WorkloadState::kPending;
          t.to = WorkloadState::kPlaced;
          t.actor = "scheduler";
          t.reason = absl::StrCat("placed on ", decision.assignment->cluster, " (",
                                  decision.assignment->replicas.size(), " replica",
                                  decision.assignment->replicas.size() == 1 ? "" : "s", ")");
          for (const Repartition& r : decision.assignment->repartitions) {
            absl::StrAppend(&t.reason, "; ", r.node, "/", r.gpu_uuid, ": ", r.reason);
            ++stats.repartitions;
          }
          t.assignment = std::move(decision.assignment);
          transitions.push_back(std::move(t));
          continue;
        }
        reason = PendingReason(ReasonCode::kPlacementConflict);
        dirty_.pool = true;  // try again next cycle
      } else {
        reason = std::move(decision.reason);
        if (options_.reuse_failed_shapes) failed_shapes.emplace(shape, reason);
      }
    }
    UpdateReason(queued, std::move(reason), reasons);
    window_end_.unwritten |= queued.unwritten.has_value();
  }
  if (considered == options_.max_considered) window_end_.last = last;
  return considered;
}

// A cycle judges the window: the first max_considered workloads of the queue. The engine looks
// at all of them only when capacity changed since the last cycle (a cluster, a release, a
// placement); otherwise their answers cannot have changed, and only the workloads that arrived
// since are judged. The rest of the queue gets a reason that does not change from cycle to
// cycle, written once: for the newcomers beyond the window and for those the window lost. So a
// cycle costs the window, not the queue, however long the queue grows; and when the window is
// full, capacity unchanged and every newcomer queues behind it, the walk is skipped: a cycle
// then costs its newcomers.
absl::StatusOr<CycleResult> Scheduler::RunCycle() {
  const bool pool_changed = DrainInbox();
  if (pool_changed) dirty_.pool = true;
  Dirty dirty = std::exchange(dirty_, Dirty{.pool = false, .fresh = {}, .window = {}});
  ++cycle_;
  RefreshMix();
  CycleResult result;
  result.stats.pending = static_cast<int>(queue_.size());

  std::vector<Transition> transitions;
  std::vector<std::pair<WorkloadId, PendingReason>> reasons;

  int considered = 0;
  if (WindowStands(dirty)) {
    // The window and every answer in it stand; the newcomers all queue behind it (below).
    considered = static_cast<int>(dirty.window.size());
    dirty_.window = std::move(dirty.window);
  } else {
    window_end_ = WindowEnd{};
    // MIG demand still queued: a GPU repartitioned now is laid out to serve it.
    MigQueue mig_queue = mig_demand_;
    considered = WalkWindow(dirty.pool, mig_queue, transitions, reasons, result.stats);
  }
  // Beyond the window: newcomers, and those the window held last cycle but not now. Everyone
  // else out there already carries this reason.
  const PendingReason behind = QueuedReason();
  for (const std::vector<WorkloadId>* ids : {&dirty.fresh, &dirty.window}) {
    for (WorkloadId id : *ids) {
      auto qit = queued_ids_.find(id);
      if (qit == queued_ids_.end()) continue;
      Queued& queued = queue_.at(qit->second);
      if (queued.window_cycle == cycle_) continue;
      UpdateReason(queued, behind, reasons);
    }
  }
  result.stats.considered = considered;

  if (!transitions.empty()) {
    absl::StatusOr<std::vector<TransitionResult>> applied =
        workloads_->ApplyTransitions(transitions);
    // Capacity changed (or, on failure, the window must be judged again).
    dirty_.pool = true;
    if (!applied.ok()) {
      // Nothing committed: undo the tentative allocations; the queue is untouched.
      for (const Transition& t : transitions) pool_.Release(t.id);
      return applied.status();
    }
    for (TransitionResult& r : *applied) {
      if (auto qit = queued_ids_.find(r.id); qit != queued_ids_.end()) {
        Dequeue(queue_.find(qit->second));
      }
      if (r.applied && r.event) {
        result.placed.push_back(r.event->workload);
      } else {
        // Cancelled (or otherwise moved on) between read and commit.
        pool_.Release(r.id);
        ++result.stats.lost_races;
      }
    }
  }
  result.stats.placed = static_cast<int>(result.placed.size());

  if (!reasons.empty()) {
    // Reasons are advisory; failing to record them must not undo committed placements.
    if (workloads_->SetPendingReasons(reasons).ok()) {
      result.stats.reasons_written = static_cast<int>(reasons.size());
    }
  }
  if (pool_changed || !transitions.empty()) {
    Publish();
  } else {
    absl::MutexLock lock(&mu_);
    pending_count_ = static_cast<int>(queue_.size());
  }
  return result;
}

void Scheduler::ClearInbox() {
  absl::MutexLock lock(&mu_);
  inbox_ = Inbox{};
}

void Scheduler::Publish() {
  auto snapshot = std::make_shared<const Pool>(pool_);
  absl::MutexLock lock(&mu_);
  snapshot_ = std::move(snapshot);
  loaded_ = true;
  pending_count_ = static_cast<int>(queue_.size());
}

std::shared_ptr<const Pool> Scheduler::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return snapshot_;
}

PlacementDecision Scheduler::Explain(const WorkloadSpec& spec) const {
  absl::MutexLock explain_lock(&explain_mu_);
  std::shared_ptr<const Pool> snapshot;
  {
    absl::MutexLock lock(&mu_);
    if (!loaded_) {
      // An empty pool would read "no clusters are registered" and never_fits: wrong and final.
      PlacementDecision not_yet;
      not_yet.reason = PendingReason(ReasonCode::kNotLoaded);
      return not_yet;
    }
    snapshot = snapshot_;
  }
  if (explain_engine_ == nullptr) {
    PlacementOptions options = options_.placement;
    options.random_ties = false;
    explain_engine_ = MakeEngine(std::move(options));
  }
  if (snapshot != explain_source_) {
    explain_pool_ = std::make_unique<Pool>(*snapshot);
    explain_source_ = std::move(snapshot);
  }
  return explain_engine_->Place(*explain_pool_, spec);
}

int Scheduler::pending_count() const {
  absl::MutexLock lock(&mu_);
  return pending_count_;
}

}  // namespace gpufed
