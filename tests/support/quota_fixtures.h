#ifndef GPUFED_TESTS_SUPPORT_QUOTA_FIXTURES_H_
#define GPUFED_TESTS_SUPPORT_QUOTA_FIXTURES_H_

#include <cstdint>
#include <optional>
#include <string>

#include "federation/quota.h"

namespace gpufed::testing {

// A quota of `tenant` (or its `project`) on `resource`, amounts in milli; no limit: no borrowing.
inline Quota MakeQuota(const std::string& tenant, const std::string& project,
                       const std::string& resource, int64_t guaranteed,
                       std::optional<int64_t> limit = std::nullopt) {
  Quota q;
  q.key = QuotaKey{tenant, project, resource};
  q.guaranteed_milli = guaranteed;
  q.limit_milli = limit;
  return q;
}

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_SUPPORT_QUOTA_FIXTURES_H_
