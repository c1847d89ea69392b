#ifndef GPUFED_FEDERATION_IDLE_GUARANTEE_H_
#define GPUFED_FEDERATION_IDLE_GUARANTEE_H_

// Idle guaranteed capacity (docs/chargeback.md#idle-guarantees): capacity a tenant (or a project)
// reserved with a quota's guarantee and did not hold. It is kept out of everyone else's reach
// only as far as the owner can reclaim it, so showback attributes it to the owner.
//
// Measured in units of the quota's resource (GPUs, GPU-equivalents or MIG instances) times
// microseconds: a guarantee of 8 GPUs for an hour reserves 28,800,000,000 unit-microseconds.
// The active scheduler samples its quota ledger (QuotaUsage) at each meter pass and takes the
// holdings it reads for the whole span since the previous pass.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "federation/quota.h"
#include "federation/types.h"
#include "federation/usage_report.h"

namespace gpufed {

// One quota's guarantee over part of one UTC day.
struct GuaranteeUse {
  Timestamp day{};  // the UTC midnight starting the day
  QuotaKey key;
  int64_t reserved_unit_us = 0;  // guaranteed x time
  int64_t idle_unit_us = 0;      // (guaranteed - what was held of it) x time
  bool operator==(const GuaranteeUse&) const = default;
};

// What the guarantees of `usage` reserved and left idle over [from, to), split at UTC
// midnights, the holdings of `usage` taken for the whole span. Quotas without a guarantee give
// nothing; nothing when to <= from.
std::vector<GuaranteeUse> GuaranteeUses(const std::vector<QuotaUsage>& usage, Timestamp from,
                                        Timestamp to);

// OK, or INVALID_ARGUMENT naming the field ("uses[3].idle_unit_us"): a negative figure, idle above
// reserved, a day that is not a UTC midnight.
absl::Status ValidateGuaranteeUses(const std::vector<GuaranteeUse>& uses);

// One line of the idle-guarantee report: a quota's sums over one period.
struct GuaranteeLine {
  Timestamp period_start{};  // as UsageLine's
  QuotaKey key;
  int64_t reserved_unit_us = 0;
  int64_t idle_unit_us = 0;
  bool operator==(const GuaranteeLine&) const = default;
};

// Whether `use` falls in `query`'s window and tenant and project filters. A query naming a
// cluster matches nothing: guarantees are on the whole pool.
bool GuaranteeWanted(const UsageQuery& query, const GuaranteeUse& use);
// Sums `uses` (those GuaranteeWanted) per period and quota, ordered by period, then tenant,
// project and resource. What the in-memory store does; PgStore does the same in SQL.
std::vector<GuaranteeLine> SumGuarantees(const UsageQuery& query,
                                         const std::vector<GuaranteeUse>& uses);

// A usage report: its lines, and the idle guarantees of the tenants and projects it covers
// (federation/idle_guarantee.h).
struct UsageReportResult {
  std::vector<UsageLine> lines;
  std::vector<GuaranteeLine> guarantees;
};

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_IDLE_GUARANTEE_H_
