#ifndef GPUFED_FEDERATION_REQUEST_DEADLINE_H_
#define GPUFED_FEDERATION_REQUEST_DEADLINE_H_

// The deadline of the request the current thread is working for. The transport sets it around
// a call (the RPC's deadline); the stores bound their waits by it — for a database connection
// and, through the statement timeout, for the statement itself — so a call never outlives the
// client's patience. Threads outside a scope have no deadline.

#include "absl/time/time.h"

namespace gpufed {

// Sets the current thread's request deadline for its lifetime (scopes nest). Not movable.
class DeadlineScope {
 public:
  explicit DeadlineScope(absl::Time deadline);
  ~DeadlineScope();
  DeadlineScope(const DeadlineScope&) = delete;
  DeadlineScope& operator=(const DeadlineScope&) = delete;

 private:
  absl::Time previous_;
};

// absl::InfiniteFuture() outside any scope.
absl::Time CurrentDeadline();

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_REQUEST_DEADLINE_H_
