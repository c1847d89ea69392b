#ifndef GPUFED_FEDERATION_QUOTA_H_
#define GPUFED_FEDERATION_QUOTA_H_

// Quotas (docs/quotas.md): what a tenant, or a project inside it, is promised (`guaranteed`) and
// may hold at most by borrowing idle capacity (`limit`), per resource, across every cluster
// together.
//
// A resource is one of
// - `gpu`: GPU-equivalents: a whole GPU counts 1, a MIG instance its compute fraction (k/7, or
//   k/4 on A30), a shared GPU its milli share / 1000;
// - a GPU model of the catalogue (`H100-80GB`): GPUs of that model, counted as for `gpu`;
// - a MIG profile (`3g.40gb`): instances of that profile, on any product that has it.
// Amounts are kept in thousandths (milli): 32 GPUs = 32000, one 1g.10gb on an H100 = 142 in
// `gpu`, 1000 in `1g.10gb`.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "federation/types.h"

namespace gpufed {

inline constexpr char kGpuEquivalents[] = "gpu";
// At most this many quotas in one tenant (its own and its projects'), so that a tenant admin
// cannot grow what every admission reads.
inline constexpr int kMaxQuotasPerTenant = 1000;
// The largest amount a quota may name: a million GPUs.
inline constexpr int64_t kMaxQuotaMilli = int64_t{1'000'000} * 1000;

struct QuotaKey {
  std::string tenant;
  std::string project;  // empty: the tenant's own quota
  std::string resource;

  bool operator==(const QuotaKey&) const = default;
};

struct Quota {
  QuotaKey key;
  int64_t guaranteed_milli = 0;
  // Absent: no borrowing (the limit is the guarantee).
  std::optional<int64_t> limit_milli;
  // Set knowing that the guarantees on this resource add up to more than the capacity they draw
  // on (SetQuota's overcommit).
  bool overcommitted = false;
  Timestamp update_time{};

  [[nodiscard]] int64_t EffectiveLimit() const { return limit_milli.value_or(guaranteed_milli); }
  bool operator==(const Quota&) const = default;
};

// What kind of resource `name` is; INVALID_ARGUMENT naming `field` for anything else.
enum class QuotaResourceKind { kGpuEquivalents, kGpuModel, kMigProfile };
absl::Status ValidateQuotaResource(const std::string& field, const std::string& name,
                                   QuotaResourceKind* kind = nullptr);

// Tenant and project names, the resource, 0 <= guaranteed <= limit <= kMaxQuotaMilli;
// INVALID_ARGUMENT naming the field.
absl::Status ValidateQuota(const Quota& quota);

// The capacity `resource` draws on in `clusters` (healthy GPUs of nodes that are not cordoned,
// on clusters that are not unreachable), in milli: GPUs of any model (`gpu`) or of the model,
// or for a MIG profile the instances every MIG-capable GPU with that profile could hold if it
// were all that profile.
int64_t QuotaCapacity(const std::vector<Cluster>& clusters, const std::string& resource);

// Whether `proposed` may replace what is stored of its key among `same_resource` (every quota on
// that resource, of every tenant, as stored):
// - a project's guarantees, added over the tenant's projects, within the tenant's guarantee, and
//   each project's limit within the tenant's limit (when the tenant has a quota on the
//   resource); nor may the tenant's shrink below its projects';
// - what the guarantees promise of the pool (per tenant its own, or its projects' when that is
//   more) within `capacity`, unless `overcommit` (then `proposed` is marked overcommitted). Only
//   a change that promises more is checked: lowering a guarantee is always accepted.
// FAILED_PRECONDITION naming the resource and the shortfall ("guarantees on H100-80GB would add
// up to 40 of 32 GPUs in the pool: 8 short").
absl::Status CheckQuotaFits(Quota& proposed, const std::vector<Quota>& same_resource,
                            int64_t capacity, bool overcommit);

// What a workload holding capacity holds of each resource, in milli: `gpu` (a whole GPU 1000, a
// MIG instance its compute fraction, a share its milli), the model of each GPU it holds (the same
// amounts), and its MIG profile (1000 per instance). `model_of(cluster, node, uuid)` names a GPU's
// model ("" when unknown: counted in `gpu` only).
using ResourceAmounts = std::map<std::string, int64_t>;
using GpuModelLookup = std::function<std::string(const std::string& cluster,
                                                 const std::string& node, const std::string& uuid)>;
ResourceAmounts HeldResources(const Workload& w, const GpuModelLookup& model_of);

// One row of a usage report: what `key` holds of its resource (project empty: the tenant in all)
// against its quota, if it has one.
struct QuotaUsage {
  QuotaKey key;
  std::optional<Quota> quota;
  int64_t used_milli = 0;
  // Held above the guarantee: all of it without a quota.
  int64_t borrowed_milli = 0;
};

// "32", "0.5", "1.125" (thousandths at most) → milli; INVALID_ARGUMENT naming `field`.
absl::Status ParseQuotaAmount(const std::string& field, const std::string& text, int64_t* milli);
// 32000 → "32", 500 → "0.5".
std::string FormatQuotaAmount(int64_t milli);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_QUOTA_H_
