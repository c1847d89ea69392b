#include "federation/quota.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "federation/gpu_catalog.h"
#include "federation/mig.h"
#include "federation/status_macros.h"
#include "federation/validation.h"

namespace gpufed {
namespace {

// True when some MIG product has a profile of that name.
bool IsMigProfile(const std::string& name) {
  for (absl::string_view model : MigModels()) {
    const MigGeometry* g = FindMigGeometry(model);
    if (g != nullptr && g->Find(name) != nullptr) return true;
  }
  return false;
}

// What a GPU of `gpu`'s kind contributes to `resource`'s capacity, in milli.
int64_t GpuCapacity(const GpuInfo& gpu, const std::string& resource, QuotaResourceKind kind) {
  switch (kind) {
    case QuotaResourceKind::kGpuEquivalents:
      return 1000;
    case QuotaResourceKind::kGpuModel:
      return gpu.model == resource ? 1000 : 0;
    case QuotaResourceKind::kMigProfile: {
      if (!gpu.mig_capable) return 0;
      const MigGeometry* g = FindMigGeometry(gpu.model);
      const MigProfile* p = g == nullptr ? nullptr : g->Find(resource);
      return p == nullptr ? 0 : int64_t{p->max_count} * 1000;
    }
  }
  return 0;
}

std::string Unit(QuotaResourceKind kind) {
  return kind == QuotaResourceKind::kMigProfile ? "instances" : "GPUs";
}

}  // namespace

absl::Status ValidateQuotaResource(const std::string& field, const std::string& name,
                                   QuotaResourceKind* kind) {
  QuotaResourceKind found;
  if (name == kGpuEquivalents) {
    found = QuotaResourceKind::kGpuEquivalents;
  } else if (FindGpuModel(name).has_value()) {
    found = QuotaResourceKind::kGpuModel;
  } else if (IsMigProfile(name)) {
    found = QuotaResourceKind::kMigProfile;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": \"", name.substr(0, 64), "\" is not a resource: gpu, a GPU model (",
                     KnownGpuModelNames(), ") or a MIG profile (e.g. 1g.10gb, 3g.40gb)"));
  }
  if (kind != nullptr) *kind = found;
  return absl::OkStatus();
}

absl::Status ValidateQuota(const Quota& quota) {
  RETURN_IF_ERROR(ValidateName("tenant", quota.key.tenant));
  if (!quota.key.project.empty()) RETURN_IF_ERROR(ValidateName("project", quota.key.project));
  RETURN_IF_ERROR(ValidateQuotaResource("resource", quota.key.resource));
  if (quota.guaranteed_milli < 0 || quota.guaranteed_milli > kMaxQuotaMilli) {
    return absl::InvalidArgumentError(
        absl::StrCat("guaranteed: must be between 0 and ", FormatQuotaAmount(kMaxQuotaMilli)));
  }
  if (quota.limit_milli.has_value()) {
    if (*quota.limit_milli < quota.guaranteed_milli) {
      return absl::InvalidArgumentError(absl::StrCat(
          "limit: ", FormatQuotaAmount(*quota.limit_milli), " is below the guarantee (",
          FormatQuotaAmount(quota.guaranteed_milli), ")"));
    }
    if (*quota.limit_milli > kMaxQuotaMilli) {
      return absl::InvalidArgumentError(
          absl::StrCat("limit: must be at most ", FormatQuotaAmount(kMaxQuotaMilli)));
    }
  }
  return absl::OkStatus();
}

int64_t QuotaCapacity(const std::vector<Cluster>& clusters, const std::string& resource) {
  QuotaResourceKind kind;
  if (!ValidateQuotaResource("resource", resource, &kind).ok()) return 0;
  int64_t total = 0;
  for (const Cluster& c : clusters) {
    if (c.state == ClusterState::kUnreachable) continue;
    for (const NodeInfo& n : c.nodes) {
      if (n.cordoned) continue;
      for (const GpuInfo& g : n.gpus) {
        if (g.healthy) total += GpuCapacity(g, resource, kind);
      }
    }
  }
  return total;
}

namespace {

// What the guarantees on one resource promise of the pool: per tenant its own guarantee, or
// what its projects are guaranteed when that is more (a tenant without a quota on the resource).
int64_t PromisedOfPool(const std::vector<Quota>& quotas) {
  std::map<std::string, std::pair<int64_t, int64_t>> by_tenant;  // own, projects
  for (const Quota& q : quotas) {
    auto& [own, projects] = by_tenant[q.key.tenant];
    (q.key.project.empty() ? own : projects) += q.guaranteed_milli;
  }
  int64_t total = 0;
  for (const auto& [tenant, amounts] : by_tenant) total += std::max(amounts.first, amounts.second);
  return total;
}

}  // namespace

absl::Status CheckQuotaFits(Quota& proposed, const std::vector<Quota>& same_resource,
                            int64_t capacity, bool overcommit) {
  QuotaResourceKind kind;
  RETURN_IF_ERROR(ValidateQuotaResource("resource", proposed.key.resource, &kind));
  const std::string& resource = proposed.key.resource;
  // The stored quotas, with `proposed` in place of its key's.
  std::vector<Quota> before;
  std::vector<Quota> after;
  for (const Quota& q : same_resource) {
    if (q.key.resource != resource) continue;
    before.push_back(q);
    if (!(q.key == proposed.key)) after.push_back(q);
  }
  after.push_back(proposed);
  const std::string& tenant = proposed.key.tenant;
  const Quota* tenant_quota = nullptr;
  int64_t projects_guaranteed = 0;
  int64_t projects_limit = 0;
  for (const Quota& q : after) {
    if (q.key.tenant != tenant) continue;
    if (q.key.project.empty()) {
      tenant_quota = &q;
    } else {
      projects_guaranteed += q.guaranteed_milli;
      projects_limit = std::max(projects_limit, q.EffectiveLimit());
    }
  }
  if (tenant_quota != nullptr) {
    if (projects_guaranteed > tenant_quota->guaranteed_milli) {
      return absl::FailedPreconditionError(absl::StrCat(
          "guaranteed: the projects of tenant ", tenant, " would be guaranteed ",
          FormatQuotaAmount(projects_guaranteed), " ", resource, " in all, more than the tenant's ",
          FormatQuotaAmount(tenant_quota->guaranteed_milli), ": ",
          FormatQuotaAmount(projects_guaranteed - tenant_quota->guaranteed_milli), " short"));
    }
    if (projects_limit > tenant_quota->EffectiveLimit()) {
      return absl::FailedPreconditionError(
          absl::StrCat("limit: a project of tenant ", tenant, " would have a limit of ",
                       FormatQuotaAmount(projects_limit), " ", resource, ", above the tenant's ",
                       FormatQuotaAmount(tenant_quota->EffectiveLimit())));
    }
  }
  // Only a change that promises more of the pool is checked against it: one that promises less
  // is always accepted, also when the pool has shrunk below what was promised.
  const int64_t promised = PromisedOfPool(after);
  proposed.overcommitted = false;
  if (promised > capacity && promised > PromisedOfPool(before)) {
    if (!overcommit) {
      return absl::FailedPreconditionError(absl::StrCat(
          "guaranteed: guarantees on ", resource, " would add up to ", FormatQuotaAmount(promised),
          " of ", FormatQuotaAmount(capacity), " ", Unit(kind), " in the pool: ",
          FormatQuotaAmount(promised - capacity), " short (set overcommit to accept it)"));
    }
    proposed.overcommitted = true;
  }
  return absl::OkStatus();
}

ResourceAmounts HeldResources(const Workload& w, const GpuModelLookup& model_of) {
  ResourceAmounts held;
  for (const ReplicaAssignment& r : w.assignment.replicas) {
    if (!r.mig_profile.empty()) {
      held[r.mig_profile] += 1000;
      if (r.gpu_uuids.empty()) continue;
      const std::string model = model_of(w.assignment.cluster, r.node, r.gpu_uuids.front());
      const MigGeometry* g = FindMigGeometry(model);
      const MigProfile* p = g == nullptr ? nullptr : g->Find(r.mig_profile);
      const int64_t fraction =
          p == nullptr ? 0 : int64_t{p->compute_slices} * 1000 / g->compute_slices;
      held[kGpuEquivalents] += fraction;
      if (!model.empty()) held[model] += fraction;
      continue;
    }
    const int64_t each = r.gpu_milli > 0 ? int64_t{r.gpu_milli} : 1000;
    for (const std::string& uuid : r.gpu_uuids) {
      held[kGpuEquivalents] += each;
      const std::string model = model_of(w.assignment.cluster, r.node, uuid);
      if (!model.empty()) held[model] += each;
    }
  }
  return held;
}

absl::Status ParseQuotaAmount(const std::string& field, const std::string& text, int64_t* milli) {
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": \"", text.substr(0, 32),
                     "\" is not an amount (a number of GPUs or instances, e.g. 32 or 0.5, at "
                     "most three decimals)"));
  };
  std::vector<std::string> parts = absl::StrSplit(text, '.');
  if (parts.empty() || parts.size() > 2 || parts[0].empty() || parts[0].size() > 7) return bad();
  for (char c : parts[0]) {
    if (c < '0' || c > '9') return bad();
  }
  int64_t whole = 0;
  if (!absl::SimpleAtoi(parts[0], &whole)) return bad();
  int64_t fraction = 0;
  if (parts.size() == 2) {
    const std::string& f = parts[1];
    if (f.empty() || f.size() > 3) return bad();
    for (char c : f) {
      if (c < '0' || c > '9') return bad();
    }
    if (!absl::SimpleAtoi(f + std::string(3 - f.size(), '0'), &fraction)) return bad();
  }
  *milli = whole * 1000 + fraction;
  if (*milli > kMaxQuotaMilli) return bad();
  return absl::OkStatus();
}

std::string FormatQuotaAmount(int64_t milli) {
  // Negative amounts only appear in messages about bad input; unsigned keeps INT64_MIN defined.
  const bool negative = milli < 0;
  const uint64_t magnitude =
      negative ? uint64_t{0} - static_cast<uint64_t>(milli) : static_cast<uint64_t>(milli);
  const uint64_t whole = magnitude / 1000;
  const uint64_t fraction = magnitude % 1000;
  std::string out = absl::StrCat(negative ? "-" : "", whole);
  if (fraction == 0) return out;
  std::string digits = absl::StrCat(fraction + 1000).substr(1);  // three digits, zero-padded
  while (!digits.empty() && digits.back() == '0') digits.pop_back();
  return absl::StrCat(out, ".", digits);
}

}  // namespace gpufed
