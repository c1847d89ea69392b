// The scheduler's quota part (docs/quotas.md): admission against limits, owned and borrowed
// work, and reclaim of borrowed capacity for owners within their guarantee. The walk of the
// window (scheduler.cc) calls these.

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "federation/failover.h"
#include "federation/mig.h"
#include "federation/scheduler.h"
#include "federation/status_macros.h"

namespace gpufed {
namespace {

std::string HolderName(const QuotaKey& key) {
  return key.project.empty() ? absl::StrCat("tenant ", key.tenant)
                             : absl::StrCat("project ", key.tenant, "/", key.project);
}

PendingReason QuotaLimitReason(const AdmissionVerdict& v) {
  PendingReason r(ReasonCode::kQuotaLimit);
  r.Set(figure::kHolder, HolderName(v.limit->key))
      .Set(figure::kResource, v.limit->key.resource)
      .Set(figure::kHeld, v.held_milli)
      .Set(figure::kLimit, v.limit->EffectiveLimit())
      .Set(figure::kAsked, v.asked_milli);
  return r;
}

int64_t GpuMilli(const ResourceAmounts& amounts) {
  auto it = amounts.find(kGpuEquivalents);
  return it == amounts.end() ? 0 : it->second;
}

// When `w`'s current run began, as far as the scheduler knows: its start, else its placement.
Timestamp RunSince(const Workload& w) { return w.start_time.value_or(w.update_time); }

}  // namespace

absl::Status Scheduler::LoadQuotas() {
  if (quotas_ == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<Quota> quotas, quotas_->ListQuotas(""));
  ASSIGN_OR_RETURN(std::vector<ShareWeight> weights, quotas_->ListShareWeights());
  ledger_.SetQuotas(quotas);
  weights_.clear();
  for (const ShareWeight& w : weights) weights_[{w.tenant, w.project}] = w.weight;
  return absl::OkStatus();
}

ResourceAmounts Scheduler::HeldOf(const Workload& w) const {
  const GpuModelLookup model_of = [this](const std::string& cluster, const std::string& node,
                                         const std::string& uuid) -> std::string {
    const ClusterSlots* c = pool_.FindCluster(cluster);
    const NodeSlots* n = c == nullptr ? nullptr : c->FindNode(node);
    const int g = n == nullptr ? -1 : n->FindGpu(uuid);
    return g < 0 ? std::string() : pool_.ModelName(n->gpus[g].model);
  };
  return HeldResources(w, model_of);
}

void Scheduler::TrackHeld(const Workload& w) {
  ledger_.Hold(w.id, w.spec.tenant, w.spec.project, HeldOf(w));
  held_[w.id] = w;
}

void Scheduler::ForgetHeld(WorkloadId id) {
  if (held_.erase(id) > 0) ledger_.Drop(id);
}

std::vector<std::string> Scheduler::CandidateModels(const WorkloadSpec& spec) const {
  // What it allows, else every model of the pool (that offers its MIG profile): the model
  // decides which quotas it draws on.
  std::vector<std::string> models = spec.gpu_models;
  if (models.empty()) {
    for (size_t i = 0; i < pool_.model_count(); ++i) {
      models.push_back(pool_.ModelName(static_cast<uint16_t>(i)));
    }
  }
  if (!spec.mig_profile.empty()) {
    std::erase_if(models, [&](const std::string& m) {
      const MigGeometry* g = FindMigGeometry(m);
      return g == nullptr || g->Find(spec.mig_profile) == nullptr;
    });
  }
  if (models.empty()) models.emplace_back();
  return models;
}

ResourceAmounts Scheduler::ReservationOf(const WorkloadSpec& spec) const {
  return DemandOf(spec, CandidateModels(spec).front());
}

Scheduler::Admission Scheduler::Admit(const Queued& queued) const {
  const WorkloadSpec& spec = queued.workload.spec;
  Admission out;
  const std::vector<std::string> models = CandidateModels(spec);
  std::optional<AdmissionVerdict> over;
  std::vector<std::string> owned;
  std::vector<std::string> borrowed;
  for (const std::string& m : models) {
    ResourceAmounts demand = DemandOf(spec, m);
    AdmissionVerdict v = ledger_.Judge(spec.tenant, spec.project, demand);
    if (v.kind == AdmissionVerdict::kOverLimit) {
      if (!over) over = std::move(v);
      continue;
    }
    std::vector<std::string>& list = v.kind == AdmissionVerdict::kOwned ? owned : borrowed;
    if (list.empty() && (v.kind == AdmissionVerdict::kOwned || owned.empty())) {
      out.verdict = std::move(v);
      out.reserve = std::move(demand);
    }
    list.push_back(m);
  }
  if (owned.empty() && borrowed.empty()) {
    out.verdict = *over;
    out.refused = QuotaLimitReason(*over);
    out.reserve = DemandOf(spec, models.front());
    return out;
  }
  // Where it can be owned it waits for (and reclaims) those models rather than borrowing others.
  const size_t candidates = models.size();
  out.models = owned.empty() ? std::move(borrowed) : std::move(owned);
  if (out.models.size() == candidates || out.models.front().empty()) out.models.clear();
  if (out.verdict.kind == AdmissionVerdict::kBorrowed) {
    const Timestamp now = clock_->Now();
    for (const auto& [resource, milli] : out.reserve) {
      auto b = backoff_.find({spec.tenant, resource});
      if (b == backoff_.end() || b->second <= now) continue;
      out.refused = PendingReason(ReasonCode::kReborrowBackoff);
      out.refused.Set(figure::kHolder, absl::StrCat("tenant ", spec.tenant))
          .Set(figure::kResource, resource)
          .Set(figure::kUntil, FormatTime(b->second));
      break;
    }
  }
  return out;
}

std::optional<PendingReason> Scheduler::RefusePlaced(const Queued& queued,
                                                     const ResourceAmounts& held,
                                                     const Assignment& assignment) const {
  const WorkloadSpec& spec = queued.workload.spec;
  const AdmissionVerdict v = ledger_.Judge(spec.tenant, spec.project, held);
  if (v.kind == AdmissionVerdict::kOverLimit) return QuotaLimitReason(v);
  if (v.kind != AdmissionVerdict::kBorrowed) return std::nullopt;
  // Borrowed work does not take capacity an owner is being placed on after a reclaim.
  for (const auto& [owner, r] : reclaims_) {
    if (owner == queued.workload.id || r.cluster != assignment.cluster) continue;
    const bool same_model =
        r.models.empty() || std::any_of(r.models.begin(), r.models.end(),
                                        [&](const std::string& m) { return held.contains(m); });
    if (!same_model) continue;
    PendingReason reason(ReasonCode::kKeptForReclaim);
    reason.Set(figure::kResource, r.resource).Set(figure::kCluster, r.cluster);
    return reason;
  }
  return std::nullopt;
}

PendingReason Scheduler::ReclaimingReason(WorkloadId owner) const {
  const Reclaiming& r = reclaims_.at(owner);
  PendingReason reason(ReasonCode::kReclaiming);
  reason.Set(figure::kCluster, r.cluster).Set(figure::kResource, r.resource);
  return reason;
}

void Scheduler::SettleReclaims() {
  for (auto it = reclaims_.begin(); it != reclaims_.end();) {
    Reclaiming& r = it->second;
    std::erase_if(r.victims, [&](WorkloadId v) { return !held_.contains(v); });
    // Kept one walk after its victims stopped, so that its owner comes first to what they
    // freed (and borrowers stay off it).
    if (!queued_ids_.contains(it->first) || r.freed) {
      it = reclaims_.erase(it);
      continue;
    }
    if (r.victims.empty()) {
      r.freed = true;
      dirty_.pool = true;
    }
    ++it;
  }
  const Timestamp now = clock_->Now();
  for (auto it = backoff_.begin(); it != backoff_.end();) {
    if (it->second <= now) {
      it = backoff_.erase(it);
      dirty_.pool = true;  // borrowed work held back by it is judged again
    } else {
      ++it;
    }
  }
}

// Victims are borrowed work only (ledger_.Reclaimable: without it, its holder still holds every
// guarantee covering it), never the owner's own tenant-and-project, never younger than the minimum
// runtime, never one already stopping.
//
// The search goes by node, since a replica lands on one node: per node, the victims there in
// victim order (lowest priority, then the least work lost), as many as bring its free capacity to
// what one replica of the owner needs, looking past any that would take the package above the
// ratio (a 4-GPU victim before a 2-GPU one, for an owner of 2); a node that cannot get there
// gives none. These packages
// are taken cheapest first (the lowest priority they stop, then the fewest GPUs, then the least
// work) until the owner fits on the cluster; then each victim is put back if the owner still fits
// without it, so the set is the smallest this order finds. Taking victims one by one in a
// cluster-wide order instead scatters them over nodes, none of which ends up with room: a gang of
// 5 x 4 GPUs found no set on a full 75-node cluster that way (examples/scenarios/cohorts-30x20).
// The cluster whose set evicts the fewest GPU-equivalents wins (then the least work lost); a set
// above max_eviction_ratio of what the owner needs is never used.
std::optional<ReclaimPlan> Scheduler::PlanReclaim(const Queued& owner, const Admission& admission,
                                                  Timestamp now) {
  WorkloadSpec spec = owner.workload.spec;
  if (!admission.models.empty()) spec.gpu_models = admission.models;
  const int64_t need = GpuMilli(admission.reserve);
  if (need <= 0) return std::nullopt;
  const auto max_evicted =
      static_cast<int64_t>(static_cast<double>(need) * options_.max_eviction_ratio);
  const int64_t replica_need = std::max<int64_t>(1, need / std::max<uint32_t>(1, spec.replicas));
  const bool whole = spec.mig_profile.empty() && spec.gpu_milli == 0;

  std::map<std::string, std::vector<const Workload*>> by_cluster;
  for (const auto& [id, w] : held_) {
    if (w.evicting || w.cancel_requested) continue;
    if (w.spec.tenant == spec.tenant && w.spec.project == spec.project) continue;
    if (!ledger_.Reclaimable(id)) continue;
    if (now - RunSince(w) < options_.reclaim_min_runtime) continue;
    by_cluster[w.assignment.cluster].push_back(&w);
  }

  auto fits = [&](const Pool& trial, const std::string& cluster) {
    PlacementDecision d = router_.Place(*reclaim_engine_, trial, spec, owner.workload.id, {}, now);
    return d.assignment && d.assignment->cluster == cluster;
  };
  auto fits_without = [&](const std::string& cluster, const std::vector<const Workload*>& gone) {
    Pool trial = pool_;
    for (const Workload* v : gone) trial.Release(v->id);
    return fits(trial, cluster);
  };
  auto lost_of = [&](const Workload* v) {
    return GpuMilli(ledger_.HeldBy(v->id)) * WorkLostSeconds(*v, now);
  };

  std::optional<ReclaimPlan> best;
  int64_t best_lost = 0;
  for (auto& [cluster, candidates] : by_cluster) {
    const ClusterSlots* slots = pool_.FindCluster(cluster);
    if (slots == nullptr) continue;
    const bool newest_first = options_.victim_order == VictimOrder::kNewestFirst;
    std::sort(candidates.begin(), candidates.end(), [&](const Workload* a, const Workload* b) {
      if (a->spec.priority != b->spec.priority) return a->spec.priority < b->spec.priority;
      if (!newest_first) {
        const bool a_saves = a->spec.checkpoint_interval_ms > 0;
        const bool b_saves = b->spec.checkpoint_interval_ms > 0;
        if (a_saves != b_saves) return a_saves;
        const int64_t a_lost = WorkLostSeconds(*a, now);
        const int64_t b_lost = WorkLostSeconds(*b, now);
        if (a_lost != b_lost) return a_lost < b_lost;
      }
      if (RunSince(*a) != RunSince(*b)) return RunSince(*a) > RunSince(*b);
      return a->id > b->id;
    });
    // Per node, the victims there in victim order and what each frees on it (its share of its
    // holdings by replicas there).
    std::map<std::string, std::vector<std::pair<const Workload*, int64_t>>> on_node;
    for (const Workload* v : candidates) {
      const auto& replicas = v->assignment.replicas;
      const int64_t held = GpuMilli(ledger_.HeldBy(v->id));
      std::map<std::string, int64_t> count;
      for (const ReplicaAssignment& r : replicas) ++count[r.node];
      for (const auto& [node, n] : count) {
        on_node[node].emplace_back(v, held * n / static_cast<int64_t>(replicas.size()));
      }
    }
    struct Package {
      std::vector<const Workload*> victims;
      int32_t top_priority = 0;
      int64_t evicted = 0;
      int64_t lost = 0;
    };
    std::vector<Package> packages;
    for (const auto& [node_name, victims] : on_node) {
      const NodeSlots* node = slots->FindNode(node_name);
      if (node == nullptr) continue;
      int64_t room = whole ? int64_t{node->free} * kMilliPerGpu : node->max_milli_free;
      if (room >= replica_need) continue;  // room already; what it lacks is elsewhere
      Package p;
      for (const auto& [v, frees] : victims) {
        // One that would take the package past the ratio is looked past: a smaller one further
        // on may close the gap.
        if (p.evicted + GpuMilli(ledger_.HeldBy(v->id)) > max_evicted) continue;
        p.victims.push_back(v);
        p.top_priority = std::max(p.top_priority, v->spec.priority);
        p.evicted += GpuMilli(ledger_.HeldBy(v->id));
        p.lost += lost_of(v);
        room += frees;
        if (room >= replica_need) break;
      }
      if (room >= replica_need && p.evicted <= max_evicted) packages.push_back(std::move(p));
    }
    std::sort(packages.begin(), packages.end(), [](const Package& a, const Package& b) {
      return std::tie(a.top_priority, a.evicted, a.lost) <
             std::tie(b.top_priority, b.evicted, b.lost);
    });
    if (static_cast<int>(packages.size()) > options_.max_reclaim_candidates) {
      packages.resize(options_.max_reclaim_candidates);
    }
    // Take packages until the owner fits; a holder brought down to its guarantee by the victims
    // taken before gives no more.
    Pool trial = pool_;
    QuotaLedger trial_ledger = ledger_;
    std::vector<const Workload*> chosen;
    std::set<WorkloadId> taken;
    bool fit = false;
    for (const Package& p : packages) {
      for (const Workload* v : p.victims) {
        if (taken.contains(v->id) || !trial_ledger.Reclaimable(v->id)) continue;
        trial.Release(v->id);
        trial_ledger.Drop(v->id);
        taken.insert(v->id);
        chosen.push_back(v);
      }
      if (fits(trial, cluster)) {
        fit = true;
        break;
      }
    }
    if (!fit) continue;
    // The smallest sufficient set: put back what the owner can do without, the most valuable
    // (last taken) first.
    for (int i = static_cast<int>(chosen.size()) - 1; i >= 0; --i) {
      std::vector<const Workload*> without = chosen;
      without.erase(without.begin() + i);
      if (fits_without(cluster, without)) chosen = std::move(without);
    }
    int64_t evicted = 0;
    int64_t lost = 0;  // GPU-milli x seconds of work the victims lose
    for (const Workload* v : chosen) {
      evicted += GpuMilli(ledger_.HeldBy(v->id));
      lost += lost_of(v);
    }
    if (evicted > max_evicted) continue;
    if (best && (evicted > best->record.evicted_milli ||
                 (evicted == best->record.evicted_milli && lost >= best_lost))) {
      continue;
    }
    ReclaimPlan plan;
    PreemptionRecord& record = plan.record;
    record.time = now;
    record.cause = PreemptionCause::kGuaranteeReclaim;
    record.preemptor = owner.workload.id;
    record.tenant = spec.tenant;
    record.project = spec.project;
    record.resource = admission.verdict.guaranteed_resource.empty()
                          ? std::string(kGpuEquivalents)
                          : admission.verdict.guaranteed_resource;
    record.cluster = cluster;
    record.needed_milli = need;
    record.evicted_milli = evicted;
    record.gpu_seconds_lost = static_cast<double>(lost) / 1000.0;
    // Victims of another tenant learn nothing of the owner (docs/security.md#rbac).
    const std::string message =
        absl::StrCat("preempted to reclaim guaranteed ", record.resource, " for its owner");
    for (const Workload* v : chosen) {
      plan.victims.push_back({v->id, cluster, v->attempts, AttemptEnd::kPreempted, message});
      record.victims.push_back(
          {v->id, v->spec.tenant, v->spec.project, GpuMilli(ledger_.HeldBy(v->id))});
    }
    best = std::move(plan);
    best_lost = lost;
  }
  if (!best) return std::nullopt;
  PreemptionRecord& record = best->record;

  // What each tenant involved holds of the resource, before and once the owner is placed.
  auto share = [&](const std::string& tenant) -> TenantShare& {
    for (TenantShare& s : record.shares) {
      if (s.tenant == tenant) return s;
    }
    const int64_t held = ledger_.FirmUsed(QuotaKey{tenant, "", record.resource});
    return record.shares.emplace_back(TenantShare{tenant, held, held});
  };
  share(record.tenant).after_milli +=
      admission.reserve.contains(record.resource) ? admission.reserve.at(record.resource) : 0;
  for (const PreemptionVictim& v : record.victims) {
    const ResourceAmounts& held = ledger_.HeldBy(v.id);
    share(v.tenant).after_milli -= held.contains(record.resource) ? held.at(record.resource) : 0;
  }

  // Under way: the victims are stopping, their tenants back off from borrowing it again.
  Reclaiming r;
  r.cluster = record.cluster;
  r.resource = record.resource;
  r.models = admission.models;
  for (const PreemptionVictim& v : record.victims) {
    r.victims.push_back(v.id);
    held_.at(v.id).evicting = AttemptEnd::kPreempted;
    backoff_[{v.tenant, record.resource}] =
        now + std::chrono::duration_cast<Timestamp::duration>(options_.reborrow_backoff);
  }
  reclaims_[record.preemptor] = std::move(r);
  return best;
}

// Weighted fair queueing over decayed usage: the next workload comes from the tenant whose usage
// per weight is lowest, counting its decayed usage (as the GPUs held on average over the decay)
// plus what the window has already taken from it this cycle; inside the tenant, from its project
// chosen the same way among its projects; inside the project, in queue order (priority, then
// age). One tenant and project: the queue's own order.
std::vector<Scheduler::QueueKey> Scheduler::FairOrder(int limit) const {
  struct Cursor {
    std::set<QueueKey>::const_iterator it, end;
    double base = 0;  // decayed usage, average GPUs
    double taken = 0;
    double weight = 1;
    double next = 0;  // GPUs of *it (gpus_of), worked out once per workload
  };
  struct TenantCursor : Cursor {
    std::vector<Cursor> projects;
  };
  auto weight_of = [&](const std::string& tenant, const std::string& project) {
    auto w = weights_.find({tenant, project});
    return w == weights_.end() ? 1.0 : static_cast<double>(w->second);
  };
  // What each holder holds now counts at once: decayed usage grows only as work runs, and a
  // holder just given capacity would otherwise keep being first until its usage caught up (an
  // overshoot that is largest, relative to its share, for the smallest weight).
  const std::map<std::pair<std::string, std::string>, int64_t> held =
      ledger_.FirmByHolder(kGpuEquivalents);
  auto now_gpus = [&](const std::string& tenant, const std::string& project) {
    auto h = held.find({tenant, project});
    return h == held.end() ? 0.0 : static_cast<double>(h->second) / 1000.0;
  };
  // What a workload asks for, in GPUs (its reservation's `gpu` amount; a MIG request on no known
  // model, about 1/7 a replica), charged to its tenant and project for the rest of the walk.
  auto gpus_of = [&](const QueueKey& key) {
    const WorkloadSpec& spec = queue_.at(key).workload.spec;
    const double gpus = static_cast<double>(GpuMilli(ReservationOf(spec))) / 1000.0;
    return gpus > 0 ? gpus : spec.replicas / 7.0;
  };
  std::vector<TenantCursor> tenants;
  tenants.reserve(by_holder_.size());
  for (const auto& [tenant, projects] : by_holder_) {
    TenantCursor& t = tenants.emplace_back();
    t.base = usage_.AverageGpus({tenant, ""}) + now_gpus(tenant, "");
    t.weight = weight_of(tenant, "");
    for (const auto& [project, keys] : projects) {
      Cursor& p = t.projects.emplace_back();
      p.it = keys.begin();
      p.end = keys.end();
      p.next = gpus_of(*p.it);
      p.base = usage_.AverageGpus({tenant, project}) + now_gpus(tenant, project);
      p.weight = weight_of(tenant, project);
    }
  }
  // Finish tags, as weighted fair queueing orders: a holder's usage per weight once its next
  // workload is counted. (Start tags, usage before it, favour small weights: a large workload
  // moves a small weight's tag far, but only after it was chosen.)
  auto finish = [](const Cursor& c, double next) { return (c.base + c.taken + next) / c.weight; };
  std::vector<QueueKey> out;
  out.reserve(std::min(queue_.size(), static_cast<size_t>(limit)));
  while (static_cast<int>(out.size()) < limit) {
    TenantCursor* best = nullptr;
    std::vector<Cursor>::iterator best_project;
    double best_tag = 0;
    double best_gpus = 0;
    for (TenantCursor& t : tenants) {
      if (t.projects.empty()) continue;
      auto project = t.projects.begin();
      double project_tag = finish(*project, project->next);
      for (auto p = std::next(t.projects.begin()); p != t.projects.end(); ++p) {
        const double tag = finish(*p, p->next);
        if (tag < project_tag) {
          project = p;
          project_tag = tag;
        }
      }
      const double gpus = project->next;
      const double tag = finish(t, gpus);
      if (best == nullptr || tag < best_tag) {
        best = &t;
        best_project = project;
        best_tag = tag;
        best_gpus = gpus;
      }
    }
    if (best == nullptr) break;
    out.push_back(*best_project->it++);
    best_project->taken += best_gpus;
    best->taken += best_gpus;
    if (best_project->it == best_project->end) {
      best->projects.erase(best_project);
    } else {
      best_project->next = gpus_of(*best_project->it);
    }
  }
  return out;
}

void Scheduler::AdvanceUsage(Timestamp now) {
  usage_.Advance(now, ledger_.FirmByHolder(kGpuEquivalents));
}

absl::Status Scheduler::SaveUsage() {
  if (quotas_ == nullptr) return absl::OkStatus();
  return quotas_->SaveUsage(usage_.Snapshot());
}

std::vector<FairShare> Scheduler::FairShares() const {
  // Active: holding something now, or waiting.
  std::map<std::pair<std::string, std::string>, FairShare> rows;
  auto row = [&](const std::string& tenant, const std::string& project) -> FairShare& {
    FairShare& f = rows[{tenant, project}];
    f.tenant = tenant;
    f.project = project;
    auto w = weights_.find({tenant, project});
    f.weight = w == weights_.end() ? 1 : w->second;
    return f;
  };
  for (const auto& [holder, milli] : ledger_.FirmByHolder(kGpuEquivalents)) {
    row(holder.first, holder.second).held_milli = milli;
  }
  for (const auto& [tenant, projects] : by_holder_) {
    row(tenant, "");
    for (const auto& [project, keys] : projects) row(tenant, project).waiting += keys.size();
  }
  for (auto& [holder, f] : rows) {
    f.decayed_gpu_hours = usage_.GpuSeconds(holder) / 3600.0;
    if (!holder.second.empty()) rows[{holder.first, ""}].waiting += f.waiting;
  }
  // Shares: tenants among the active tenants; projects among their tenant's active projects.
  std::map<std::string, double> tenant_weights;  // tenant -> sum of its projects' weights
  double total = 0;
  for (auto& [holder, f] : rows) {
    if (holder.second.empty()) {
      total += static_cast<double>(f.weight);
    } else {
      tenant_weights[holder.first] += static_cast<double>(f.weight);
    }
  }
  std::vector<FairShare> out;
  out.reserve(rows.size());
  for (auto& [holder, f] : rows) {
    if (holder.second.empty()) {
      f.share = total > 0 ? static_cast<double>(f.weight) / total : 0;
    } else {
      const FairShare& tenant = rows.at({holder.first, ""});
      f.share = tenant.share * static_cast<double>(f.weight) / tenant_weights[holder.first];
    }
    out.push_back(f);
  }
  return out;
}

}  // namespace gpufed
