#include "federation/quota_ledger.h"

#include <utility>

#include "federation/mig.h"

namespace gpufed {
namespace {

// The tenant's own account (its total over its projects) has an empty project.
const std::string kNoProject;

}  // namespace

ResourceAmounts DemandOf(const WorkloadSpec& spec, const std::string& model) {
  ResourceAmounts out;
  int64_t gpu_milli = 0;
  if (!spec.mig_profile.empty()) {
    out[spec.mig_profile] = int64_t{spec.replicas} * 1000;
    const MigGeometry* g = model.empty() ? nullptr : FindMigGeometry(model);
    const MigProfile* p = g == nullptr ? nullptr : g->Find(spec.mig_profile);
    if (p != nullptr) {
      // Per instance as HeldResources counts it (rounded down), so that a reservation and the
      // placement that replaces it agree.
      gpu_milli = int64_t{spec.replicas} * (int64_t{p->compute_slices} * 1000 / g->compute_slices);
    }
  } else if (spec.gpu_milli > 0) {
    gpu_milli = int64_t{spec.replicas} * spec.gpu_milli;
  } else {
    gpu_milli = int64_t{spec.TotalGpus()} * 1000;
  }
  if (gpu_milli > 0) {
    out[kGpuEquivalents] = gpu_milli;
    if (!model.empty()) out[model] = gpu_milli;
  }
  return out;
}

void QuotaLedger::SetQuotas(const std::vector<Quota>& quotas) {
  quotas_.clear();
  for (const Quota& q : quotas) quotas_[{q.key.tenant, q.key.project, q.key.resource}] = q;
}

void QuotaLedger::Add(const Held& held, int64_t sign) {
  for (const auto& [resource, milli] : held.amounts) {
    for (const std::string* project : {&kNoProject, &held.project}) {
      if (project == &held.project && held.project.empty()) continue;
      for (std::map<Key, int64_t>* m : {&used_, &firm_used_}) {
        if (m == &firm_used_ && !held.firm) continue;
        auto [it, inserted] = m->try_emplace(Key{held.tenant, *project, resource}, 0);
        it->second += sign * milli;
        if (it->second == 0) m->erase(it);
      }
    }
  }
}

void QuotaLedger::Hold(WorkloadId id, const std::string& tenant, const std::string& project,
                       ResourceAmounts amounts, bool firm) {
  Drop(id);
  Held held{tenant, project, std::move(amounts), firm};
  Add(held, +1);
  held_.emplace(id, std::move(held));
}

void QuotaLedger::Drop(WorkloadId id) {
  auto it = held_.find(id);
  if (it == held_.end()) return;
  Add(it->second, -1);
  held_.erase(it);
}

const ResourceAmounts& QuotaLedger::HeldBy(WorkloadId id) const {
  static const ResourceAmounts kNothing;
  auto it = held_.find(id);
  return it == held_.end() ? kNothing : it->second.amounts;
}

int64_t QuotaLedger::Used(const QuotaKey& key) const {
  auto it = used_.find(Key{key.tenant, key.project, key.resource});
  return it == used_.end() ? 0 : it->second;
}

int64_t QuotaLedger::FirmUsed(const QuotaKey& key) const {
  auto it = firm_used_.find(Key{key.tenant, key.project, key.resource});
  return it == firm_used_.end() ? 0 : it->second;
}

std::map<std::pair<std::string, std::string>, int64_t> QuotaLedger::FirmByHolder(
    const std::string& resource) const {
  std::map<std::pair<std::string, std::string>, int64_t> out;
  for (const auto& [key, milli] : firm_used_) {
    if (std::get<2>(key) == resource) out[{std::get<0>(key), std::get<1>(key)}] = milli;
  }
  return out;
}

const Quota* QuotaLedger::Find(const QuotaKey& key) const {
  auto it = quotas_.find(Key{key.tenant, key.project, key.resource});
  return it == quotas_.end() ? nullptr : &it->second;
}

namespace {

// The resource a guarantee names, by preference: the GPU model, the MIG profile, then `gpu`.
int Preference(const std::string& resource) {
  QuotaResourceKind kind = QuotaResourceKind::kGpuModel;
  if (!ValidateQuotaResource("resource", resource, &kind).ok()) return 3;
  switch (kind) {
    case QuotaResourceKind::kGpuModel:
      return 0;
    case QuotaResourceKind::kMigProfile:
      return 1;
    case QuotaResourceKind::kGpuEquivalents:
      return 2;
  }
  return 3;
}

}  // namespace

AdmissionVerdict QuotaLedger::Judge(const std::string& tenant, const std::string& project,
                                    const ResourceAmounts& amounts) const {
  AdmissionVerdict v;
  bool covered = false;
  bool above_guarantee = false;
  int best = 4;
  for (const auto& [resource, milli] : amounts) {
    for (const std::string* p : {&kNoProject, &project}) {
      if (p == &project && project.empty()) continue;
      const Quota* q = Find(QuotaKey{tenant, *p, resource});
      if (q == nullptr) continue;
      const int64_t held = Used(q->key);
      if (held + milli > q->EffectiveLimit()) {
        v.kind = AdmissionVerdict::kOverLimit;
        v.limit = *q;
        v.held_milli = held;
        v.asked_milli = milli;
        return v;
      }
      covered = true;
      if (FirmUsed(q->key) + milli > q->guaranteed_milli) above_guarantee = true;
      if (q->guaranteed_milli > 0 && Preference(resource) < best) {
        best = Preference(resource);
        v.guaranteed_resource = resource;
      }
    }
  }
  v.kind = covered && !above_guarantee ? AdmissionVerdict::kOwned : AdmissionVerdict::kBorrowed;
  return v;
}

bool QuotaLedger::Reclaimable(WorkloadId id) const {
  auto it = held_.find(id);
  if (it == held_.end()) return false;
  const Held& h = it->second;
  for (const auto& [resource, milli] : h.amounts) {
    for (const std::string* p : {&kNoProject, &h.project}) {
      if (p == &h.project && h.project.empty()) continue;
      const Quota* q = Find(QuotaKey{h.tenant, *p, resource});
      if (q == nullptr || q->guaranteed_milli == 0) continue;
      const int64_t firm = h.firm ? milli : 0;
      if (FirmUsed(q->key) - firm < q->guaranteed_milli) return false;
    }
  }
  return true;
}

}  // namespace gpufed
