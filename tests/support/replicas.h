#ifndef GPUFED_TESTS_SUPPORT_REPLICAS_H_
#define GPUFED_TESTS_SUPPORT_REPLICAS_H_

// A replica on whole GPUs, for tests that spell assignments out (the other fields keep their
// defaults: no share, no MIG instance).

#include <string>
#include <utility>
#include <vector>

#include "federation/types.h"

namespace gpufed::testing {

inline ReplicaAssignment ReplicaOn(std::string node, std::vector<std::string> gpu_uuids,
                                   std::vector<uint32_t> gpu_indices) {
  ReplicaAssignment r;
  r.node = std::move(node);
  r.gpu_uuids = std::move(gpu_uuids);
  r.gpu_indices = std::move(gpu_indices);
  return r;
}

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_SUPPORT_REPLICAS_H_
