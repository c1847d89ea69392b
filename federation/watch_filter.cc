#include "federation/watch_filter.h"

namespace gpufed {

WatchVerdict WatchFilter::Offer(const WorkloadEvent& e) {
  if (ended_) return {};
  if (workload_ != 0 && e.workload.id != workload_) return {};
  if (!who_.CanRead(e.workload.spec.tenant)) return {};
  if (workload_ == 0) return {.deliver = true, .end = false};
  // The workload as it was read when the Watch started and the events published since may
  // overlap: never repeat a version or go back to an older one.
  if (delivered_any_ && e.workload.version <= last_version_) return {};
  delivered_any_ = true;
  last_version_ = e.workload.version;
  ended_ = IsTerminal(e.workload.state);
  return {.deliver = true, .end = ended_};
}

}  // namespace gpufed
