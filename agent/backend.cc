#include "agent/backend.h"

namespace gpufed::agent {

bool IsTerminal(v1::WorkloadState state) {
  switch (state) {
    case v1::WORKLOAD_STATE_SUCCEEDED:
    case v1::WORKLOAD_STATE_FAILED:
    case v1::WORKLOAD_STATE_CANCELLED:
    case v1::WORKLOAD_STATE_PREEMPTED:
    case v1::WORKLOAD_STATE_LOST:
      return true;
    default:
      return false;
  }
}

}  // namespace gpufed::agent
