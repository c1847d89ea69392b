#include "federation/failover.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace gpufed {
namespace {

absl::string_view WhatEnded(AttemptEnd why) {
  switch (why) {
    case AttemptEnd::kClusterLost:
      return "lost its cluster";
    case AttemptEnd::kPreempted:
      return "was preempted";
    case AttemptEnd::kNodeFailure:
      return "lost its node";
  }
  return "ended";
}

}  // namespace

std::string FormatTime(Timestamp t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromChrono(t), absl::UTCTimeZone());
}

Transition EndAttempt(const Workload& w, const AttemptEnded& end) {
  Transition t;
  t.id = w.id;
  t.from = w.state;
  t.on_cluster = end.cluster;
  t.at_attempt = w.attempts;
  t.actor = end.actor;
  t.time = end.at;
  const std::string what =
      absl::StrCat("attempt ", w.attempts, " of ", w.spec.retry.max_attempts, " ",
                   WhatEnded(end.why), " ", end.cluster, " at ", FormatTime(end.at),
                   end.detail.empty() ? "" : absl::StrCat(" (", end.detail, ")"));
  if (w.cancel_requested) {
    t.to = WorkloadState::kCancelled;
    t.reason = absl::StrCat("cancelled: ", what, " before its stop was confirmed");
    t.message = t.reason;
    return t;
  }
  if (w.MayRetry(end.why)) {
    t.to = WorkloadState::kPending;
    // The event row and the pending reason say why; the message is left for how it ends.
    t.reason = absl::StrCat("requeued: ", what);
    if (end.why == AttemptEnd::kClusterLost) {
      PendingReason reason(ReasonCode::kClusterLost);
      reason.Set(figure::kCluster, end.cluster)
          .Set(figure::kLostAt, FormatTime(end.at))
          .Set(figure::kAttempt, int64_t{w.attempts})
          .Set(figure::kMaxAttempts, int64_t{w.spec.retry.max_attempts});
      t.pending_reason = std::move(reason);
    }
    return t;
  }
  t.to = end.why == AttemptEnd::kPreempted ? WorkloadState::kPreempted : WorkloadState::kLost;
  t.reason = absl::StrCat(end.why == AttemptEnd::kPreempted ? "preempted: " : "lost: ", what,
                          "; its retry policy starts no other attempt");
  t.message = t.reason;
  return t;
}

}  // namespace gpufed
