# gpufed_test_memory: the storage ports in memory (tests/support/memory_store.h, which names
# sim/memory_store.h), for domain unit tests that must not need PostgreSQL. Links no libpqxx and
# no gRPC. tests/support/status_matchers.h is header-only (link GTest::gmock). Include this file
# from any tests.cmake that needs it; it defines the library once.
include_guard(GLOBAL)

add_library(gpufed_test_memory INTERFACE)
target_link_libraries(gpufed_test_memory INTERFACE gpufed_sim)
