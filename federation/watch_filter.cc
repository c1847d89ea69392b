#include "federation/watch_filter.h"

#include "auth/policy.h"

namespace gpufed {

ChangeCursor WatchResumePoint(Timestamp resume_after) {
  return ChangeCursor{.time = resume_after - kWatchResumeOverlap, .id = 0};
}

WatchVerdict WatchFilter::Offer(const WorkloadEvent& e) {
  if (ended_) return {};
  if (workload_ != 0 && e.workload.id != workload_) return {};
  if (!auth::Allows(who_, auth::Permission::kWorkloadsRead,
                    {e.workload.spec.tenant, e.workload.spec.project}))
    return {};
  if (workload_ == 0) return {.deliver = true, .end = false};
  // The workload as it was read when the Watch started and the events published since may
  // overlap, and a resumed caller has seen versions up to the one it names: never repeat a
  // version or go back to an older one. A version the caller has, in a terminal state, means it
  // has seen the end: nothing more will come.
  if (e.workload.version <= last_version_) {
    if (!IsTerminal(e.workload.state)) return {};
    ended_ = true;
    return {.deliver = false, .end = true};
  }
  last_version_ = e.workload.version;
  ended_ = IsTerminal(e.workload.state);
  return {.deliver = true, .end = ended_};
}

WatchVerdict WatchFilter::OfferResync(const Workload& w) {
  if (workload_ != 0 ||
      !auth::Allows(who_, auth::Permission::kWorkloadsRead, {w.spec.tenant, w.spec.project}))
    return {};
  auto [it, inserted] = resynced_.try_emplace(w.id, w.version);
  if (!inserted) {
    if (it->second >= w.version) return {};
    it->second = w.version;
  }
  return {.deliver = true, .end = false};
}

bool WatchFilter::Superseded(WorkloadId id, uint64_t version) const {
  auto it = resynced_.find(id);
  return it != resynced_.end() && it->second >= version;
}

}  // namespace gpufed
