#include "federation/idle_guarantee.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <tuple>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"

namespace gpufed {
namespace {

// milli x microseconds / 1000, rounded down.
int64_t UnitMicroseconds(int64_t milli, int64_t us) {
  return static_cast<int64_t>(absl::int128(milli) * us / 1000);
}

}  // namespace

std::vector<GuaranteeUse> GuaranteeUses(const std::vector<QuotaUsage>& usage, Timestamp from,
                                        Timestamp to) {
  std::vector<GuaranteeUse> out;
  for (Timestamp start = from; start < to;) {
    const Timestamp day = std::chrono::floor<std::chrono::days>(start);
    const Timestamp end = std::min(to, day + std::chrono::days(1));
    const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(end - start).count();
    for (const QuotaUsage& u : usage) {
      if (!u.quota || u.quota->guaranteed_milli <= 0) continue;
      const int64_t guaranteed = u.quota->guaranteed_milli;
      GuaranteeUse g;
      g.day = day;
      g.key = u.key;
      g.reserved_unit_us = UnitMicroseconds(guaranteed, us);
      g.idle_unit_us =
          UnitMicroseconds(guaranteed - std::clamp<int64_t>(u.used_milli, 0, guaranteed), us);
      out.push_back(std::move(g));
    }
    start = end;
  }
  return out;
}

absl::Status ValidateGuaranteeUses(const std::vector<GuaranteeUse>& uses) {
  for (size_t i = 0; i < uses.size(); ++i) {
    const GuaranteeUse& u = uses[i];
    const std::string at = absl::StrCat("uses[", i, "].");
    if (u.day != std::chrono::floor<std::chrono::days>(u.day)) {
      return absl::InvalidArgumentError(absl::StrCat(at, "day: must be a UTC midnight"));
    }
    if (u.reserved_unit_us < 0) {
      return absl::InvalidArgumentError(absl::StrCat(at, "reserved_unit_us: must be >= 0"));
    }
    if (u.idle_unit_us < 0 || u.idle_unit_us > u.reserved_unit_us) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, "idle_unit_us: must be 0..reserved_unit_us"));
    }
  }
  return absl::OkStatus();
}

bool GuaranteeWanted(const UsageQuery& query, const GuaranteeUse& use) {
  if (use.day < query.from || use.day >= query.to) return false;
  if (!query.cluster.empty()) return false;
  if (!query.tenant.empty() && use.key.tenant != query.tenant) return false;
  return query.project.empty() || use.key.project == query.project;
}

std::vector<GuaranteeLine> SumGuarantees(const UsageQuery& query,
                                         const std::vector<GuaranteeUse>& uses) {
  std::map<std::tuple<Timestamp, std::string, std::string, std::string>, GuaranteeLine> lines;
  for (const GuaranteeUse& u : uses) {
    if (!GuaranteeWanted(query, u)) continue;
    const Timestamp period = PeriodStart(query.period, u.day, query.from);
    GuaranteeLine& line = lines[{period, u.key.tenant, u.key.project, u.key.resource}];
    line.period_start = period;
    line.key = u.key;
    line.reserved_unit_us += u.reserved_unit_us;
    line.idle_unit_us += u.idle_unit_us;
  }
  std::vector<GuaranteeLine> out;
  out.reserve(lines.size());
  for (auto& [key, line] : lines) out.push_back(std::move(line));
  return out;
}

}  // namespace gpufed
