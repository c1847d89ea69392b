#include "federation/request_deadline.h"

namespace gpufed {
namespace {

thread_local absl::Time current_deadline = absl::InfiniteFuture();

}  // namespace

DeadlineScope::DeadlineScope(absl::Time deadline) : previous_(current_deadline) {
  current_deadline = deadline;
}

DeadlineScope::~DeadlineScope() { current_deadline = previous_; }

absl::Time CurrentDeadline() { return current_deadline; }

}  // namespace gpufed
