#ifndef GPUFED_FEDERATION_QUOTA_LEDGER_H_
#define GPUFED_FEDERATION_QUOTA_LEDGER_H_

// The scheduler's account of quotas (docs/quotas.md, "Admission"): the quotas in force and what
// every tenant, and every project inside it, holds of each resource now, so that admission and
// reclaim are decided in memory, without reading the store.
//
// A workload is held by its tenant (in all) and by its project. What it holds is either what its
// placement takes (HeldResources) or, while it is ADMITTED and waits for capacity, what it asks
// for (DemandOf): the quota is reserved for it from admission on. Limits count both. Guarantees
// count only what is *firm*: placed work, and owners whose reclaim is under way. Work that merely
// waits does not use up its tenant's guarantee, or a tenant with a long queue and nothing
// running would never be owed anything.
//
// Not thread-safe: the scheduler's thread owns it.

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "federation/quota.h"
#include "federation/types.h"

namespace gpufed {

// What `spec` would hold of each resource if placed on GPUs of `model` ("" when not known:
// counted in `gpu` and its MIG profile only; a MIG instance then counts nothing in `gpu`).
ResourceAmounts DemandOf(const WorkloadSpec& spec, const std::string& model);

// Admission's answer for one workload.
struct AdmissionVerdict {
  enum Kind {
    kOwned,      // within every limit and within the guarantees that cover it
    kBorrowed,   // within every limit, above a guarantee (or covered by none)
    kOverLimit,  // would take its tenant or project past a limit
  };
  Kind kind = kOwned;
  // kOverLimit: the quota it would pass, what its holder holds now (reservations included) and
  // what the workload asks of that resource.
  std::optional<Quota> limit;
  int64_t held_milli = 0;
  int64_t asked_milli = 0;
  // kBorrowed / kOwned: the resource a guarantee covers (the GPU model first, then the MIG
  // profile, then `gpu`), "" when no quota covers it.
  std::string guaranteed_resource;
};

class QuotaLedger {
 public:
  // Replaces the quotas in force. What is held is kept.
  void SetQuotas(const std::vector<Quota>& quotas);
  // No quota anywhere: every workload is admitted, as borrowed.
  [[nodiscard]] bool empty() const { return quotas_.empty(); }

  // Records that `id` of (tenant, project) holds `amounts`, replacing what it held before;
  // `firm`: counted against guarantees too (placed, or reclaiming).
  void Hold(WorkloadId id, const std::string& tenant, const std::string& project,
            ResourceAmounts amounts, bool firm = true);
  // Forgets what `id` held (nothing when it held nothing).
  void Drop(WorkloadId id);
  [[nodiscard]] bool Holds(WorkloadId id) const { return held_.contains(id); }
  // What `id` holds; empty when nothing.
  [[nodiscard]] const ResourceAmounts& HeldBy(WorkloadId id) const;

  // Whether a workload of (tenant, project) asking `amounts` (not held yet) may be admitted, and
  // whether it would be owned or borrowed.
  [[nodiscard]] AdmissionVerdict Judge(const std::string& tenant, const std::string& project,
                                       const ResourceAmounts& amounts) const;
  // Whether what `id` holds is all borrowed: without it, every quota covering it (its tenant's
  // and project's, on each resource it holds) is still held at or above its guarantee (or has
  // none). A reclaim's victims are taken only from such work, so no victim is ever taken from
  // within its holder's guarantee. False for an id that holds nothing.
  [[nodiscard]] bool Reclaimable(WorkloadId id) const;

  // What (tenant, project) holds of `resource` (project "": the tenant in all), reservations
  // included; and only the firm part.
  [[nodiscard]] int64_t Used(const QuotaKey& key) const;
  [[nodiscard]] int64_t FirmUsed(const QuotaKey& key) const;
  // Every holder's firm holding of `resource`: (tenant, "") for the tenant in all, (tenant,
  // project) for each project; holders holding nothing are absent.
  [[nodiscard]] std::map<std::pair<std::string, std::string>, int64_t> FirmByHolder(
      const std::string& resource) const;
  [[nodiscard]] const Quota* Find(const QuotaKey& key) const;
  [[nodiscard]] const std::map<std::tuple<std::string, std::string, std::string>, Quota>& quotas()
      const {
    return quotas_;
  }

 private:
  using Key = std::tuple<std::string, std::string, std::string>;  // tenant, project, resource
  struct Held {
    std::string tenant;
    std::string project;
    ResourceAmounts amounts;
    bool firm = true;
  };

  void Add(const Held& held, int64_t sign);

  std::map<Key, Quota> quotas_;
  std::map<Key, int64_t> used_;
  std::map<Key, int64_t> firm_used_;
  std::map<WorkloadId, Held> held_;
};

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_QUOTA_LEDGER_H_
