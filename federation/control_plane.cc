#include "federation/control_plane.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "federation/authorization.h"
#include "federation/failover.h"
#include "federation/quota.h"
#include "federation/status_macros.h"
#include "federation/validation.h"
#include "spdlog/spdlog.h"

namespace gpufed {
namespace {

// Runs `step` (which does up to its argument's worth of work and says how much it did) until it
// does less than `batch` or `max_batches` ran; returns the total. A failing step's error ends it
// (the batches before it committed).
absl::StatusOr<int> InBatches(int batch, int max_batches,
                              const std::function<absl::StatusOr<int>(int)>& step) {
  int done = 0;
  for (int i = 0; i < max_batches; ++i) {
    ASSIGN_OR_RETURN(int n, step(batch));
    done += n;
    if (n < batch) break;
  }
  return done;
}

}  // namespace

ControlPlane::ControlPlane(ControlPlanePorts ports, ControlPlaneOptions options)
    : ports_(ports),
      options_(options),
      metrics_(ports.metrics != nullptr ? ports.metrics : &default_metrics_) {}

// ---- The after-commit sequence ---------------------------------------------------------------

void ControlPlane::AfterCommit(const std::vector<WorkloadEvent>& events,
                               const std::vector<Workload>& cancel_requested) {
  bool wake = false;
  std::vector<Workload> placed;
  for (const WorkloadEvent& e : events) {
    const Workload& w = e.workload;
    if (e.to == WorkloadState::kPending) {
      // Back from a cluster (a requeue): its capacity there is free, and its agent may no
      // longer report on it.
      if (HoldsCapacity(e.from)) {
        ports_.scheduler->NotifyReleased(w.id);
        ports_.agents->ForgetAnywhere(w.id);
      }
      ports_.scheduler->NotifySubmitted(w);
      wake = true;
    } else if (e.to == WorkloadState::kPlaced) {
      placed.push_back(w);
    } else if (e.to == WorkloadState::kRunning) {
      ports_.scheduler->NotifyStarted(w.id, w.start_time.value_or(e.time));
    } else if (IsTerminal(e.to)) {
      // Frees its capacity, or drops it from the queue if it never left it.
      ports_.scheduler->NotifyReleased(w.id);
      if (HoldsCapacity(e.from)) ports_.agents->Forget(w.assignment.cluster, w.id);
      wake = true;
    }
  }
  if (!placed.empty()) ports_.agents->Dispatch(placed);
  for (const Workload& w : cancel_requested) {
    ports_.agents->SendCancel(w.assignment.cluster, w.id);
  }
  if (!events.empty()) ports_.events->Publish(events);
  if (wake) Wake();
}

void ControlPlane::AfterClusterCommit(const ClusterChange& change) {
  if (const auto* moved = std::get_if<ClusterStateChange>(&change)) {
    ports_.scheduler->NotifyClusterState(moved->cluster, moved->state);
  } else {
    ports_.scheduler->NotifyClusterChanged(std::get<std::reference_wrapper<const Cluster>>(change));
  }
  Wake();
}

// ---- Workloads -------------------------------------------------------------------------------

void ControlPlane::SubmitUnaudited(const auth::Principal& who, absl::StatusOr<WorkloadSpec> spec,
                                   absl::Time deadline, SubmitDone done) {
  absl::Status valid = [&]() -> absl::Status {
    RETURN_IF_ERROR(spec.status());
    RETURN_IF_ERROR(MaySubmit(who, *spec));
    return ValidateSpec(*spec);
  }();
  if (!valid.ok()) {
    metrics_->SubmissionRejected();
    std::move(done)(valid);
    return;
  }
  // A new workload waits its turn until the scheduler has looked at it: stored with the reason
  // the scheduler gives the queue beyond its window, so that most of a long queue is written
  // once, not once more by the scheduler.
  ports_.workloads->SubmitAsync(
      *spec, ports_.scheduler->QueuedReason(), ActorName(who), deadline,
      [this, done = std::move(done)](absl::StatusOr<SubmitResult> result) mutable {
        if (!result.ok()) {
          metrics_->SubmissionRejected();
        } else if (result->created) {
          metrics_->SubmissionCreated();
          AfterCommit({WorkloadEvent{result->workload, WorkloadState::kUnspecified,
                                     WorkloadState::kPending, result->workload.create_time}});
        } else {
          metrics_->SubmissionReplayed();
        }
        std::move(done)(std::move(result));
      });
}

absl::StatusOr<Workload> ControlPlane::GetVisible(const auth::Principal& who, WorkloadId id) {
  absl::StatusOr<Workload> w = ports_.workloads->Get(id);
  if (!w.ok()) return w.status();
  if (!auth::Allows(who, auth::Permission::kWorkloadsRead, ScopeOf(w->spec))) {
    return absl::NotFoundError(absl::StrCat("workload ", id, " not found"));
  }
  return w;
}

absl::StatusOr<Workload> ControlPlane::GetWorkload(const auth::Principal& who, WorkloadId id) {
  return GetVisible(who, id);
}

absl::StatusOr<WorkloadPage> ControlPlane::ListWorkloads(const auth::Principal& who,
                                                         ListFilter filter) {
  // Unnamed, the caller's own scope: what a tenant or project binding may see of it.
  if (filter.tenant.empty()) filter.tenant = who.tenant;
  if (filter.project.empty() && filter.tenant == who.tenant) filter.project = who.project;
  if (!auth::Allows(who, auth::Permission::kWorkloadsRead, {filter.tenant, filter.project})) {
    return absl::PermissionDeniedError("permission denied: may not list these workloads");
  }
  return ports_.workloads->List(filter);
}

absl::StatusOr<Explanation> ControlPlane::Explain(const auth::Principal& who, WorkloadId id) {
  ASSIGN_OR_RETURN(Workload w, GetVisible(who, id));
  Explanation out;
  switch (w.state) {
    case WorkloadState::kPending:
    case WorkloadState::kAdmitted: {
      if (IsQuotaReason(w.pending_reason.code)) {
        // Quota and reclaim are the scheduler's verdicts, stored with the workload.
        out.text = RenderReason(w.pending_reason);
        out.reason = w.pending_reason;
        break;
      }
      RoutingExplanation routing = ports_.scheduler->ExplainRouting(w.spec);
      PlacementDecision d = routing.decision;
      out.routing = std::move(routing);
      if (d.assignment) {
        out.fits_now_on = d.assignment->cluster;
        out.text = absl::StrCat("fits now on ", d.assignment->cluster,
                                "; the scheduler places it in its next cycle");
      } else {
        out.text = RenderReason(d.reason);
        out.never_fits = d.reason.never_fits();
        out.reason = std::move(d.reason);
      }
      break;
    }
    case WorkloadState::kPlaced:
    case WorkloadState::kRunning:
      out.text = absl::StrCat(StateName(w.state), " on ", w.assignment.cluster, " (",
                              w.assignment.replicas.size(), " replica",
                              w.assignment.replicas.size() == 1 ? "" : "s", ")");
      break;
    default:
      out.text = absl::StrCat(StateName(w.state), w.message.empty() ? "" : ": ", w.message);
      break;
  }
  out.workload = std::move(w);
  return out;
}

absl::StatusOr<RoutingExplanation> ControlPlane::WhatIf(const auth::Principal& who,
                                                        WorkloadSpec spec) {
  RETURN_IF_ERROR(MaySubmit(who, spec));
  RETURN_IF_ERROR(ValidateSpec(spec));
  ASSIGN_OR_RETURN(std::vector<Project> projects, ports_.tenants->ListProjects(spec.tenant));
  if (std::none_of(projects.begin(), projects.end(),
                   [&](const Project& p) { return p.name == spec.project; })) {
    return absl::NotFoundError(absl::StrCat("spec.project: project \"", spec.project,
                                            "\" does not exist in tenant \"", spec.tenant, "\""));
  }
  return ports_.scheduler->ExplainRouting(spec);
}

absl::StatusOr<Workload> ControlPlane::CancelUnaudited(const auth::Principal& who, WorkloadId id,
                                                       std::string reason, AuditEvent record) {
  RETURN_IF_ERROR(ValidateText("reason", reason, kMaxReasonBytes));
  ASSIGN_OR_RETURN(Workload before, GetVisible(who, id));
  if (!auth::Allows(who, auth::Permission::kWorkloadsWrite, ScopeOf(before.spec))) {
    return absl::PermissionDeniedError("permission denied: may not cancel in this tenant");
  }
  if (reason.empty()) reason = "cancelled by user";
  // The row belongs to the workload's scope (the store adds what the cancel did).
  record.tenant = before.spec.tenant;
  record.project = before.spec.project;
  ASSIGN_OR_RETURN(WorkloadStore::CancelResult result,
                   ports_.workloads->RequestCancel(id, ActorName(who), reason, record));
  std::vector<WorkloadEvent> events;
  if (result.event) events.push_back(*result.event);
  std::vector<Workload> stop;
  if (result.workload.cancel_requested && HoldsCapacity(result.workload.state)) {
    stop.push_back(result.workload);
  }
  AfterCommit(events, stop);
  return std::move(result.workload);
}

// ---- Watch -----------------------------------------------------------------------------------

absl::Status ControlPlane::AuthorizeWatch(const auth::Principal& who) {
  // What the stream carries is filtered per event (WatchFilter); this refuses callers that may
  // read no workload at all.
  if (!auth::Grants(who.role, auth::Permission::kWorkloadsRead)) {
    return absl::PermissionDeniedError("permission denied: may not watch workloads");
  }
  return absl::OkStatus();
}

absl::StatusOr<WorkloadEvent> ControlPlane::WatchSnapshot(const auth::Principal& who,
                                                          WorkloadId id) {
  ASSIGN_OR_RETURN(Workload w, GetVisible(who, id));
  const WorkloadState state = w.state;
  const Timestamp time = w.update_time;
  return WorkloadEvent{std::move(w), state, state, time};
}

absl::StatusOr<std::vector<Workload>> ControlPlane::WatchResync(const auth::Principal& who,
                                                                ChangeCursor after, int limit) {
  RETURN_IF_ERROR(AuthorizeWatch(who));
  return ports_.workloads->ListChangedAfter(who.tenant, after.time, after.id, limit);
}

// ---- The pool --------------------------------------------------------------------------------

absl::StatusOr<std::optional<absl::flat_hash_set<WorkloadId>>> ControlPlane::VisibleHolders(
    const auth::Principal& who) {
  if (auth::Allows(who, auth::Permission::kWorkloadsRead, {})) return std::nullopt;
  absl::flat_hash_set<WorkloadId> mine;
  if (who.tenant.empty() || !auth::Grants(who.role, auth::Permission::kWorkloadsRead)) return mine;
  ASSIGN_OR_RETURN(std::vector<WorkloadId> ids,
                   ports_.workloads->ListHeldIds(who.tenant, who.project));
  mine.insert(ids.begin(), ids.end());
  return mine;
}

absl::StatusOr<ClusterListing> ControlPlane::ListClusters(const auth::Principal& who,
                                                          bool include_nodes) {
  RETURN_IF_ERROR(Require(who, auth::Permission::kPoolRead));
  ClusterListing out;
  ASSIGN_OR_RETURN(out.clusters, ports_.clusters->ListClusters(include_nodes));
  out.pool = ports_.scheduler->Snapshot();
  ASSIGN_OR_RETURN(out.visible, VisibleHolders(who));
  return out;
}

namespace {

using PriceKey = std::tuple<std::string, std::string, CapacityType, Timestamp>;
PriceKey KeyOf(const PriceEntry& e) {
  return {e.gpu_model, e.mig_profile, e.capacity, e.effective_from};
}

std::string PriceLine(const PriceEntry& e) {
  return absl::StrCat(
      e.gpu_model, e.mig_profile.empty() ? "" : absl::StrCat(" ", e.mig_profile), " ",
      CapacityTypeName(e.capacity), " from ",
      absl::FormatTime(absl::RFC3339_full, absl::FromChrono(e.effective_from), absl::UTCTimeZone()),
      ": ", absl::StrFormat("%.6f", static_cast<double>(e.micros_per_hour) / 1e6), " per hour");
}

std::string Shown(const std::string& value) { return value.empty() ? "(agent's)" : value; }

std::string Labels(const std::optional<std::vector<std::string>>& labels) {
  if (!labels) return "(agent's)";
  return absl::StrCat("[", absl::StrJoin(*labels, ", "), "]");
}

std::string Rtt(int64_t micros) {
  return absl::StrFormat("%g ms", static_cast<double>(micros) / 1000.0);
}

// What turns `before` into `after`, one line per change.
std::vector<std::string> Changes(const ClusterDeclaration& before,
                                 const ClusterDeclaration& after) {
  std::vector<std::string> out;
  for (const auto& [name, a, b] :
       {std::tuple<absl::string_view, const std::string*, const std::string*>{
            "provider", &before.provider, &after.provider},
        {"region", &before.region, &after.region},
        {"zone", &before.zone, &after.zone},
        {"jurisdiction", &before.jurisdiction, &after.jurisdiction}}) {
    if (*a != *b) out.push_back(absl::StrCat(name, ": ", Shown(*a), " -> ", Shown(*b)));
  }
  if (before.compliance_labels != after.compliance_labels) {
    out.push_back(absl::StrCat("compliance_labels: ", Labels(before.compliance_labels), " -> ",
                               Labels(after.compliance_labels)));
  }
  if (before.default_capacity != after.default_capacity) {
    out.push_back(absl::StrCat("default_capacity: ", CapacityTypeName(before.default_capacity),
                               " -> ", CapacityTypeName(after.default_capacity)));
  }
  std::map<PriceKey, const PriceEntry*> old_prices;
  for (const PriceEntry& e : before.prices) old_prices.emplace(KeyOf(e), &e);
  std::map<PriceKey, const PriceEntry*> new_prices;
  for (const PriceEntry& e : after.prices) new_prices.emplace(KeyOf(e), &e);
  for (const auto& [key, e] : old_prices) {
    auto it = new_prices.find(key);
    if (it == new_prices.end()) {
      out.push_back(absl::StrCat("- price ", PriceLine(*e)));
    } else if (it->second->micros_per_hour != e->micros_per_hour) {
      out.push_back(absl::StrCat(
          "~ price ", PriceLine(*e), " -> ",
          absl::StrFormat("%.6f", static_cast<double>(it->second->micros_per_hour) / 1e6)));
    }
  }
  for (const auto& [key, e] : new_prices) {
    if (!old_prices.contains(key)) out.push_back(absl::StrCat("+ price ", PriceLine(*e)));
  }
  for (const auto& [region, rtt] : before.rtt_micros) {
    auto it = after.rtt_micros.find(region);
    if (it == after.rtt_micros.end()) {
      out.push_back(absl::StrCat("- rtt ", region, ": ", Rtt(rtt)));
    } else if (it->second != rtt) {
      out.push_back(absl::StrCat("rtt ", region, ": ", Rtt(rtt), " -> ", Rtt(it->second)));
    }
  }
  for (const auto& [region, rtt] : after.rtt_micros) {
    if (!before.rtt_micros.contains(region)) {
      out.push_back(absl::StrCat("+ rtt ", region, ": ", Rtt(rtt)));
    }
  }
  return out;
}

// `wanted` with the price lines of `stored` that are in force at `now` kept: history is not
// edited. FAILED_PRECONDITION for a line in force given another price, or a back-dated new line
// for a key that already has one in force.
absl::StatusOr<ClusterDeclaration> KeepHistory(const std::string& field,
                                               const ClusterDeclaration& stored,
                                               ClusterDeclaration wanted, Timestamp now) {
  std::map<PriceKey, size_t> index;
  for (size_t i = 0; i < wanted.prices.size(); ++i) index.emplace(KeyOf(wanted.prices[i]), i);
  std::set<std::tuple<std::string, std::string, CapacityType>> in_force;
  for (const PriceEntry& e : stored.prices) {
    if (e.effective_from > now) continue;
    in_force.emplace(e.gpu_model, e.mig_profile, e.capacity);
    auto it = index.find(KeyOf(e));
    if (it == index.end()) {
      wanted.prices.push_back(e);
    } else if (wanted.prices[it->second].micros_per_hour != e.micros_per_hour) {
      return absl::FailedPreconditionError(
          absl::StrCat(field, ".prices[", it->second, "]: the line ", PriceLine(e),
                       " is in force; add a line with a later effective_from"));
    }
  }
  std::map<PriceKey, const PriceEntry*> before;
  for (const PriceEntry& e : stored.prices) before.emplace(KeyOf(e), &e);
  for (size_t i = 0; i < wanted.prices.size(); ++i) {
    const PriceEntry& e = wanted.prices[i];
    if (e.effective_from > now || before.contains(KeyOf(e))) continue;
    if (in_force.contains({e.gpu_model, e.mig_profile, e.capacity})) {
      return absl::FailedPreconditionError(
          absl::StrCat(field, ".prices[", i,
                       "]: takes effect in the past, where a price is already in force; "
                       "date it from now on"));
    }
  }
  std::sort(wanted.prices.begin(), wanted.prices.end(),
            [](const PriceEntry& a, const PriceEntry& b) { return KeyOf(a) < KeyOf(b); });
  return wanted;
}

}  // namespace

absl::StatusOr<std::vector<DeclarationDiff>> ControlPlane::ApplyDeclarationsUnaudited(
    const auth::Principal& who, std::vector<ClusterDeclaration> declarations, bool dry_run,
    AuditEvent record) {
  RETURN_IF_ERROR(Require(who, auth::Permission::kPoolAdmin, {}));
  if (declarations.size() > kMaxDeclarationsPerApply) {
    return absl::InvalidArgumentError(absl::StrCat("declarations: at most ",
                                                   kMaxDeclarationsPerApply, " in one apply, got ",
                                                   declarations.size()));
  }
  std::set<std::string> named;
  for (size_t i = 0; i < declarations.size(); ++i) {
    const std::string field = absl::StrCat("declarations[", i, "]");
    RETURN_IF_ERROR(ValidateDeclaration(field, declarations[i]));
    if (!named.insert(declarations[i].cluster).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".cluster: ", declarations[i].cluster, " is declared twice"));
    }
  }
  ASSIGN_OR_RETURN(std::vector<ClusterDeclaration> stored, ports_.clusters->ListDeclarations());
  std::map<std::string, const ClusterDeclaration*> by_name;
  for (const ClusterDeclaration& d : stored) by_name.emplace(d.cluster, &d);
  const Timestamp now = ports_.clock->Now();
  std::vector<DeclarationDiff> diffs;
  std::vector<ClusterDeclaration> writes;
  for (size_t i = 0; i < declarations.size(); ++i) {
    const std::string field = absl::StrCat("declarations[", i, "]");
    DeclarationDiff diff;
    diff.cluster = declarations[i].cluster;
    auto it = by_name.find(diff.cluster);
    ClusterDeclaration empty;
    empty.cluster = diff.cluster;
    const ClusterDeclaration& before = it == by_name.end() ? empty : *it->second;
    ASSIGN_OR_RETURN(ClusterDeclaration after,
                     KeepHistory(field, before, std::move(declarations[i]), now));
    diff.changes = Changes(before, after);
    if (it == by_name.end()) {
      diff.kind = DeclarationDiff::Kind::kAdded;
    } else if (!diff.changes.empty()) {
      diff.kind = DeclarationDiff::Kind::kChanged;
    }
    if (diff.kind != DeclarationDiff::Kind::kUnchanged) writes.push_back(std::move(after));
    diffs.push_back(std::move(diff));
  }
  if (dry_run) return diffs;
  if (!record.action.empty()) absl::StrAppend(&record.detail, "; changed: ", writes.size());
  // Called with nothing to write too: the apply is recorded all the same.
  RETURN_IF_ERROR(ports_.clusters->PutDeclarations(writes, record));
  // The scheduler routes with the new attributes and prices from its next cycle.
  for (const ClusterDeclaration& d : writes) {
    absl::StatusOr<Cluster> cluster = ports_.clusters->GetCluster(d.cluster);
    if (cluster.ok()) {
      AfterClusterCommit(std::cref(*cluster));
    } else if (!absl::IsNotFound(cluster.status())) {
      spdlog::warn("declaration of {} stored; reading the cluster back failed: {}", d.cluster,
                   cluster.status().ToString());
    }
  }
  return diffs;
}

absl::StatusOr<std::vector<ClusterDeclaration>> ControlPlane::ListDeclarations(
    const auth::Principal& who) {
  RETURN_IF_ERROR(Require(who, auth::Permission::kPoolRead));
  return ports_.clusters->ListDeclarations();
}

absl::StatusOr<ClusterListing> ControlPlane::CordonUnaudited(const auth::Principal& who,
                                                             const std::string& cluster,
                                                             const std::string& node, bool cordoned,
                                                             const AuditEvent& record) {
  RETURN_IF_ERROR(Require(who, auth::Permission::kPoolAdmin, {}));
  RETURN_IF_ERROR(ValidateName("name", cluster));
  if (!node.empty()) RETURN_IF_ERROR(ValidateLabel("node", node));
  ASSIGN_OR_RETURN(Cluster stored, ports_.clusters->SetCordon(cluster, node, cordoned, record));
  AfterClusterCommit(std::cref(stored));
  ClusterListing out;
  out.clusters.push_back(std::move(stored));
  out.pool = ports_.scheduler->Snapshot();
  return out;
}

absl::Status ControlPlane::DeleteClusterUnaudited(const auth::Principal& who,
                                                  const std::string& name,
                                                  const AuditEvent& record) {
  RETURN_IF_ERROR(Require(who, auth::Permission::kPoolAdmin, {}));
  RETURN_IF_ERROR(ValidateName("name", name));
  RETURN_IF_ERROR(ports_.clusters->DeleteCluster(name, record));
  ports_.agents->Remove(name);
  // The scheduler's pool keeps an entry by name; with no nodes and unreachable, it offers
  // nothing and is never chosen, until the pool is next loaded from the store.
  Cluster gone;
  gone.info.name = name;
  gone.state = ClusterState::kUnreachable;
  AfterClusterCommit(std::cref(gone));
  return absl::OkStatus();
}

absl::StatusOr<DrainResult> ControlPlane::DrainUnaudited(const auth::Principal& who,
                                                         const std::string& cluster,
                                                         const std::string& node, bool evict) {
  DrainResult out;
  ASSIGN_OR_RETURN(out.listing, Cordon(who, cluster, node, true));
  // Read after the cordon committed: a placement there either committed before it (and is read
  // here) or is fenced by it (ClusterStore::SetCordon).
  ASSIGN_OR_RETURN(std::vector<Workload> held, ports_.workloads->ListActive(cluster));
  if (evict) {
    const std::string message =
        absl::StrCat(node.empty() ? "" : absl::StrCat("node ", node, " of "), "cluster ", cluster,
                     " drained by user:", who.subject);
    ASSIGN_OR_RETURN(std::vector<Workload> marked,
                     Evict(DrainEvictions(cluster, node, held, message)));
    for (const Workload& m : marked) {
      for (Workload& w : held) {
        if (w.id == m.id) w = m;
      }
    }
  }
  for (const Workload& w : held) {
    if (!RunsOnNode(w, node) || w.cancel_requested) continue;
    (w.evicting ? out.evicted : out.staying).push_back(w.id);
  }
  return out;
}

absl::StatusOr<std::vector<Workload>> ControlPlane::Evict(
    const std::vector<WorkloadStore::Eviction>& evictions) {
  ASSIGN_OR_RETURN(std::vector<Workload> marked, MarkEvictions(evictions));
  AfterCommit({}, marked);
  return marked;
}

absl::StatusOr<std::vector<Workload>> ControlPlane::MarkEvictions(
    const std::vector<WorkloadStore::Eviction>& evictions) {
  if (evictions.empty()) return std::vector<Workload>{};
  ASSIGN_OR_RETURN(std::vector<Workload> marked, ports_.workloads->RequestEvictions(evictions));
  for (AttemptEnd why : {AttemptEnd::kPreempted, AttemptEnd::kNodeFailure}) {
    const auto n = std::count_if(marked.begin(), marked.end(),
                                 [why](const Workload& w) { return w.evicting == why; });
    if (n > 0) metrics_->Evicted(why, static_cast<size_t>(n));
  }
  return marked;
}

absl::StatusOr<ClusterListing> ControlPlane::GetCluster(const auth::Principal& who,
                                                        const std::string& name) {
  RETURN_IF_ERROR(Require(who, auth::Permission::kPoolRead));
  RETURN_IF_ERROR(ValidateName("name", name));
  ClusterListing out;
  ASSIGN_OR_RETURN(Cluster cluster, ports_.clusters->GetCluster(name));
  out.clusters.push_back(std::move(cluster));
  out.pool = ports_.scheduler->Snapshot();
  ASSIGN_OR_RETURN(out.visible, VisibleHolders(who));
  return out;
}

// ---- Operations ------------------------------------------------------------------------------

absl::Status ControlPlane::Start() {
  ASSIGN_OR_RETURN(std::vector<Cluster> clusters, ports_.clusters->ListClusters(false));
  std::vector<std::string> names;
  names.reserve(clusters.size());
  for (const Cluster& c : clusters) names.push_back(c.info.name);
  ports_.agents->Seed(names);
  return absl::OkStatus();
}

absl::Status ControlPlane::RefreshGauges() {
  ASSIGN_OR_RETURN(auto counts, ports_.workloads->CountByState());
  for (int s = static_cast<int>(WorkloadState::kPending);
       s <= static_cast<int>(WorkloadState::kLost); ++s) {
    const auto state = static_cast<WorkloadState>(s);
    int64_t n = 0;  // the store may leave out states with none
    for (const auto& [counted, count] : counts) {
      if (counted == state) n = count;
    }
    metrics_->WorkloadsInState(state, n);
  }
  return absl::OkStatus();
}

// ---- The control loop's use cases -------------------------------------------------------------

absl::Status ControlPlane::MarkClusterState(const std::string& cluster, ClusterState state) {
  RETURN_IF_ERROR(ports_.clusters->SetClusterState(cluster, state));
  AfterClusterCommit(ClusterStateChange{cluster, state});
  return absl::OkStatus();
}

absl::StatusOr<ClusterLoss> ControlPlane::LoseCluster(const std::string& cluster,
                                                      const std::string& detail) {
  const Timestamp at = ports_.clock->Now();
  // Recorded with the loss (the store adds what it did in numbers); each workload's requeue or
  // end is its own transition row.
  AuditEvent record;
  if (ports_.audit != nullptr) {
    record.actor = "control-loop";
    record.action = "clusters.lose";
    record.object = absl::StrCat("cluster/", cluster);
    record.outcome = std::string(kAuditOk);
    record.reason = detail;
  }
  ASSIGN_OR_RETURN(ClusterStore::LossResult result,
                   ports_.clusters->LoseCluster(
                       cluster,
                       [&](const Cluster& lost, const std::vector<Workload>& held) {
                         std::vector<Transition> transitions;
                         transitions.reserve(held.size());
                         const AttemptEnded end{AttemptEnd::kClusterLost, lost.info.name, at,
                                                detail, "failover"};
                         for (const Workload& w : held) transitions.push_back(EndAttempt(w, end));
                         return transitions;
                       },
                       record));
  ClusterLoss loss;
  loss.epoch = result.cluster.epoch;
  std::vector<WorkloadEvent> events;
  for (const TransitionResult& r : result.transitions) {
    if (!r.applied || !r.event) continue;
    (r.event->to == WorkloadState::kPending ? loss.requeued : loss.ended).push_back(r.id);
    events.push_back(*r.event);
  }
  AfterClusterCommit(ClusterStateChange{cluster, ClusterState::kUnreachable});
  ports_.agents->Fence(cluster, loss.epoch);
  AfterCommit(events);
  metrics_->ClusterLost(loss.requeued.size(), loss.ended.size());
  return loss;
}

absl::Status ControlPlane::ResumeClusterLosses() {
  ASSIGN_OR_RETURN(std::vector<Cluster> clusters, ports_.clusters->ListClusters(false));
  for (const Cluster& c : clusters) {
    if (c.state != ClusterState::kUnreachable) continue;
    ASSIGN_OR_RETURN(std::vector<Workload> held, ports_.workloads->ListActive(c.info.name));
    if (held.empty()) continue;
    ASSIGN_OR_RETURN(ClusterLoss loss,
                     LoseCluster(c.info.name, "declared lost before this server started"));
    spdlog::warn(
        "cluster {} was unreachable with {} workload(s) still on it: {} requeued, {} ended",
        c.info.name, held.size(), loss.requeued.size(), loss.ended.size());
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ControlPlane::ArchiveFinished(std::chrono::nanoseconds after, int batch,
                                                  int max_batches) {
  const Timestamp before =
      ports_.clock->Now() - std::chrono::duration_cast<Timestamp::duration>(after);
  return InBatches(batch, max_batches,
                   [&](int n) { return ports_.workloads->ArchiveFinished(before, n); });
}

absl::StatusOr<int> ControlPlane::MeterRunning(int batch, int max_batches) {
  if (ports_.metering == nullptr) return 0;
  // Up to the last whole hour: records of runs still going then cover whole hours, and a report
  // over hours, days or months that have ended sees all of them once a pass has run.
  const Timestamp now = std::chrono::floor<std::chrono::hours>(ports_.clock->Now());
  return InBatches(batch, max_batches,
                   [&](int n) { return ports_.metering->MeterRunning(now, n); });
}

absl::StatusOr<int> ControlPlane::PruneTelemetry(std::chrono::nanoseconds keep, int batch,
                                                 int max_batches) {
  if (ports_.metering == nullptr) return 0;
  const Timestamp before =
      ports_.clock->Now() - std::chrono::duration_cast<Timestamp::duration>(keep);
  return InBatches(batch, max_batches,
                   [&](int n) { return ports_.metering->PruneTelemetry(before, n); });
}

void ControlPlane::Scheduled(const std::vector<WorkloadEvent>& events) { AfterCommit(events); }

absl::StatusOr<std::vector<Workload>> ControlPlane::Reclaim(
    const std::vector<ReclaimPlan>& reclaims) {
  if (reclaims.empty()) return std::vector<Workload>{};
  std::vector<WorkloadStore::Preemption> preemptions;
  preemptions.reserve(reclaims.size());
  for (const ReclaimPlan& plan : reclaims) preemptions.push_back({plan.record, plan.victims});
  // Each victim's row is recorded with its eviction (PreemptionAuditRows).
  AuditEvent record;
  if (ports_.audit != nullptr) {
    record.actor = "scheduler";
    record.action = "workloads.preempt";
    record.outcome = std::string(kAuditOk);
  }
  ASSIGN_OR_RETURN(WorkloadStore::PreemptionResult result,
                   ports_.workloads->RequestPreemptions(preemptions, record));
  for (const PreemptionRecord& r : result.recorded) {
    spdlog::info(
        "preemption {} ({}): workload {} of tenant {} reclaims {} on {}, stopping {} "
        "workload(s), {} of {} GPU-equivalents",
        r.id, std::string(PreemptionCauseName(r.cause)), r.preemptor, r.tenant, r.resource,
        r.cluster, r.victims.size(), FormatQuotaAmount(r.evicted_milli),
        FormatQuotaAmount(r.needed_milli));
    metrics_->Preempted(r.cause, r.victims.size(), r.gpu_seconds_lost);
  }
  if (!result.marked.empty()) metrics_->Evicted(AttemptEnd::kPreempted, result.marked.size());
  AfterCommit({}, result.marked);
  return std::move(result.marked);
}

}  // namespace gpufed
