#include "federation/scheduler.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "federation/failover.h"
#include "federation/placement.h"
#include "federation/status_macros.h"

namespace gpufed {
namespace {

// Workloads with the same shape get the same answer within a cycle once one of them failed, until
// the next allocation changes the pool: the engine would answer them the same (same pool, same
// request), reason figures included. This keeps a long queue of identical jobs cheap.
using ShapeKey = std::tuple<uint32_t, uint32_t, std::vector<std::string>, uint64_t, Topology,
                            std::string, uint32_t, uint64_t, uint64_t, PlacementConstraints>;

ShapeKey ShapeOf(const WorkloadSpec& spec) {
  return {spec.replicas,   spec.gpus_per_replica, spec.gpu_models, spec.min_gpu_memory_mib,
          spec.topology,   spec.mig_profile,      spec.gpu_milli,  spec.cpu_millis,
          spec.memory_mib, spec.placement};
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

Scheduler::Scheduler(WorkloadStore* workloads, ClusterStore* clusters, SchedulerOptions options,
                     QuotaStore* quotas, const Clock* clock)
    : workloads_(workloads),
      clusters_(clusters),
      quotas_(quotas),
      clock_(ClockOrSystem(clock)),
      options_(std::move(options)),
      router_(options_.routing),
      usage_(options_.fair_share_half_life) {
  engine_ = MakeEngine(options_.placement);
  // Reclaim tries victim sets on copies of the pool; its own engine keeps the live one's tie
  // order (and caches) untouched.
  PlacementOptions reclaim_options = options_.placement;
  reclaim_options.random_ties = false;
  reclaim_engine_ = MakeEngine(std::move(reclaim_options));
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
  ledger_ = QuotaLedger();
  RETURN_IF_ERROR(LoadQuotas());
  // Fair-share usage goes on from what the last active scheduler saved (none: from nothing).
  usage_ = DecayedUsage(options_.fair_share_half_life);
  if (quotas_ != nullptr) {
    ASSIGN_OR_RETURN(const UsageSnapshot saved, quotas_->LoadUsage());
    usage_.Restore(saved);
  }
  held_.clear();
  reclaims_.clear();
  backoff_.clear();
  reservations_.clear();
  held_reservations_.clear();
  for (const Cluster& cluster : clusters) pool_.UpsertCluster(cluster);
  for (const Workload& w : active) {
    // Conflicts cannot happen for committed data unless two schedulers ran at once; keep the
    // first holder and let the operator see the error in the log via the status.
    (void)pool_.Allocate(w.id, w.assignment, HostDemand{w.spec.cpu_millis, w.spec.memory_mib});
    TrackHeld(w);
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
  // Only the rows this queue does not hold at their version are read: with a long queue, reading
  // and decoding every spec each reload cost more than all the cycles between two reloads.
  ASSIGN_OR_RETURN(std::vector<WorkloadStore::PendingVersion> listed,
                   workloads_->ListPendingVersions(options_.reload_limit));
  std::vector<WorkloadId> unread;
  for (const WorkloadStore::PendingVersion& p : listed) {
    auto it = queued_ids_.find(p.id);
    if (it == queued_ids_.end() || queue_.at(it->second).workload.version != p.version) {
      unread.push_back(p.id);
    }
  }
  ASSIGN_OR_RETURN(std::vector<Workload> read, workloads_->GetWorkloads(unread));
  // The queue is then rebuilt as if every row had been read: the rows it held come from it.
  absl::flat_hash_map<WorkloadId, Workload> rows;
  rows.reserve(listed.size());
  for (Workload& w : read) {
    const WorkloadId id = w.id;
    rows.insert_or_assign(id, std::move(w));
  }
  for (auto& [key, queued] : queue_) {
    rows.try_emplace(queued.workload.id, std::move(queued.workload));
  }
  // Reservations of ADMITTED workloads are made again as the queue is judged.
  for (const auto& [key, queued] : queue_) {
    if (!held_.contains(key.id)) ledger_.Drop(key.id);
  }
  queue_.clear();
  queued_ids_.clear();
  by_holder_.clear();
  mig_demand_.clear();
  dirty_ = Dirty{};
  for (const WorkloadStore::PendingVersion& p : listed) {
    if (auto it = rows.find(p.id); it != rows.end()) Enqueue(it->second);
  }
  // Forget since when those no longer waiting were overtaken.
  std::vector<WorkloadId> gone;
  for (const auto& [id, since] : overtaken_since_) {
    if (!queued_ids_.contains(id)) gone.push_back(id);
  }
  for (WorkloadId id : gone) NoteOvertaken(id, false, clock_->Now());
  return absl::OkStatus();
}

void Scheduler::Enqueue(const Workload& workload) {
  const bool waiting =
      workload.state == WorkloadState::kPending || workload.state == WorkloadState::kAdmitted;
  if (!waiting || queued_ids_.contains(workload.id)) return;
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
  by_holder_[workload.spec.tenant][workload.spec.project].insert(key);
  if (workload.state == WorkloadState::kAdmitted) {
    // Its quota was granted: reserved again (firm only while its reclaim is under way).
    ledger_.Hold(workload.id, workload.spec.tenant, workload.spec.project,
                 ReservationOf(workload.spec), /*firm=*/reclaims_.contains(workload.id));
  }
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
  const WorkloadId id = it->second.workload.id;
  if (!held_.contains(id)) ledger_.Drop(id);  // its reservation, if ADMITTED
  if (auto t = by_holder_.find(spec.tenant); t != by_holder_.end()) {
    if (auto p = t->second.find(spec.project); p != t->second.end()) {
      p->second.erase(it->first);
      if (p->second.empty()) t->second.erase(p);
    }
    if (t->second.empty()) by_holder_.erase(t);
  }
  NoteOvertaken(id, false, clock_->Now());
  queued_ids_.erase(id);
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

void Scheduler::NotifyStarted(WorkloadId id, Timestamp at) {
  absl::MutexLock lock(&mu_);
  inbox_.started.emplace_back(id, at);
}

void Scheduler::NotifyQuotasChanged() {
  absl::MutexLock lock(&mu_);
  inbox_.quotas = true;
}

void Scheduler::NotifyReclaimFailed(const std::vector<ReclaimPlan>& reclaims) {
  absl::MutexLock lock(&mu_);
  for (const ReclaimPlan& plan : reclaims) {
    for (const WorkloadStore::Eviction& v : plan.victims) inbox_.reclaim_failed.push_back(v.id);
  }
}

bool Scheduler::DrainInbox() {
  Inbox inbox;
  {
    absl::MutexLock lock(&mu_);
    std::swap(inbox, inbox_);
  }
  for (const Cluster& cluster : inbox.clusters) pool_.UpsertCluster(cluster);
  for (const auto& [cluster, state] : inbox.states) pool_.SetClusterState(cluster, state);
  bool quotas_changed = false;
  if (inbox.quotas) {
    if (LoadQuotas().ok()) {
      quotas_changed = true;
    } else {
      NotifyQuotasChanged();  // read again next cycle
    }
  }
  for (const auto& [id, at] : inbox.started) {
    if (auto it = held_.find(id); it != held_.end()) it->second.start_time = at;
  }
  for (WorkloadId id : inbox.reclaim_failed) {
    if (auto it = held_.find(id); it != held_.end()) it->second.evicting.reset();
    for (auto& [owner, r] : reclaims_) std::erase(r.victims, id);
  }
  for (WorkloadId id : inbox.released) {
    pool_.Release(id);
    ForgetHeld(id);
    // A released workload may also still sit in the queue (cancelled while pending).
    if (auto it = queued_ids_.find(id); it != queued_ids_.end()) Dequeue(queue_.find(it->second));
  }
  for (const Workload& w : inbox.submitted) Enqueue(w);
  return !inbox.clusters.empty() || !inbox.states.empty() || !inbox.released.empty() ||
         quotas_changed;
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
  // Several holders: the window is in fair-share order, not the queue's.
  if (by_holder_.size() > 1 || (!by_holder_.empty() && by_holder_.begin()->second.size() > 1)) {
    return false;
  }
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
  // Already placed (see Enqueue): it must not be placed again.
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (pool_.Holds(it->second.workload.id)) {
      Dequeue(it++);
    } else {
      ++it;
    }
  }
  std::vector<std::map<QueueKey, Queued>::iterator> window;
  window.reserve(std::min(queue_.size(), static_cast<size_t>(options_.max_considered)));
  QueueKey last{};
  const bool one_holder =
      by_holder_.size() <= 1 && (by_holder_.empty() || by_holder_.begin()->second.size() <= 1);
  if (one_holder) {
    // One tenant and project: fair share orders nothing; the queue's order is the window's.
    for (auto it = queue_.begin();
         it != queue_.end() && static_cast<int>(window.size()) < options_.max_considered; ++it) {
      last = it->first;
      window.push_back(it);
    }
  } else {
    for (const QueueKey& key : FairOrder(options_.max_considered)) {
      window.push_back(queue_.find(key));
    }
  }
  // Workloads waiting past the starvation bound are in the window whatever their turn.
  const Timestamp now = clock_->Now();
  const std::set<WorkloadId> starving = Starving(now);
  for (WorkloadId id : starving) {
    auto it = queue_.find(queued_ids_.at(id));
    if (std::find(window.begin(), window.end(), it) == window.end()) window.push_back(it);
  }
  const int considered = static_cast<int>(window.size());
  if (!ledger_.empty()) {
    // Owners whose reclaim is under way first (the capacity being freed is theirs), then the
    // other owners (work within its guarantee takes free capacity before borrowers do), then
    // the borrowers; each in queue order. A starving workload keeps its place: what it holds
    // keeps back only the work after it.
    auto rank = [&](const Queued& q) {
      if (reclaims_.contains(q.workload.id)) return 0;
      if (q.workload.state == WorkloadState::kAdmitted) return q.owner_waiting ? 1 : 2;
      const std::string model =
          q.workload.spec.gpu_models.empty() ? std::string() : q.workload.spec.gpu_models.front();
      return ledger_.Judge(q.workload.spec.tenant, q.workload.spec.project,
                           DemandOf(q.workload.spec, model))
                         .kind == AdmissionVerdict::kOwned
                 ? 1
                 : 2;
    };
    std::vector<std::pair<int, std::map<QueueKey, Queued>::iterator>> ranked;
    ranked.reserve(window.size());
    for (auto it : window) ranked.emplace_back(rank(it->second), it);
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < ranked.size(); ++i) window[i] = ranked[i].second;
  }
  dirty_.window.reserve(window.size());
  // Judged this walk and short of capacity, by position; and the position of the last placement:
  // who was overtaken (NoteOvertaken).
  std::vector<std::pair<size_t, WorkloadId>> short_of_capacity;
  std::optional<size_t> last_placed;
  for (size_t pos = 0; pos < window.size(); ++pos) {
    Queued& queued = window[pos]->second;
    const WorkloadId id = queued.workload.id;
    queued.window_cycle = cycle_;
    dirty_.window.push_back(id);
    if (queued.judged && !pool_changed) {
      if (queued.owner_waiting) owners_waiting_.push_back(id);
      HoldReserved(id);
      // Same capacity, same answer; only figures waiting for their refresh may be due.
      if (queued.unwritten) UpdateReason(queued, *queued.unwritten, reasons);
      window_end_.unwritten |= queued.unwritten.has_value();
      continue;
    }
    queued.judged = true;
    queued.owner_waiting = false;
    const bool was_admitted = queued.workload.state == WorkloadState::kAdmitted;
    // Its own reservation does not count against it.
    if (!held_.contains(id)) ledger_.Drop(id);
    const Admission admission = Admit(queued);
    // Limits hold for ADMITTED work too (its reservation normally keeps room for it; a lowered
    // limit, or a placement on another model than reserved, may not): it then waits, still
    // ADMITTED, with the quota's reason.
    const bool refused = !admission.refused.empty();
    WorkloadSpec spec_copy;
    const WorkloadSpec* spec = &queued.workload.spec;
    if (!admission.models.empty() && admission.models != spec->gpu_models) {
      // Only the models admission allows.
      spec_copy = *spec;
      spec_copy.gpu_models = admission.models;
      spec = &spec_copy;
    }
    PendingReason reason;
    bool placed = false;
    const ShapeKey shape = ShapeOf(*spec);
    if (refused) {
      reason = admission.refused;
    } else if (auto failed = failed_shapes.find(shape);
               options_.reuse_failed_shapes && failed != failed_shapes.end()) {
      reason = failed->second;
    } else {
      PlacementDecision decision = router_.Place(*engine_, pool_, *spec, id, mig_queue, now);
      if (decision.assignment) {
        Workload as_placed;
        as_placed.assignment = *decision.assignment;
        ResourceAmounts held = HeldOf(as_placed);
        if (std::optional<PendingReason> no = RefusePlaced(queued, held, *decision.assignment)) {
          reason = std::move(*no);
        } else if (pool_
                       .Allocate(id, *decision.assignment,
                                 HostDemand{spec->cpu_millis, spec->memory_mib})
                       .ok()) {
          // The pool changed: an answer remembered for a shape may no longer be the engine's.
          failed_shapes.clear();
          ledger_.Hold(id, spec->tenant, spec->project, std::move(held));
          if (!spec->mig_profile.empty()) {
            uint32_t& left = mig_queue[spec->mig_profile];
            left -= std::min(left, spec->replicas);
          }
          Transition t;
          t.id = id;
          t.from = queued.workload.state;
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
          placed = true;
        } else {
          reason = PendingReason(ReasonCode::kPlacementConflict);
          dirty_.pool = true;  // try again next cycle
        }
      } else {
        reason = std::move(decision.reason);
        if (options_.reuse_failed_shapes) failed_shapes.emplace(shape, reason);
      }
    }
    if (placed) {
      last_placed = pos;
      NoteOvertaken(id, false, now);
      continue;
    }
    if (!refused && !reason.never_fits() && !IsQuotaReason(reason.code) &&
        reason.code != ReasonCode::kPlacementConflict) {
      short_of_capacity.emplace_back(pos, id);
      if (starving.contains(id)) {
        Reserve(id, *spec, now);
        reason = ReservedReason(id, std::move(reason));
      }
    }
    const bool admit = (!refused || was_admitted) && !reason.never_fits();
    if (admit) {
      // Quota granted: reserved while it waits for capacity (firm while its reclaim is under
      // way: the guarantee it reclaims is counted as used).
      ledger_.Hold(id, queued.workload.spec.tenant, queued.workload.spec.project, admission.reserve,
                   /*firm=*/reclaims_.contains(id));
      queued.owner_waiting = admission.verdict.kind == AdmissionVerdict::kOwned;
      if (queued.owner_waiting) owners_waiting_.push_back(id);
      if (auto r = reclaims_.find(id); r != reclaims_.end() && !r->second.victims.empty()) {
        reason = ReclaimingReason(id);
      }
    }
    if (admit && !was_admitted) {
      Transition t;
      t.id = id;
      t.from = WorkloadState::kPending;
      t.to = WorkloadState::kAdmitted;
      t.actor = "scheduler";
      t.reason = absl::StrCat("admitted (",
                              admission.verdict.kind == AdmissionVerdict::kOwned ? "within its "
                                                                                   "guarantee"
                                                                                 : "borrowing",
                              "); waiting for capacity");
      t.pending_reason = reason;
      transitions.push_back(std::move(t));
      queued.last_reason = std::move(reason);
      queued.written_cycle = cycle_;
      queued.unwritten.reset();
      continue;
    }
    UpdateReason(queued, std::move(reason), reasons);
    window_end_.unwritten |= queued.unwritten.has_value();
  }
  for (const auto& [pos, id] : short_of_capacity) {
    if (last_placed && *last_placed > pos) NoteOvertaken(id, true, now);
  }
  // The window's end by queue order means something only when the queue's order is the window's:
  // with several holders a newcomer anywhere in the queue may belong in the window.
  if (considered == options_.max_considered && one_holder) window_end_.last = last;
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
  AdvanceUsage(clock_->Now());
  SettleReclaims();
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
    owners_waiting_.clear();  // else those the standing window left waiting still wait
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
  result.owners_waiting = owners_waiting_;

  // Owners within their guarantee that found no capacity: stop borrowed work for them. Planned
  // again when capacity changed, and every 16th cycle (victims pass their minimum runtime). The
  // owners tried longest ago go first, so a few that find no victims cannot keep the others
  // from being tried.
  if (!ledger_.empty() && (dirty.pool || cycle_ % 16 == 0)) {
    const Timestamp now = clock_->Now();
    std::vector<Queued*> owners;
    for (auto& [key, queued] : queue_) {
      if (queued.owner_waiting && !reclaims_.contains(queued.workload.id)) {
        owners.push_back(&queued);
      }
    }
    std::stable_sort(owners.begin(), owners.end(), [](const Queued* a, const Queued* b) {
      return a->reclaim_tried < b->reclaim_tried;
    });
    if (static_cast<int>(owners.size()) > options_.max_reclaim_attempts_per_cycle) {
      owners.resize(options_.max_reclaim_attempts_per_cycle);
    }
    int planned = 0;
    for (Queued* owner : owners) {
      if (planned >= options_.max_reclaims_per_cycle) break;
      Queued& queued = *owner;
      queued.reclaim_tried = cycle_;
      ledger_.Drop(queued.workload.id);
      const Admission admission = Admit(queued);
      std::optional<ReclaimPlan> plan;
      if (admission.verdict.kind == AdmissionVerdict::kOwned) {
        plan = PlanReclaim(queued, admission, now);
      }
      // Reclaiming, its share of the guarantee is spoken for: owners after it see it used.
      ledger_.Hold(queued.workload.id, queued.workload.spec.tenant, queued.workload.spec.project,
                   admission.reserve, /*firm=*/plan.has_value());
      if (!plan) continue;
      ++planned;
      ++result.stats.reclaims;
      UpdateReason(queued, ReclaimingReason(plan->record.preemptor), reasons);
      result.reclaims.push_back(std::move(*plan));
    }
  }
  // What was held for starving workloads is held again by the next walk; the pool published
  // and kept between cycles is the store's.
  ReleaseReserved();

  if (!transitions.empty()) {
    absl::StatusOr<std::vector<TransitionResult>> applied =
        workloads_->ApplyTransitions(transitions);
    // Capacity changed (or, on failure, the window must be judged again).
    dirty_.pool = true;
    if (!applied.ok()) {
      // Nothing committed: undo the tentative allocations and reservations; the queue is
      // untouched. Reclaims decided on this cycle's view are not acted on.
      for (const Transition& t : transitions) {
        pool_.Release(t.id);
        if (!held_.contains(t.id)) ledger_.Drop(t.id);
      }
      NotifyReclaimFailed(result.reclaims);
      return applied.status();
    }
    for (TransitionResult& r : *applied) {
      auto qit = queued_ids_.find(r.id);
      if (r.applied && r.event && r.event->to == WorkloadState::kAdmitted) {
        if (qit != queued_ids_.end()) queue_.at(qit->second).workload = r.event->workload;
        result.events.push_back(std::move(*r.event));
        ++result.stats.admitted;
        continue;
      }
      if (r.applied && r.event) {
        TrackHeld(r.event->workload);
        result.placed.push_back(r.event->workload);
        result.events.push_back(std::move(*r.event));
      } else {
        // Cancelled (or otherwise moved on) between read and commit.
        pool_.Release(r.id);
        ++result.stats.lost_races;
      }
      if (qit != queued_ids_.end()) Dequeue(queue_.find(qit->second));
    }
  }
  result.stats.placed = static_cast<int>(result.placed.size());

  if (!reasons.empty()) {
    // Reasons are advisory; failing to record them must not undo committed placements.
    if (workloads_->SetPendingReasons(reasons).ok()) {
      result.stats.reasons_written = static_cast<int>(reasons.size());
    }
  }
  if (pool_changed || !transitions.empty() || !result.reclaims.empty()) {
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
  std::vector<QuotaUsage> report;
  report.reserve(ledger_.quotas().size());
  for (const auto& [key, quota] : ledger_.quotas()) {
    QuotaUsage& u = report.emplace_back();
    u.key = quota.key;
    u.quota = quota;
    u.used_milli = ledger_.FirmUsed(quota.key);
    u.borrowed_milli = std::max<int64_t>(0, u.used_milli - quota.guaranteed_milli);
  }
  std::vector<FairShare> shares = FairShares();
  absl::MutexLock lock(&mu_);
  snapshot_ = std::move(snapshot);
  quota_report_ = std::move(report);
  fair_share_report_ = std::move(shares);
  loaded_ = true;
  pending_count_ = static_cast<int>(queue_.size());
}

std::shared_ptr<const Pool> Scheduler::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return snapshot_;
}

PlacementDecision Scheduler::Explain(const WorkloadSpec& spec) const {
  return Evaluate(spec, /*candidates=*/false).decision;
}

RoutingExplanation Scheduler::ExplainRouting(const WorkloadSpec& spec) const {
  return Evaluate(spec, /*candidates=*/true);
}

RoutingExplanation Scheduler::Evaluate(const WorkloadSpec& spec, bool candidates) const {
  absl::MutexLock explain_lock(&explain_mu_);
  std::shared_ptr<const Pool> snapshot;
  {
    absl::MutexLock lock(&mu_);
    if (!loaded_) {
      // An empty pool would read "no clusters are registered" and never_fits: wrong and final.
      RoutingExplanation not_yet;
      not_yet.objective = spec.placement.objective;
      not_yet.decision.reason = PendingReason(ReasonCode::kNotLoaded);
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
  if (candidates) return router_.Explain(*explain_engine_, *explain_pool_, spec, clock_->Now());
  RoutingExplanation out;
  out.objective = spec.placement.objective;
  out.decision = router_.Place(*explain_engine_, *explain_pool_, spec, 0, {}, clock_->Now());
  return out;
}

std::vector<FairShare> Scheduler::FairShareReport() const {
  absl::MutexLock lock(&mu_);
  return fair_share_report_;
}

std::vector<QuotaUsage> Scheduler::QuotaReport() const {
  absl::MutexLock lock(&mu_);
  return quota_report_;
}

PoolReport Scheduler::Report() const {
  PoolReport report;
  report.models = ReportPool(pool_, engine_->mix());
  std::map<ReasonCode, int64_t> pending;
  for (const auto& [key, queued] : queue_) {
    // A reason waiting for its figures' refresh (`unwritten`) has the stored one's code.
    ++pending[queued.last_reason.code];
  }
  report.pending.assign(pending.begin(), pending.end());
  return report;
}

int Scheduler::pending_count() const {
  absl::MutexLock lock(&mu_);
  return pending_count_;
}

}  // namespace gpufed
