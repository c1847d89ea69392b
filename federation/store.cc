#include "federation/store.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "federation/status_macros.h"

namespace gpufed {

absl::StatusOr<std::vector<WorkloadStore::PendingVersion>> WorkloadStore::ListPendingVersions(
    int limit) {
  ASSIGN_OR_RETURN(std::vector<Workload> pending, ListPending(limit));
  std::vector<PendingVersion> out;
  out.reserve(pending.size());
  for (const Workload& w : pending) out.push_back({w.id, w.version});
  return out;
}

absl::StatusOr<std::vector<Workload>> WorkloadStore::GetWorkloads(std::vector<WorkloadId> ids) {
  RETURN_IF_ERROR(CheckGetWorkloads(ids));
  std::vector<Workload> out;
  out.reserve(ids.size());
  for (WorkloadId id : ids) {
    absl::StatusOr<Workload> w = Get(id);
    if (w.ok()) {
      out.push_back(*std::move(w));
    } else if (w.status().code() != absl::StatusCode::kNotFound) {
      return w.status();
    }
  }
  return out;
}

absl::Status WorkloadStore::CheckGetWorkloads(std::vector<WorkloadId>& ids) {
  if (ids.size() > kMaxGetWorkloads) {
    return absl::InvalidArgumentError(
        absl::StrCat("ids: at most ", kMaxGetWorkloads, ", got ", ids.size()));
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  if (!ids.empty() && ids.front() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("ids: must be positive, got ", ids.front()));
  }
  return absl::OkStatus();
}

}  // namespace gpufed
