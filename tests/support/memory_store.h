#ifndef GPUFED_TESTS_SUPPORT_MEMORY_STORE_H_
#define GPUFED_TESTS_SUPPORT_MEMORY_STORE_H_

// The in-memory storage ports live in the simulator (sim/memory_store.h), which runs the live
// scheduling code on them; tests name them here as they always did. The audit port in memory
// (MemoryAuditLog) comes with them.
//
// In CMake: include(${PROJECT_SOURCE_DIR}/tests/support/memory_store.cmake) and link
// gpufed_test_memory.

#include "sim/memory_store.h"
#include "tests/support/memory_audit_log.h"  // IWYU pragma: export

namespace gpufed::testing {

using MemoryStore = ::gpufed::sim::MemoryStore;

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_SUPPORT_MEMORY_STORE_H_
