# Domain unit tests: fast, nothing running.
set(UNIT_DIR ${CMAKE_CURRENT_LIST_DIR})
add_executable(federation_unit_tests
  ${UNIT_DIR}/federation/clock_test.cc
  ${UNIT_DIR}/federation/mig_test.cc
  ${UNIT_DIR}/federation/metering_test.cc
  ${UNIT_DIR}/federation/telemetry_test.cc
  ${UNIT_DIR}/federation/usage_report_test.cc
  ${UNIT_DIR}/federation/cost_allocation_test.cc
  ${UNIT_DIR}/federation/idle_guarantee_test.cc
  ${UNIT_DIR}/federation/placement_test.cc
  ${UNIT_DIR}/federation/pool_test.cc
  ${UNIT_DIR}/federation/pool_accounting_test.cc
  ${UNIT_DIR}/federation/pool_report_test.cc
  ${UNIT_DIR}/federation/topology_test.cc
  ${UNIT_DIR}/federation/explain_test.cc
  ${UNIT_DIR}/federation/pending_reason_test.cc
  ${UNIT_DIR}/federation/policy_test.cc
  ${UNIT_DIR}/federation/mig_placement_test.cc
  ${UNIT_DIR}/federation/determinism_test.cc
  ${UNIT_DIR}/federation/decision_digest_test.cc
  ${UNIT_DIR}/federation/validation_test.cc
  ${UNIT_DIR}/federation/routing_test.cc
  ${UNIT_DIR}/federation/routing_property_test.cc
  ${UNIT_DIR}/auth/token_test.cc
  ${UNIT_DIR}/auth/policy_test.cc)
target_link_libraries(federation_unit_tests PRIVATE gpufed_federation gpufed_auth
  GTest::gtest GTest::gtest_main)
gtest_discover_tests(federation_unit_tests PROPERTIES LABELS unit)
# tests/support/status_matchers.h (ASSERT_OK, StatusIs, ...) is built on gMock.
target_link_libraries(federation_unit_tests PRIVATE GTest::gmock)

# The in-memory storage ports (tests/support/memory_store.h), and the use cases, the scheduler and
# the control loop on them with a fake clock. Links no PostgreSQL and no gRPC.
include(${PROJECT_SOURCE_DIR}/tests/support/memory_store.cmake)
add_executable(memory_store_unit_tests ${UNIT_DIR}/support/memory_store_test.cc)
target_link_libraries(memory_store_unit_tests PRIVATE gpufed_test_memory gpufed_federation
  GTest::gmock GTest::gtest GTest::gtest_main)
gtest_discover_tests(memory_store_unit_tests PROPERTIES LABELS unit)
add_executable(federation_use_case_tests ${UNIT_DIR}/federation/control_plane_test.cc
  ${UNIT_DIR}/federation/cluster_identity_test.cc
  ${UNIT_DIR}/federation/scheduler_differential_test.cc
  ${UNIT_DIR}/federation/scheduler_test.cc
  ${UNIT_DIR}/federation/scheduler_window_test.cc
  ${UNIT_DIR}/federation/watch_filter_test.cc
  ${UNIT_DIR}/federation/quota_test.cc
  ${UNIT_DIR}/federation/quota_ledger_test.cc
  ${UNIT_DIR}/federation/reclaim_test.cc
  ${UNIT_DIR}/federation/starvation_test.cc
  ${UNIT_DIR}/federation/quota_property_test.cc
  ${UNIT_DIR}/federation/routing_use_case_test.cc
  ${UNIT_DIR}/federation/metering_use_case_test.cc)
target_link_libraries(federation_use_case_tests PRIVATE gpufed_federation gpufed_test_memory
  GTest::gmock GTest::gtest GTest::gtest_main)
gtest_discover_tests(federation_use_case_tests PROPERTIES LABELS unit)

# The api layer in memory, no server: conversions (convert_test.cc), the watch hub, the metrics,
# the write rate limiter, the request-size check and the queued audit log.
add_executable(api_unit_tests ${UNIT_DIR}/api/convert_test.cc ${UNIT_DIR}/api/watch_hub_test.cc
  ${UNIT_DIR}/api/metrics_test.cc ${UNIT_DIR}/api/rate_limit_test.cc
  ${UNIT_DIR}/api/queued_audit_log_test.cc)
target_link_libraries(api_unit_tests PRIVATE gpufed_api GTest::gmock GTest::gtest GTest::gtest_main)
gtest_discover_tests(api_unit_tests PROPERTIES LABELS unit)

# The cluster CA (auth/cluster_ca.h) with certificates and CSRs made at test time.
include(${PROJECT_SOURCE_DIR}/tests/support/support.cmake)
add_executable(cluster_ca_tests ${UNIT_DIR}/auth/cluster_ca_test.cc)
target_link_libraries(cluster_ca_tests PRIVATE gpufed_auth gpufed_test_certs OpenSSL::Crypto
  GTest::gmock GTest::gtest GTest::gtest_main)
gtest_discover_tests(cluster_ca_tests PROPERTIES LABELS unit)

# JWTs from an identity provider (auth/jwt.h): keys made and tokens signed at test time.
add_executable(jwt_tests ${UNIT_DIR}/auth/jwt_test.cc)
target_link_libraries(jwt_tests PRIVATE gpufed_auth gpufed_test_jwt GTest::gmock GTest::gtest
  GTest::gtest_main)
gtest_discover_tests(jwt_tests PROPERTIES LABELS unit)

# JWTs through the Authenticator (api/authn.h) on the in-memory store: claims and role bindings
# to a principal, and the cache.
add_executable(authn_jwt_tests ${UNIT_DIR}/api/authn_jwt_test.cc)
target_link_libraries(authn_jwt_tests PRIVATE gpufed_api gpufed_test_memory gpufed_test_jwt
  GTest::gmock GTest::gtest GTest::gtest_main)
gtest_discover_tests(authn_jwt_tests PROPERTIES LABELS unit)
