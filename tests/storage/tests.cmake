# Storage tests: PgStore, the migrator and the embedded PostgreSQL against a real PostgreSQL 15
# (tests/support starts one per test binary). ctest -L storage
include(${CMAKE_CURRENT_LIST_DIR}/../support/support.cmake)

set(STORAGE_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})
add_executable(gpufed_storage_tests
  ${STORAGE_TEST_DIR}/embedded_postgres_test.cc
  ${STORAGE_TEST_DIR}/json_codec_test.cc
  ${STORAGE_TEST_DIR}/migrator_test.cc
  ${STORAGE_TEST_DIR}/pg_audit_log_test.cc
  ${STORAGE_TEST_DIR}/pg_deadline_test.cc
  ${STORAGE_TEST_DIR}/pg_pool_test.cc
  ${STORAGE_TEST_DIR}/pg_store_clusters_test.cc
  ${STORAGE_TEST_DIR}/pg_store_tenants_test.cc
  ${STORAGE_TEST_DIR}/pg_store_workloads_test.cc
  ${STORAGE_TEST_DIR}/scheduler_test.cc
  ${STORAGE_TEST_DIR}/submit_throughput_test.cc)
target_link_libraries(gpufed_storage_tests PRIVATE gpufed_test_support gpufed_storage
  gpufed_federation PkgConfig::PQXX GTest::gmock GTest::gtest GTest::gtest_main
  absl::strings Threads::Threads)
gtest_discover_tests(gpufed_storage_tests
  PROPERTIES LABELS storage TIMEOUT 300
  DISCOVERY_TIMEOUT 60)

# The storage ports' contract: one suite run against the in-memory store (tests/support) and
# PgStore, so the two cannot drift apart.
include(${CMAKE_CURRENT_LIST_DIR}/../support/memory_store.cmake)
add_executable(store_contract_tests ${STORAGE_TEST_DIR}/store_contract_test.cc)
target_link_libraries(store_contract_tests PRIVATE gpufed_test_memory gpufed_test_support
  gpufed_storage gpufed_federation PkgConfig::PQXX GTest::gmock GTest::gtest GTest::gtest_main
  Threads::Threads)
gtest_discover_tests(store_contract_tests
  PROPERTIES LABELS storage TIMEOUT 300
  DISCOVERY_TIMEOUT 60)
