#ifndef GPUFED_FEDERATION_WATCH_FILTER_H_
#define GPUFED_FEDERATION_WATCH_FILTER_H_

// The domain half of Watch: which committed workload events one caller gets, and when its
// stream ends. The transport (api/workload_service.cc) subscribes to the events first, then
// passes the first event of a one-workload Watch (ControlPlane::WatchSnapshot) and every
// published event through Offer, and writes what it is told to deliver. Queueing, flow control
// and slow readers stay with the transport.

#include <cstdint>
#include <utility>

#include "auth/principal.h"
#include "federation/types.h"

namespace gpufed {

// What to do with one event.
struct WatchVerdict {
  bool deliver = false;  // send it to the caller
  bool end = false;      // after it, end the stream (OK): the watched workload has ended

  bool operator==(const WatchVerdict&) const = default;
};

// Not thread-safe: the caller serialises Offer (the Watch reactor calls it under its own lock),
// so that events are written in the order they were decided in.
class WatchFilter {
 public:
  // `workload` 0: every event of a workload `who` may read (auth::Principal::CanRead), for as
  // long as the caller stays. Otherwise only that workload's events, if `who` may read it: each
  // version at most once, never an older version after a newer one (the first event and the
  // live stream may overlap), and the stream ends with its first terminal state.
  WatchFilter(auth::Principal who, WorkloadId workload)
      : who_(std::move(who)), workload_(workload) {}

  WatchVerdict Offer(const WorkloadEvent& e);

  [[nodiscard]] WorkloadId workload() const { return workload_; }

 private:
  const auth::Principal who_;
  const WorkloadId workload_;
  bool delivered_any_ = false;
  uint64_t last_version_ = 0;
  bool ended_ = false;
};

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_WATCH_FILTER_H_
