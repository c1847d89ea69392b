#include "sim/memory_store.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "auth/policy.h"
#include "federation/status_macros.h"
#include "federation/validation.h"

namespace gpufed::sim {
namespace {

// The checks and messages below follow storage/pg_store.cc, which is the reference.

constexpr int kDefaultPageSize = 100;
constexpr int kMaxPageSize = 1000;

// PostgreSQL keeps microseconds (truncated as storage/pg_store.cc's ToMicros does).
Timestamp ToMicros(Timestamp t) {
  return Timestamp(std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()));
}

// The one name rule (federation/validation.h), as PgStore applies it.
absl::Status CheckName(absl::string_view field, const std::string& value) {
  return ValidateName(field, value);
}

// PutDeclarations' input, as PgStore checks it: each passes ValidateDeclaration
// ("declarations[i]..."), and no cluster is named twice.
absl::Status CheckDeclarations(const std::vector<ClusterDeclaration>& declarations) {
  std::set<std::string_view> seen;
  for (size_t i = 0; i < declarations.size(); ++i) {
    const std::string field = absl::StrCat("declarations[", i, "]");
    RETURN_IF_ERROR(ValidateDeclaration(field, declarations[i]));
    if (!seen.insert(declarations[i].cluster).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".cluster: \"", declarations[i].cluster, "\" is declared twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// ---- MemoryStore -----------------------------------------------------------------------------

MemoryStore::MemoryStore() : clock_(&own_clock_) {}

MemoryStore::MemoryStore(const Clock* clock) : clock_(clock) {}

Timestamp MemoryStore::Now() const { return ToMicros(clock_->Now()); }

std::vector<MemoryStore::EventRow> MemoryStore::Events(WorkloadId id) const {
  absl::MutexLock lock(&mu_);
  std::vector<EventRow> out;
  for (const EventRow& row : events_) {
    if (id == 0 || row.workload_id == id) out.push_back(row);
  }
  return out;
}

void MemoryStore::RecordAuditIn(AuditLog* audit) {
  absl::MutexLock lock(&mu_);
  audit_ = audit;
}

void MemoryStore::Record(const AuditEvent& record) {
  if (audit_ == nullptr || record.action.empty()) return;
  // With the change, under the same lock: what PgStore writes in the change's transaction.
  audit_->Append(record).IgnoreError();
}

void MemoryStore::RecordEvent(EventRow row, const Workload& w) {
  if (audit_ != nullptr) {
    // As the trigger on workload_events writes it (migrations/0023_audit.sql).
    AuditEvent e;
    e.actor = row.actor;
    e.tenant = w.spec.tenant;
    e.project = w.spec.project;
    e.action = row.from == WorkloadState::kUnspecified
                   ? "workloads.submit"
                   : absl::StrCat("workloads.", absl::AsciiStrToLower(StateName(row.to)));
    e.object = absl::StrCat("workload/", row.workload_id);
    e.outcome = std::string(kAuditOk);
    e.reason = row.reason;
    e.detail = absl::StrCat(row.from == WorkloadState::kUnspecified ? "" : StateName(row.from),
                            " -> ", StateName(row.to));
    // A store without the audit key records nothing, as PgAuditLog refuses: nothing to roll back.
    audit_->Append(e).IgnoreError();
  }
  events_.push_back(std::move(row));
}

// ---- Workloads -------------------------------------------------------------------------------

absl::StatusOr<SubmitResult> MemoryStore::Submit(const WorkloadSpec& spec,
                                                 const PendingReason& reason,
                                                 const std::string& actor) {
  RETURN_IF_ERROR(CheckName("spec.tenant", spec.tenant));
  RETURN_IF_ERROR(CheckName("spec.project", spec.project));
  if (spec.name.empty()) return absl::InvalidArgumentError("spec.name: required");
  absl::MutexLock lock(&mu_);
  if (!tenants_.contains(spec.tenant)) {
    return absl::NotFoundError(
        absl::StrCat("spec.tenant: tenant \"", spec.tenant, "\" does not exist"));
  }
  if (!projects_.contains({spec.tenant, spec.project})) {
    return absl::NotFoundError(absl::StrCat("spec.project: project \"", spec.project,
                                            "\" does not exist in tenant \"", spec.tenant, "\""));
  }
  if (!spec.idempotency_key.empty()) {
    // As PgStore: a key whose workload was archived is free again.
    if (auto it = keys_.find({spec.tenant, spec.idempotency_key});
        it != keys_.end() && workloads_.contains(it->second)) {
      const Workload& existing = workloads_.at(it->second);
      if (existing.spec == spec) return SubmitResult{existing, false};
      return absl::AlreadyExistsError(absl::StrCat("spec.idempotency_key: \"", spec.idempotency_key,
                                                   "\" was already used by workload ", existing.id,
                                                   " with a different spec"));
    }
  }
  const Timestamp now = Now();
  Workload w;
  w.id = ++last_id_;
  w.spec = spec;
  w.state = WorkloadState::kPending;
  w.pending_reason = reason;
  w.create_time = now;
  w.update_time = now;
  w.version = 1;
  workloads_[w.id] = w;
  if (!spec.idempotency_key.empty()) keys_[{spec.tenant, spec.idempotency_key}] = w.id;
  RecordEvent(EventRow{w.id, now, WorkloadState::kUnspecified, WorkloadState::kPending,
                       actor.empty() ? "submit" : actor, "submitted"},
              w);
  return SubmitResult{std::move(w), true};
}

absl::StatusOr<Workload> MemoryStore::Get(WorkloadId id) {
  if (id <= 0) return absl::InvalidArgumentError("id: must be positive");
  absl::MutexLock lock(&mu_);
  auto it = workloads_.find(id);
  if (it != workloads_.end()) return it->second;
  if (auto archived = archive_.find(id); archived != archive_.end()) return archived->second;
  return absl::NotFoundError(absl::StrCat("workload ", id, " not found"));
}

absl::StatusOr<WorkloadPage> MemoryStore::List(const ListFilter& filter) {
  if (filter.page_size < 0) return absl::InvalidArgumentError("page_size: must not be negative");
  if (filter.before_id < 0) return absl::InvalidArgumentError("before_id: must not be negative");
  for (size_t i = 0; i < filter.states.size(); ++i) {
    if (filter.states[i] == WorkloadState::kUnspecified) {
      return absl::InvalidArgumentError(absl::StrCat("states[", i, "]: unspecified"));
    }
  }
  const size_t page_size =
      filter.page_size == 0 ? kDefaultPageSize : std::min(filter.page_size, kMaxPageSize);
  const WorkloadId before =
      filter.before_id > 0 ? filter.before_id : std::numeric_limits<WorkloadId>::max();

  absl::MutexLock lock(&mu_);
  WorkloadPage page;
  bool more = false;
  // Newest first: walk down from the first id below the cursor.
  for (auto it = std::make_reverse_iterator(workloads_.lower_bound(before));
       it != workloads_.rend(); ++it) {
    const Workload& w = it->second;
    if (!filter.tenant.empty() && w.spec.tenant != filter.tenant) continue;
    if (!filter.project.empty() && w.spec.project != filter.project) continue;
    if (!filter.states.empty() &&
        std::find(filter.states.begin(), filter.states.end(), w.state) == filter.states.end()) {
      continue;
    }
    if (!filter.cluster.empty() && w.assignment.cluster != filter.cluster) continue;
    if (page.workloads.size() == page_size) {
      more = true;
      break;
    }
    page.workloads.push_back(w);
  }
  if (more && !page.workloads.empty()) page.next_before_id = page.workloads.back().id;
  return page;
}

absl::StatusOr<std::vector<Workload>> MemoryStore::ListChangedAfter(const std::string& tenant,
                                                                    Timestamp after_time,
                                                                    WorkloadId after_id,
                                                                    int limit) {
  if (limit < 1 || limit > 1000) return absl::InvalidArgumentError("limit: must be 1..1000");
  // To the microsecond, as PostgreSQL compares it.
  const std::pair<Timestamp, WorkloadId> after{ToMicros(after_time), after_id};
  absl::MutexLock lock(&mu_);
  std::vector<const Workload*> changed;
  for (const auto& [id, w] : workloads_) {
    if (!tenant.empty() && w.spec.tenant != tenant) continue;
    if (std::pair(w.update_time, w.id) > after) changed.push_back(&w);
  }
  std::sort(changed.begin(), changed.end(), [](const Workload* a, const Workload* b) {
    return std::pair(a->update_time, a->id) < std::pair(b->update_time, b->id);
  });
  std::vector<Workload> out;
  const size_t n = std::min(changed.size(), static_cast<size_t>(limit));
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(*changed[i]);
  return out;
}

absl::StatusOr<std::vector<Workload>> MemoryStore::ListPending(int limit) {
  if (limit <= 0) return absl::InvalidArgumentError("limit: must be positive");
  absl::MutexLock lock(&mu_);
  std::vector<const Workload*> pending;
  for (const auto& [id, w] : workloads_) {
    if (w.state == WorkloadState::kPending || w.state == WorkloadState::kAdmitted) {
      pending.push_back(&w);
    }
  }
  // Priority desc, id asc; workloads_ is already in id order, so a stable sort suffices.
  std::stable_sort(pending.begin(), pending.end(), [](const Workload* a, const Workload* b) {
    return a->spec.priority > b->spec.priority;
  });
  std::vector<Workload> out;
  const size_t n = std::min(pending.size(), static_cast<size_t>(limit));
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(*pending[i]);
  return out;
}

absl::StatusOr<std::vector<Workload>> MemoryStore::ListActive(const std::string& cluster) {
  absl::MutexLock lock(&mu_);
  std::vector<Workload> out;
  for (const auto& [id, w] : workloads_) {
    if (!HoldsCapacity(w.state)) continue;
    if (!cluster.empty() && w.assignment.cluster != cluster) continue;
    out.push_back(w);
  }
  return out;
}

absl::StatusOr<std::vector<WorkloadId>> MemoryStore::ListHeldIds(const std::string& tenant,
                                                                 const std::string& project) {
  absl::MutexLock lock(&mu_);
  std::vector<WorkloadId> out;
  for (const auto& [id, w] : workloads_) {
    if (HoldsCapacity(w.state) && w.spec.tenant == tenant &&
        (project.empty() || w.spec.project == project)) {
      out.push_back(id);
    }
  }
  return out;
}

absl::StatusOr<std::vector<TransitionResult>> MemoryStore::ApplyTransitions(
    const std::vector<Transition>& transitions) {
  for (size_t i = 0; i < transitions.size(); ++i) {
    RETURN_IF_ERROR(ValidateTransition(transitions[i], i));
  }
  absl::MutexLock lock(&mu_);
  return ApplyLocked(transitions);
}

bool MemoryStore::Fenced(const Transition& t) const {
  if (t.to != WorkloadState::kPlaced) return false;
  auto it = clusters_.find(t.assignment->cluster);
  // As PgStore: a cluster the store does not know does not fence.
  if (it == clusters_.end()) return false;
  const Cluster& c = it->second;
  if (c.state == ClusterState::kUnreachable || c.cordoned || c.epoch != t.assignment->epoch) {
    return true;
  }
  for (const ReplicaAssignment& r : t.assignment->replicas) {
    if (node_cordons_.contains({c.info.name, r.node})) return true;
  }
  return false;
}

std::vector<TransitionResult> MemoryStore::ApplyLocked(const std::vector<Transition>& transitions) {
  std::vector<TransitionResult> results(transitions.size());
  if (transitions.empty()) return results;
  const Timestamp now = Now();
  // In batch order: the steps of one workload apply one after the other, as PgStore's rounds
  // do; steps of different workloads do not interact.
  for (size_t i = 0; i < transitions.size(); ++i) {
    const Transition& t = transitions[i];
    results[i].id = t.id;
    auto it = workloads_.find(t.id);
    if (it == workloads_.end() || it->second.state != t.from) continue;
    Workload& w = it->second;
    if (!t.on_cluster.empty() && w.assignment.cluster != t.on_cluster) continue;
    if (t.at_attempt != 0 && w.attempts != t.at_attempt) continue;
    if (t.unless_evicting && w.evicting) continue;
    if (Fenced(t)) continue;
    const Timestamp at = t.time ? ToMicros(*t.time) : now;
    if (t.from == WorkloadState::kRunning) {
      // The run's last span, metered as it was before the change (PgStore's MeterEnds).
      const Timestamp mark = marks_.contains(w.id) ? marks_[w.id] : w.start_time.value_or(now);
      MeterLocked(w, mark, std::min(std::max(at, mark), now));
      marks_.erase(w.id);
    }
    if (t.to == WorkloadState::kRunning) marks_[w.id] = std::min(std::max(at, w.update_time), now);
    w.state = t.to;
    // Back to PENDING (a requeue): the reason given, else the actor's words until the scheduler
    // has a better one.
    w.pending_reason = PendingReason();
    if (t.to == WorkloadState::kAdmitted && t.pending_reason) w.pending_reason = *t.pending_reason;
    if (t.to == WorkloadState::kPending) {
      w.pending_reason =
          t.pending_reason ? *t.pending_reason : ReasonWithText(ReasonCode::kRequeued, t.reason);
    }
    if (t.to == WorkloadState::kPlaced) {
      w.assignment = *t.assignment;
      ++w.attempts;
    } else if (t.to == WorkloadState::kPending) {
      w.assignment = Assignment();
    }
    if (t.to == WorkloadState::kRunning) {
      w.start_time = at;
    } else if (t.to == WorkloadState::kPending) {
      w.start_time.reset();
    }
    if (!HoldsCapacity(t.to)) w.evicting.reset();
    if (IsTerminal(t.to)) w.end_time = at;
    if (t.exit_code) w.exit_code = *t.exit_code;
    if (!t.message.empty()) w.message = t.message;
    w.update_time = now;
    ++w.version;
    RecordEvent(EventRow{w.id, at, t.from, t.to, t.actor, t.reason}, w);

    WorkloadEvent event;
    event.workload = w;
    event.from = t.from;
    event.to = t.to;
    event.time = at;
    results[i].applied = true;
    results[i].current = w;
    results[i].event = std::move(event);
  }
  // Skipped ones report the workload as the whole batch left it.
  for (TransitionResult& r : results) {
    if (r.applied) continue;
    if (auto it = workloads_.find(r.id); it != workloads_.end()) r.current = it->second;
  }
  return results;
}

absl::Status MemoryStore::SetPendingReasons(
    const std::vector<std::pair<WorkloadId, PendingReason>>& reasons) {
  if (reasons.empty()) return absl::OkStatus();
  std::map<WorkloadId, PendingReason> last;  // a later entry for the same id wins
  for (size_t i = 0; i < reasons.size(); ++i) {
    if (reasons[i].first <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("reasons[", i, "].id: must be positive"));
    }
    last[reasons[i].first] = reasons[i].second;
  }
  absl::MutexLock lock(&mu_);
  const Timestamp now = Now();
  for (auto& [id, reason] : last) {
    auto it = workloads_.find(id);
    if (it == workloads_.end()) continue;
    Workload& w = it->second;
    const bool waiting = w.state == WorkloadState::kPending || w.state == WorkloadState::kAdmitted;
    if (!waiting || w.pending_reason == reason) continue;
    w.pending_reason = std::move(reason);
    w.update_time = now;
    ++w.version;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Workload>> MemoryStore::RequestEvictions(
    const std::vector<Eviction>& evictions) {
  for (size_t i = 0; i < evictions.size(); ++i) {
    RETURN_IF_ERROR(ValidateEviction(evictions[i], i));
  }
  absl::MutexLock lock(&mu_);
  return MarkLocked(evictions);
}

absl::StatusOr<WorkloadStore::PreemptionResult> MemoryStore::RequestPreemptions(
    const std::vector<Preemption>& preemptions, const AuditEvent& record) {
  std::vector<Eviction> evictions;
  for (size_t i = 0; i < preemptions.size(); ++i) {
    RETURN_IF_ERROR(ValidatePreemption(preemptions[i], i));
    evictions.insert(evictions.end(), preemptions[i].victims.begin(), preemptions[i].victims.end());
  }
  absl::MutexLock lock(&mu_);
  PreemptionResult out;
  out.marked = MarkLocked(evictions);
  std::vector<WorkloadId> ids;
  for (const Workload& w : out.marked) ids.push_back(w.id);
  out.recorded = RecordsOfMarked(preemptions, ids, Now());
  for (PreemptionRecord& r : out.recorded) {
    r.id = static_cast<int64_t>(preemptions_.size()) + 1;
    preemptions_.push_back(r);
  }
  for (const AuditEvent& row : PreemptionAuditRows(record, out)) Record(row);
  return out;
}

absl::StatusOr<std::vector<PreemptionRecord>> MemoryStore::ListPreemptions(
    const std::string& tenant, int64_t before_id, int limit) {
  if (limit <= 0 || limit > kMaxPreemptionPage) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit: must be 1 to ", kMaxPreemptionPage, ", got ", limit));
  }
  absl::MutexLock lock(&mu_);
  std::vector<PreemptionRecord> out;
  // Newest first. (Not std::views::reverse: clang-tidy 14 cannot parse libstdc++ 12's.)
  for (size_t i = preemptions_.size(); i-- > 0;) {
    const PreemptionRecord& p = preemptions_[i];
    if (static_cast<int>(out.size()) == limit) break;
    if (before_id > 0 && p.id >= before_id) continue;
    const bool involved =
        tenant.empty() || p.tenant == tenant ||
        std::any_of(p.victims.begin(), p.victims.end(),
                    [&](const PreemptionVictim& v) { return v.tenant == tenant; });
    if (involved) out.push_back(p);
  }
  return out;
}

std::vector<Workload> MemoryStore::MarkLocked(const std::vector<Eviction>& evictions) {
  const Timestamp now = Now();
  std::map<WorkloadId, Workload*> marked;  // returned in id order, as PgStore's
  for (const Eviction& e : evictions) {
    auto it = workloads_.find(e.id);
    if (it == workloads_.end()) continue;
    Workload& w = it->second;
    if (!HoldsCapacity(w.state) || w.assignment.cluster != e.cluster || w.attempts != e.attempt ||
        w.cancel_requested || w.evicting) {
      continue;
    }
    w.evicting = e.why;
    w.message = e.message;
    w.update_time = now;
    ++w.version;
    marked[w.id] = &w;
  }
  std::vector<Workload> out;
  out.reserve(marked.size());
  for (const auto& [id, w] : marked) out.push_back(*w);
  return out;
}

absl::StatusOr<WorkloadStore::CancelResult> MemoryStore::RequestCancel(WorkloadId id,
                                                                       const std::string& actor,
                                                                       const std::string& reason,
                                                                       const AuditEvent& record) {
  if (id <= 0) return absl::InvalidArgumentError("id: must be positive");
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(CancelResult out, CancelLocked(id, actor, reason));
  AuditEvent row = record;
  row.detail = CancelAuditDetail(out.workload);
  Record(row);
  return out;
}

absl::StatusOr<WorkloadStore::CancelResult> MemoryStore::CancelLocked(WorkloadId id,
                                                                      const std::string& actor,
                                                                      const std::string& reason) {
  auto it = workloads_.find(id);
  if (it == workloads_.end()) {
    if (auto archived = archive_.find(id); archived != archive_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("workload ", id, " is already ", StateName(archived->second.state)));
    }
    return absl::NotFoundError(absl::StrCat("workload ", id, " not found"));
  }
  Workload& w = it->second;
  if (IsTerminal(w.state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("workload ", id, " is already ", StateName(w.state)));
  }
  const Timestamp now = Now();
  CancelResult out;
  if (HoldsCapacity(w.state)) {
    // Its agent must stop it first; the agent's report moves it to CANCELLED.
    if (!w.cancel_requested) {
      w.cancel_requested = true;
      w.update_time = now;
      ++w.version;
    }
    out.workload = w;
    return out;
  }
  const WorkloadState from = w.state;
  w.state = WorkloadState::kCancelled;
  w.pending_reason = PendingReason();
  w.cancel_requested = true;
  if (!reason.empty()) w.message = reason;
  w.end_time = now;
  w.update_time = now;
  ++w.version;
  RecordEvent(EventRow{id, now, from, WorkloadState::kCancelled, actor, reason}, w);
  out.workload = w;
  WorkloadEvent event;
  event.workload = w;
  event.from = from;
  event.to = WorkloadState::kCancelled;
  event.time = now;
  out.event = std::move(event);
  return out;
}

absl::StatusOr<int> MemoryStore::ArchiveFinished(Timestamp ended_before, int limit) {
  if (limit <= 0) return absl::InvalidArgumentError("limit: must be positive");
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<Timestamp, WorkloadId>> due;  // oldest end first, as PgStore
  for (const auto& [id, w] : workloads_) {
    if (IsTerminal(w.state) && w.end_time && *w.end_time < ended_before) {
      due.emplace_back(*w.end_time, id);
    }
  }
  std::sort(due.begin(), due.end());
  if (due.size() > static_cast<size_t>(limit)) due.resize(static_cast<size_t>(limit));
  for (const auto& [ended, id] : due) {
    archive_[id] = std::move(workloads_.at(id));
    workloads_.erase(id);
  }
  return static_cast<int>(due.size());
}

absl::StatusOr<std::vector<std::pair<WorkloadState, int64_t>>> MemoryStore::CountByState() {
  absl::MutexLock lock(&mu_);
  std::map<WorkloadState, int64_t> counts;
  for (const auto& [id, w] : workloads_) ++counts[w.state];
  return std::vector<std::pair<WorkloadState, int64_t>>(counts.begin(), counts.end());
}

// ---- Clusters --------------------------------------------------------------------------------

absl::StatusOr<Cluster> MemoryStore::RegisterCluster(const ClusterInfo& info,
                                                     const std::vector<NodeInfo>& nodes,
                                                     const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateStorableInventory(info, nodes));
  absl::MutexLock lock(&mu_);
  Cluster& c = clusters_[info.name];  // a new one starts at epoch 1
  c.info = info;
  c.state = c.cordoned ? ClusterState::kDraining : ClusterState::kReady;
  c.last_heartbeat = Now();
  // Stored order, as PgStore reads it back: nodes by name, GPUs by index.
  c.nodes = nodes;
  std::sort(c.nodes.begin(), c.nodes.end(),
            [](const NodeInfo& a, const NodeInfo& b) { return a.name < b.name; });
  for (NodeInfo& node : c.nodes) {
    std::sort(node.gpus.begin(), node.gpus.end(),
              [](const GpuInfo& a, const GpuInfo& b) { return a.index < b.index; });
  }
  AuditEvent row = record;
  absl::StrAppend(&row.detail, "; epoch: ", c.epoch);
  Record(row);
  return AsStored(c);
}

Cluster MemoryStore::AsStored(Cluster c) const {
  for (NodeInfo& node : c.nodes) {
    node.cordoned = node_cordons_.contains({c.info.name, node.name});
    node.schedulable = node.schedulable && !node.cordoned;
  }
  c.declared = DeclaredLocked(c.info.name);
  return c;
}

ClusterDeclaration MemoryStore::DeclaredLocked(const std::string& cluster) const {
  auto it = declarations_.find(cluster);
  return it == declarations_.end() ? ClusterDeclaration{} : it->second;
}

absl::StatusOr<Cluster> MemoryStore::SetCordon(const std::string& cluster, const std::string& node,
                                               bool cordoned, const AuditEvent& record) {
  absl::MutexLock lock(&mu_);
  auto it = clusters_.find(cluster);
  if (it == clusters_.end()) {
    return absl::NotFoundError(absl::StrCat("cluster \"", cluster, "\" not found"));
  }
  Cluster& c = it->second;
  if (node.empty()) {
    c.cordoned = cordoned;
    if (c.state != ClusterState::kUnreachable) {
      c.state = cordoned ? ClusterState::kDraining : ClusterState::kReady;
    }
    Record(record);
    return AsStored(c);
  }
  const bool has = std::any_of(c.nodes.begin(), c.nodes.end(),
                               [&](const NodeInfo& n) { return n.name == node; });
  // As PgStore: a cordon goes on a node the cluster has; one may be lifted from a node it lost.
  if (cordoned ? !has : !has && !node_cordons_.contains({cluster, node})) {
    return absl::NotFoundError(
        absl::StrCat("node \"", node, "\" of cluster \"", cluster, "\" not found"));
  }
  if (cordoned) {
    node_cordons_.insert({cluster, node});
  } else {
    node_cordons_.erase({cluster, node});
  }
  Record(record);
  return AsStored(c);
}

absl::Status MemoryStore::RecordHeartbeat(const std::string& cluster, Timestamp at) {
  absl::MutexLock lock(&mu_);
  auto it = clusters_.find(cluster);
  if (it == clusters_.end()) {
    return absl::NotFoundError(absl::StrCat("cluster \"", cluster, "\" not found"));
  }
  const Timestamp t = ToMicros(at);
  std::optional<Timestamp>& last = it->second.last_heartbeat;
  if (!last || *last < t) last = t;
  return absl::OkStatus();
}

absl::Status MemoryStore::SetClusterState(const std::string& cluster, ClusterState state) {
  if (state == ClusterState::kUnspecified) {
    return absl::InvalidArgumentError("state: unspecified");
  }
  absl::MutexLock lock(&mu_);
  auto it = clusters_.find(cluster);
  if (it == clusters_.end()) {
    return absl::NotFoundError(absl::StrCat("cluster \"", cluster, "\" not found"));
  }
  Cluster& c = it->second;
  if (state == ClusterState::kUnreachable && c.state != ClusterState::kUnreachable) ++c.epoch;
  c.state = state;
  return absl::OkStatus();
}

absl::StatusOr<ClusterStore::LossResult> MemoryStore::LoseCluster(const std::string& cluster,
                                                                  const LossPlan& plan,
                                                                  const AuditEvent& record) {
  absl::MutexLock lock(&mu_);
  auto it = clusters_.find(cluster);
  if (it == clusters_.end()) {
    return absl::NotFoundError(absl::StrCat("cluster \"", cluster, "\" not found"));
  }
  LossResult out;
  out.cluster = it->second;
  out.cluster.nodes.clear();
  out.cluster.declared = DeclaredLocked(cluster);
  if (out.cluster.state != ClusterState::kUnreachable) ++out.cluster.epoch;
  out.cluster.state = ClusterState::kUnreachable;
  std::vector<Workload> held;
  for (const auto& [id, w] : workloads_) {
    if (HoldsCapacity(w.state) && w.assignment.cluster == cluster) held.push_back(w);
  }
  const std::vector<Transition> transitions = plan(out.cluster, held);
  for (size_t i = 0; i < transitions.size(); ++i) {
    RETURN_IF_ERROR(ValidateTransition(transitions[i], i));
  }
  // Nothing changes until everything is known to be valid (one transaction).
  it->second.epoch = out.cluster.epoch;
  it->second.state = ClusterState::kUnreachable;
  out.transitions = ApplyLocked(transitions);
  AuditEvent row = record;
  absl::StrAppend(&row.detail, row.detail.empty() ? "" : "; ", LossAuditDetail(out));
  Record(row);
  return out;
}

absl::StatusOr<std::vector<Cluster>> MemoryStore::ListClusters(bool include_nodes) {
  absl::MutexLock lock(&mu_);
  std::vector<Cluster> out;
  out.reserve(clusters_.size());
  for (const auto& [name, c] : clusters_) {
    out.push_back(AsStored(c));
    if (!include_nodes) out.back().nodes.clear();
  }
  return out;
}

absl::StatusOr<Cluster> MemoryStore::GetCluster(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = clusters_.find(name);
  if (it == clusters_.end()) {
    return absl::NotFoundError(absl::StrCat("cluster \"", name, "\" not found"));
  }
  return AsStored(it->second);
}

absl::StatusOr<std::vector<ClusterDeclaration>> MemoryStore::ListDeclarations() {
  absl::MutexLock lock(&mu_);
  std::vector<ClusterDeclaration> out;
  out.reserve(declarations_.size());
  for (const auto& [name, d] : declarations_) out.push_back(d);
  return out;
}

absl::Status MemoryStore::DeleteCluster(const std::string& cluster, const AuditEvent& record) {
  RETURN_IF_ERROR(CheckName("name", cluster));
  absl::MutexLock lock(&mu_);
  auto it = clusters_.find(cluster);
  if (it != clusters_.end()) {
    if (!it->second.cordoned) {
      return absl::FailedPreconditionError(
          absl::StrCat("cluster ", cluster, " is not cordoned: cordon or drain it first"));
    }
    const auto held = std::count_if(workloads_.begin(), workloads_.end(), [&](const auto& w) {
      return HoldsCapacity(w.second.state) && w.second.assignment.cluster == cluster;
    });
    if (held > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cluster ", cluster, " holds ", held, " workloads: drain it and let them end first"));
    }
    const Timestamp now = Now();
    const auto tokens = std::count_if(tokens_.begin(), tokens_.end(), [&](const auto& t) {
      return t.second.cluster == cluster && (!t.second.expire_time || *t.second.expire_time > now);
    });
    if (tokens > 0) {
      return absl::FailedPreconditionError(absl::StrCat("cluster ", cluster, " has ", tokens,
                                                        " live agent tokens: revoke them first"));
    }
    const auto certificates =
        std::count_if(certificates_.begin(), certificates_.end(), [&](const auto& c) {
          return c.second.cluster == cluster && !c.second.revoke_time && c.second.not_after > now;
        });
    if (certificates > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cluster ", cluster, " has ", certificates,
                       " live certificates: revoke the cluster (clusters revoke) first"));
    }
  }
  const bool declared = declarations_.erase(cluster) > 0;
  if (it == clusters_.end() && !declared) {
    return absl::NotFoundError(absl::StrCat("cluster \"", cluster, "\" not found"));
  }
  if (it != clusters_.end()) clusters_.erase(it);
  std::erase_if(node_cordons_, [&](const auto& c) { return c.first == cluster; });
  Record(record);
  return absl::OkStatus();
}

absl::Status MemoryStore::PutDeclarations(const std::vector<ClusterDeclaration>& declarations,
                                          const AuditEvent& record) {
  RETURN_IF_ERROR(CheckDeclarations(declarations));
  absl::MutexLock lock(&mu_);
  for (ClusterDeclaration d : declarations) {
    // As PostgreSQL keeps them: prices' times to the microsecond.
    for (PriceEntry& e : d.prices) e.effective_from = ToMicros(e.effective_from);
    declarations_[d.cluster] = std::move(d);
  }
  Record(record);
  return absl::OkStatus();
}

// ---- Tenancy ---------------------------------------------------------------------------------

absl::StatusOr<Tenant> MemoryStore::CreateTenant(const Tenant& tenant, const AuditEvent& record) {
  RETURN_IF_ERROR(CheckName("tenant.name", tenant.name));
  absl::MutexLock lock(&mu_);
  if (tenants_.contains(tenant.name)) {
    return absl::AlreadyExistsError(absl::StrCat("tenant \"", tenant.name, "\" already exists"));
  }
  Tenant out = tenant;
  out.create_time = Now();
  tenants_[tenant.name] = out;
  Record(record);
  return out;
}

absl::StatusOr<std::vector<Tenant>> MemoryStore::ListTenants() {
  absl::MutexLock lock(&mu_);
  std::vector<Tenant> out;
  out.reserve(tenants_.size());
  for (const auto& [name, t] : tenants_) out.push_back(t);
  return out;
}

absl::StatusOr<Project> MemoryStore::CreateProject(const Project& project,
                                                   const AuditEvent& record) {
  RETURN_IF_ERROR(CheckName("project.tenant", project.tenant));
  RETURN_IF_ERROR(CheckName("project.name", project.name));
  absl::MutexLock lock(&mu_);
  if (!tenants_.contains(project.tenant)) {
    return absl::NotFoundError(
        absl::StrCat("project.tenant: tenant \"", project.tenant, "\" does not exist"));
  }
  auto [it, inserted] = projects_.try_emplace({project.tenant, project.name}, project);
  if (!inserted) {
    return absl::AlreadyExistsError(absl::StrCat(
        "project \"", project.name, "\" already exists in tenant \"", project.tenant, "\""));
  }
  it->second.create_time = Now();
  Record(record);
  return it->second;
}

absl::StatusOr<std::vector<Project>> MemoryStore::ListProjects(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  if (!tenants_.contains(tenant)) {
    return absl::NotFoundError(absl::StrCat("tenant \"", tenant, "\" does not exist"));
  }
  std::vector<Project> out;
  for (auto it = projects_.lower_bound({tenant, ""});
       it != projects_.end() && it->first.first == tenant; ++it) {
    out.push_back(it->second);
  }
  return out;
}

absl::StatusOr<TokenRecord> MemoryStore::CreateToken(const std::string& token_hash,
                                                     const TokenRecord& record,
                                                     const AuditEvent& audit) {
  RETURN_IF_ERROR(ValidateTokenRecord(token_hash, record));
  absl::MutexLock lock(&mu_);
  if (!record.tenant.empty() && !tenants_.contains(record.tenant)) {
    return absl::NotFoundError(
        absl::StrCat("tenant: tenant \"", record.tenant, "\" does not exist"));
  }
  if (!record.project.empty() && !projects_.contains({record.tenant, record.project})) {
    return absl::NotFoundError(absl::StrCat("project: project \"", record.project,
                                            "\" does not exist in tenant \"", record.tenant, "\""));
  }
  if (tokens_.contains(token_hash) || revoked_hashes_.contains(token_hash)) {
    return absl::AlreadyExistsError("token: a token with this hash already exists");
  }
  if (auto bound = bindings_.find({record.tenant, record.project, record.subject});
      record.role != auth::Role::kAgent && bound != bindings_.end() &&
      auth::Outranks(record.role, bound->second.role)) {
    return absl::FailedPreconditionError(absl::StrCat("role: ", record.subject, " is bound as ",
                                                      auth::RoleName(bound->second.role),
                                                      " at this scope"));
  }
  TokenRecord stored = record;
  stored.id = next_token_id_++;
  stored.create_time = Now();
  stored.last_used_time.reset();
  stored.revoke_time.reset();
  tokens_.emplace(token_hash, stored);
  AuditEvent row = audit;
  absl::StrAppend(&row.object, stored.id);
  Record(row);
  return stored;
}

absl::Status MemoryStore::DeleteProject(const std::string& tenant, const std::string& name,
                                        const AuditEvent& record) {
  absl::MutexLock lock(&mu_);
  auto it = projects_.find({tenant, name});
  if (it == projects_.end()) {
    return absl::NotFoundError(absl::StrCat("project ", tenant, "/", name, " does not exist"));
  }
  const auto named = std::count_if(workloads_.begin(), workloads_.end(), [&](const auto& w) {
    return w.second.spec.tenant == tenant && w.second.spec.project == name;
  });
  if (named > 0) {
    return absl::FailedPreconditionError(absl::StrCat("project ", tenant, "/", name,
                                                      " is named by ", named,
                                                      " workloads (ended ones until archived)"));
  }
  const auto of_project = [&](const auto& t) {
    return t.second.tenant == tenant && t.second.project == name;
  };
  if (std::any_of(tokens_.begin(), tokens_.end(), of_project)) {
    return absl::FailedPreconditionError(
        absl::StrCat("project ", tenant, "/", name, " has live tokens: revoke them first"));
  }
  std::erase_if(revoked_tokens_, of_project);
  std::erase_if(bindings_, [&](const auto& b) {
    return std::get<0>(b.first) == tenant && std::get<1>(b.first) == name;
  });
  std::erase_if(quotas_, [&](const auto& q) {
    return std::get<0>(q.first) == tenant && std::get<1>(q.first) == name;
  });
  weights_.erase({tenant, name});
  projects_.erase(it);
  Record(record);
  return absl::OkStatus();
}

absl::Status MemoryStore::DeleteTenant(const std::string& name, const AuditEvent& record) {
  absl::MutexLock lock(&mu_);
  if (!tenants_.contains(name)) {
    return absl::NotFoundError(absl::StrCat("tenant ", name, " does not exist"));
  }
  const auto of_tenant = [&](const auto& container) {
    return std::any_of(container.begin(), container.end(),
                       [&](const auto& entry) { return std::get<0>(entry.first) == name; });
  };
  if (of_tenant(projects_)) {
    return absl::FailedPreconditionError(
        absl::StrCat("tenant ", name, " has projects: delete them first"));
  }
  if (std::any_of(tokens_.begin(), tokens_.end(),
                  [&](const auto& t) { return t.second.tenant == name; })) {
    return absl::FailedPreconditionError(
        absl::StrCat("tenant ", name, " has live tokens: revoke them first"));
  }
  std::erase_if(quotas_, [&](const auto& q) { return std::get<0>(q.first) == name; });
  std::erase_if(weights_, [&](const auto& w) { return w.first.first == name; });
  std::erase_if(revoked_tokens_, [&](const auto& t) { return t.second.tenant == name; });
  std::erase_if(bindings_, [&](const auto& b) { return std::get<0>(b.first) == name; });
  tenants_.erase(name);
  Record(record);
  return absl::OkStatus();
}

absl::StatusOr<ClusterCertificate> MemoryStore::AddClusterCertificate(
    const ClusterCertificate& certificate, const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateClusterCertificate(certificate));
  absl::MutexLock lock(&mu_);
  if (certificates_.contains(certificate.serial)) {
    return absl::AlreadyExistsError("serial: a certificate with this serial exists");
  }
  ClusterCertificate stored = certificate;
  stored.issue_time = Now();
  stored.revoke_time.reset();
  certificates_.emplace(stored.serial, stored);
  Record(record);
  return stored;
}

absl::StatusOr<ClusterCertificate> MemoryStore::LookupClusterCertificate(
    const std::string& serial, const std::string& cluster) {
  absl::MutexLock lock(&mu_);
  auto it = certificates_.find(serial);
  if (it == certificates_.end() || it->second.cluster != cluster || it->second.revoke_time ||
      it->second.not_after <= Now()) {
    return absl::NotFoundError("cluster certificate not found");
  }
  return it->second;
}

absl::StatusOr<TokenRecord> MemoryStore::RevokeToken(int64_t id, const std::string& tenant,
                                                     const std::string& project,
                                                     const AuditEvent& record) {
  absl::MutexLock lock(&mu_);
  const auto in_scope = [&](const TokenRecord& r) {
    return (tenant.empty() || r.tenant == tenant) && (project.empty() || r.project == project);
  };
  if (auto it = revoked_tokens_.find(id); it != revoked_tokens_.end() && in_scope(it->second)) {
    Record(record);  // a call that succeeded, though it changed nothing
    return it->second;
  }
  for (auto it = tokens_.begin(); it != tokens_.end(); ++it) {
    if (it->second.id != id || !in_scope(it->second)) continue;
    TokenRecord revoked = it->second;
    revoked.revoke_time = Now();
    revoked_hashes_.insert(it->first);
    tokens_.erase(it);
    revoked_tokens_.emplace(id, revoked);
    Record(record);
    return revoked;
  }
  return absl::NotFoundError("token_id: no such token");
}

absl::StatusOr<ClusterCertificateStore::ClusterRevocation> MemoryStore::RevokeCluster(
    const std::string& cluster, const AuditEvent& record) {
  absl::MutexLock lock(&mu_);
  ClusterRevocation out;
  const Timestamp now = Now();
  for (auto& [serial, certificate] : certificates_) {
    if (certificate.cluster != cluster || certificate.revoke_time) continue;
    certificate.revoke_time = now;
    ++out.certificates;
  }
  for (auto it = tokens_.begin(); it != tokens_.end();) {
    if (it->second.role != auth::Role::kAgent || it->second.cluster != cluster) {
      ++it;
      continue;
    }
    TokenRecord revoked = it->second;
    revoked.revoke_time = now;
    out.tokens.push_back(revoked.id);
    revoked_hashes_.insert(it->first);
    revoked_tokens_.emplace(revoked.id, std::move(revoked));
    it = tokens_.erase(it);
  }
  std::sort(out.tokens.begin(), out.tokens.end());
  AuditEvent row = record;
  absl::StrAppend(&row.detail, row.detail.empty() ? "" : "; ",
                  "certificates revoked: ", out.certificates);
  AppendAuditIds(row, "tokens revoked", out.tokens);
  Record(row);
  return out;
}

absl::StatusOr<TokenRecord> MemoryStore::LookupToken(const std::string& token_hash) {
  absl::MutexLock lock(&mu_);
  auto it = tokens_.find(token_hash);
  const Timestamp now = Now();
  if (it == tokens_.end() || (it->second.expire_time && *it->second.expire_time <= now)) {
    return absl::NotFoundError("token not found");
  }
  it->second.last_used_time = now;
  return it->second;
}

absl::StatusOr<std::vector<TokenRecord>> MemoryStore::ListTokens(const std::string& tenant,
                                                                 const std::string& project) {
  absl::MutexLock lock(&mu_);
  std::map<int64_t, TokenRecord> by_id = revoked_tokens_;
  for (const auto& [hash, record] : tokens_) by_id.emplace(record.id, record);
  std::vector<TokenRecord> out;
  for (const auto& [id, record] : by_id) {
    if ((!tenant.empty() && record.tenant != tenant) ||
        (!project.empty() && record.project != project)) {
      continue;
    }
    if (out.size() == static_cast<size_t>(kMaxTokenList)) break;
    out.push_back(record);
  }
  return out;
}

absl::StatusOr<int64_t> MemoryStore::CountTokens() {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(tokens_.size());
}

absl::StatusOr<BindingChange> MemoryStore::SetRoleBinding(const RoleBinding& binding,
                                                          const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateRoleBinding(binding));
  absl::MutexLock lock(&mu_);
  if (!binding.tenant.empty() && !tenants_.contains(binding.tenant)) {
    return absl::NotFoundError(
        absl::StrCat("tenant: tenant \"", binding.tenant, "\" does not exist"));
  }
  if (!binding.project.empty() && !projects_.contains({binding.tenant, binding.project})) {
    return absl::NotFoundError(absl::StrCat("project: project \"", binding.project,
                                            "\" does not exist in tenant \"", binding.tenant,
                                            "\""));
  }
  const auto key = std::make_tuple(binding.tenant, binding.project, binding.subject);
  auto it = bindings_.find(key);
  std::optional<RoleBinding> before;
  if (it != bindings_.end()) before = it->second;
  if (!before && std::count_if(bindings_.begin(), bindings_.end(), [&](const auto& b) {
                   return std::get<0>(b.first) == binding.tenant;
                 }) >= kMaxBindingsPerTenant) {
    return absl::ResourceExhaustedError(
        absl::StrCat("subject: the scope already has ", kMaxBindingsPerTenant, " role bindings"));
  }
  const Timestamp now = Now();
  RoleBinding stored = binding;
  stored.create_time = before ? before->create_time : now;
  stored.update_time = before && before->role == binding.role ? before->update_time : now;
  bindings_[key] = stored;
  BindingChange change{stored, {}};
  for (auto& [hash, token] : tokens_) {
    if (token.subject == binding.subject && token.tenant == binding.tenant &&
        token.project == binding.project && token.role != auth::Role::kAgent &&
        auth::Outranks(token.role, binding.role)) {
      token.role = binding.role;
      change.tokens.push_back(token.id);
    }
  }
  std::sort(change.tokens.begin(), change.tokens.end());
  AuditEvent row = record;
  AppendAuditIds(row, "tokens lowered", change.tokens);
  Record(row);
  return change;
}

absl::StatusOr<BindingChange> MemoryStore::DeleteRoleBinding(const std::string& subject,
                                                             const std::string& tenant,
                                                             const std::string& project,
                                                             const AuditEvent& record) {
  absl::MutexLock lock(&mu_);
  auto it = bindings_.find({tenant, project, subject});
  if (it == bindings_.end()) {
    return absl::NotFoundError("subject: no role binding for it at this scope");
  }
  BindingChange change{it->second, {}};
  bindings_.erase(it);
  const Timestamp now = Now();
  for (auto t = tokens_.begin(); t != tokens_.end();) {
    const TokenRecord& token = t->second;
    if (token.subject != subject || token.tenant != tenant || token.project != project ||
        token.role == auth::Role::kAgent) {
      ++t;
      continue;
    }
    TokenRecord revoked = token;
    revoked.revoke_time = now;
    change.tokens.push_back(revoked.id);
    revoked_hashes_.insert(t->first);
    revoked_tokens_.emplace(revoked.id, std::move(revoked));
    t = tokens_.erase(t);
  }
  std::sort(change.tokens.begin(), change.tokens.end());
  AuditEvent row = record;
  AppendAuditIds(row, "tokens revoked", change.tokens);
  Record(row);
  return change;
}

absl::StatusOr<std::vector<RoleBinding>> MemoryStore::ListSubjectRoleBindings(
    const std::string& subject) {
  absl::MutexLock lock(&mu_);
  std::vector<RoleBinding> out;
  for (const auto& [key, binding] : bindings_) {  // by (tenant, project): the platform's first
    if (binding.subject != subject) continue;
    if (out.size() == static_cast<size_t>(kMaxBindingList)) break;
    out.push_back(binding);
  }
  return out;
}

absl::StatusOr<std::vector<RoleBinding>> MemoryStore::ListRoleBindings(const std::string& tenant,
                                                                       const std::string& project) {
  absl::MutexLock lock(&mu_);
  std::vector<RoleBinding> out;
  for (const auto& [key, binding] : bindings_) {
    if ((!tenant.empty() && binding.tenant != tenant) ||
        (!project.empty() && binding.project != project)) {
      continue;
    }
    if (out.size() == static_cast<size_t>(kMaxBindingList)) break;
    out.push_back(binding);
  }
  return out;
}

absl::StatusOr<Quota> MemoryStore::SetQuota(const Quota& quota, const QuotaCheck& check,
                                            const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateQuota(quota));
  const QuotaKey& key = quota.key;
  absl::MutexLock lock(&mu_);
  if (!tenants_.contains(key.tenant)) {
    return absl::NotFoundError(absl::StrCat("tenant: \"", key.tenant, "\" does not exist"));
  }
  if (!key.project.empty() && !projects_.contains({key.tenant, key.project})) {
    return absl::NotFoundError(absl::StrCat("project: \"", key.project,
                                            "\" does not exist in tenant \"", key.tenant, "\""));
  }
  const auto id = std::make_tuple(key.tenant, key.project, key.resource);
  if (!quotas_.contains(id)) {
    int held = 0;
    for (const auto& [k, q] : quotas_) held += std::get<0>(k) == key.tenant ? 1 : 0;
    if (held >= kMaxQuotasPerTenant) {
      return absl::ResourceExhaustedError(absl::StrCat("quota: tenant ", key.tenant, " has ",
                                                       kMaxQuotasPerTenant, " quotas already"));
    }
  }
  std::vector<Quota> same;
  for (const auto& [k, q] : quotas_) {
    if (q.key.resource == key.resource) same.push_back(q);
  }
  Quota out = quota;
  RETURN_IF_ERROR(check(out, same));
  out.update_time = Now();
  quotas_[id] = out;
  Record(record);
  return out;
}

absl::Status MemoryStore::DeleteQuota(const QuotaKey& key, const AuditEvent& record) {
  absl::MutexLock lock(&mu_);
  if (quotas_.erase(std::make_tuple(key.tenant, key.project, key.resource)) == 0) {
    return absl::NotFoundError("quota not found");
  }
  Record(record);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Quota>> MemoryStore::ListQuotas(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  std::vector<Quota> out;
  for (const auto& [k, q] : quotas_) {
    if (tenant.empty() || q.key.tenant == tenant) out.push_back(q);
  }
  return out;
}

absl::StatusOr<ShareWeight> MemoryStore::SetShareWeight(const ShareWeight& weight,
                                                        const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateShareWeight(weight));
  absl::MutexLock lock(&mu_);
  if (!tenants_.contains(weight.tenant)) {
    return absl::NotFoundError(absl::StrCat("tenant: \"", weight.tenant, "\" does not exist"));
  }
  if (!weight.project.empty() && !projects_.contains({weight.tenant, weight.project})) {
    return absl::NotFoundError(absl::StrCat("project: \"", weight.project,
                                            "\" does not exist in tenant \"", weight.tenant, "\""));
  }
  weights_[{weight.tenant, weight.project}] = weight;
  Record(record);
  return weight;
}

absl::StatusOr<std::vector<ShareWeight>> MemoryStore::ListShareWeights() {
  absl::MutexLock lock(&mu_);
  std::vector<ShareWeight> out;
  out.reserve(weights_.size());
  for (const auto& [key, w] : weights_) out.push_back(w);
  return out;
}

absl::Status MemoryStore::SaveUsage(const UsageSnapshot& usage) {
  RETURN_IF_ERROR(ValidateUsage(usage));
  absl::MutexLock lock(&mu_);
  usage_ = usage;
  return absl::OkStatus();
}

absl::StatusOr<UsageSnapshot> MemoryStore::LoadUsage() {
  absl::MutexLock lock(&mu_);
  return usage_;
}

// ---- MeteringStore ----

void MemoryStore::SetMeteringPolicy(const MeteringPolicy& policy) {
  absl::MutexLock lock(&mu_);
  metering_ = policy;
}

void MemoryStore::MeterLocked(const Workload& run, Timestamp from, Timestamp to) {
  Cluster cluster;
  if (auto it = clusters_.find(run.assignment.cluster); it != clusters_.end()) {
    cluster = AsStored(it->second);
  } else {
    cluster.info.name = run.assignment.cluster;  // gone: metered unpriced
  }
  for (UsageRecord& r : MeterSpan(run, cluster, from, to, metering_)) {
    auto key = std::make_tuple(r.workload, r.attempt, r.replica, r.gpu_uuid, r.from);
    usage_records_.try_emplace(std::move(key), std::move(r));
  }
}

absl::StatusOr<int> MemoryStore::MeterRunning(Timestamp until, int limit) {
  if (limit < 1 || limit > 10000) {
    return absl::InvalidArgumentError("limit: must be 1..10000");
  }
  absl::MutexLock lock(&mu_);
  const Timestamp cut = std::min(ToMicros(until), Now());
  std::vector<std::pair<Timestamp, WorkloadId>> due;
  for (const auto& [id, mark] : marks_) {
    if (mark < cut) due.emplace_back(mark, id);
  }
  std::sort(due.begin(), due.end());
  if (due.size() > static_cast<size_t>(limit)) due.resize(limit);
  for (const auto& [mark, id] : due) {
    MeterLocked(workloads_.at(id), mark, cut);
    marks_[id] = cut;
  }
  return static_cast<int>(due.size());
}

absl::StatusOr<std::vector<UsageRecord>> MemoryStore::ListUsage(const UsageFilter& filter) {
  RETURN_IF_ERROR(ValidateUsageFilter(filter));
  absl::MutexLock lock(&mu_);
  auto position = [](const UsageRecord& r) {
    return std::make_tuple(r.from, r.workload, r.attempt, r.replica, std::cref(r.gpu_uuid));
  };
  std::vector<const UsageRecord*> matching;
  for (const auto& [key, r] : usage_records_) {
    if (!filter.tenant.empty() && r.tenant != filter.tenant) continue;
    if (!filter.project.empty() && r.project != filter.project) continue;
    if (!filter.cluster.empty() && r.cluster != filter.cluster) continue;
    if (r.from >= ToMicros(filter.to) || r.to <= ToMicros(filter.from)) continue;
    if (filter.after && !(position(*filter.after) < position(r))) continue;
    matching.push_back(&r);
  }
  std::sort(matching.begin(), matching.end(), [&](const UsageRecord* a, const UsageRecord* b) {
    return position(*a) < position(*b);
  });
  if (matching.size() > static_cast<size_t>(filter.page_size)) matching.resize(filter.page_size);
  std::vector<UsageRecord> out;
  out.reserve(matching.size());
  for (const UsageRecord* r : matching) out.push_back(*r);
  return out;
}

absl::StatusOr<std::vector<UsageLine>> MemoryStore::ReportUsage(const UsageQuery& query) {
  RETURN_IF_ERROR(ValidateUsageQuery(query));
  auto wanted = [&](const UsageRecord& r) {
    if (r.from < query.from || r.from >= query.to) return false;
    if (!query.tenant.empty() && r.tenant != query.tenant) return false;
    if (!query.project.empty() && r.project != query.project) return false;
    return query.cluster.empty() || r.cluster == query.cluster;
  };
  std::vector<UsageRecord> matching;
  std::vector<TelemetryUse> measured;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, r] : usage_records_) {
      if (wanted(r)) matching.push_back(r);
    }
    for (const TelemetryUse& u : measured_) {
      // A minute counts on its day, as usage_daily sums it.
      UsageRecord day = u.usage;
      day.from = u.minute.minute;
      if (wanted(day)) measured.push_back(u);
    }
  }
  std::vector<UsageLine> lines = SumUsage(query, matching, measured);
  if (lines.size() > static_cast<size_t>(kMaxReportLines)) {
    return absl::FailedPreconditionError(
        absl::StrCat("group_by: the report would have more than ", kMaxReportLines,
                     " lines; ask for a shorter window, a longer period or fewer dimensions"));
  }
  return lines;
}

absl::StatusOr<int> MemoryStore::RecordTelemetry(const std::string& cluster,
                                                 const std::vector<TelemetryMinute>& minutes) {
  absl::MutexLock lock(&mu_);
  Cluster stored;
  if (auto it = clusters_.find(cluster); it != clusters_.end()) {
    stored = AsStored(it->second);
  } else {
    stored.info.name = cluster;
  }
  const Timestamp now = Now();
  int kept = 0;
  for (const TelemetryMinute& m : minutes) {
    auto found = workloads_.find(m.workload);
    if (found == workloads_.end()) continue;  // PgStore reads the hot table only
    // A run still going is measured up to now at most (as PgStore).
    Workload run = found->second;
    if (!run.end_time || *run.end_time > now) run.end_time = now;
    std::optional<TelemetryUse> use = AttributeMinute(m, run, stored, metering_);
    if (!use) continue;
    auto key =
        std::make_tuple(cluster, m.gpu_uuid, m.mig_profile, m.mig_start, m.minute, m.workload);
    if (!telemetry_.try_emplace(std::move(key), RowOf(cluster, *use)).second) continue;
    ++kept;
    if (use->measured_gpu_us > 0) measured_.push_back(std::move(*use));
  }
  return kept;
}

absl::StatusOr<std::vector<TelemetryRow>> MemoryStore::ListTelemetry(WorkloadId workload,
                                                                     Timestamp from, Timestamp to,
                                                                     int limit) {
  if (limit < 1 || limit > 10000) return absl::InvalidArgumentError("limit: must be 1..10000");
  absl::MutexLock lock(&mu_);
  std::vector<TelemetryRow> out;
  for (const auto& [key, row] : telemetry_) {
    const TelemetryMinute& m = row.minute;
    if (m.workload == workload && m.minute >= from && m.minute < to) out.push_back(row);
  }
  auto position = [](const TelemetryRow& r) {
    return std::make_tuple(r.minute.minute, std::cref(r.cluster), std::cref(r.minute.gpu_uuid),
                           std::cref(r.minute.mig_profile), r.minute.mig_start);
  };
  std::sort(out.begin(), out.end(), [&](const TelemetryRow& a, const TelemetryRow& b) {
    return position(a) < position(b);
  });
  if (out.size() > static_cast<size_t>(limit)) out.resize(static_cast<size_t>(limit));
  return out;
}

absl::StatusOr<int> MemoryStore::PruneTelemetry(Timestamp before, int limit) {
  if (limit < 1 || limit > 100000) return absl::InvalidArgumentError("limit: must be 1..100000");
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<Timestamp, decltype(telemetry_)::const_iterator>> due;
  for (auto it = telemetry_.cbegin(); it != telemetry_.cend(); ++it) {
    if (it->second.minute.minute < before) due.emplace_back(it->second.minute.minute, it);
  }
  std::stable_sort(due.begin(), due.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  if (due.size() > static_cast<size_t>(limit)) due.resize(static_cast<size_t>(limit));
  for (const auto& [minute, it] : due) telemetry_.erase(it);
  return static_cast<int>(due.size());
}

absl::StatusOr<std::vector<HeldCost>> MemoryStore::ReportHeldCosts(Timestamp from, Timestamp to,
                                                                   const std::string& cluster) {
  UsageQuery window;
  window.from = from;
  window.to = to;
  RETURN_IF_ERROR(ValidateUsageQuery(window));
  std::vector<UsageRecord> matching;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, r] : usage_records_) {
      if (r.from >= from && r.from < to && (cluster.empty() || r.cluster == cluster)) {
        matching.push_back(r);
      }
    }
  }
  return SumHeldCosts(matching);
}

absl::Status MemoryStore::RecordGuarantees(const std::vector<GuaranteeUse>& uses) {
  RETURN_IF_ERROR(ValidateGuaranteeUses(uses));
  absl::MutexLock lock(&mu_);
  for (const GuaranteeUse& u : uses) {
    GuaranteeUse& sum = guarantees_[{u.day, u.key.tenant, u.key.project, u.key.resource}];
    sum.day = u.day;
    sum.key = u.key;
    sum.reserved_unit_us += u.reserved_unit_us;
    sum.idle_unit_us += u.idle_unit_us;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<GuaranteeLine>> MemoryStore::ReportGuarantees(const UsageQuery& query) {
  RETURN_IF_ERROR(ValidateUsageQuery(query));
  std::vector<GuaranteeUse> uses;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, u] : guarantees_) {
      if (GuaranteeWanted(query, u)) uses.push_back(u);
    }
  }
  std::vector<GuaranteeLine> lines = SumGuarantees(query, uses);
  if (lines.size() > static_cast<size_t>(kMaxReportLines)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the report would have more than ", kMaxReportLines,
                     " idle-guarantee lines; ask for a shorter window or a longer period"));
  }
  return lines;
}

}  // namespace gpufed::sim
