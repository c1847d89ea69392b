# Domain unit tests: fast, nothing running.
set(UNIT_DIR ${CMAKE_CURRENT_LIST_DIR})
add_executable(federation_unit_tests
  ${UNIT_DIR}/federation/mig_test.cc
  ${UNIT_DIR}/federation/placement_test.cc
  ${UNIT_DIR}/federation/pool_test.cc
  ${UNIT_DIR}/federation/pool_accounting_test.cc
  ${UNIT_DIR}/federation/topology_test.cc
  ${UNIT_DIR}/federation/explain_test.cc
  ${UNIT_DIR}/federation/pending_reason_test.cc
  ${UNIT_DIR}/federation/policy_test.cc
  ${UNIT_DIR}/federation/mig_placement_test.cc
  ${UNIT_DIR}/federation/determinism_test.cc
  ${UNIT_DIR}/federation/validation_test.cc
  ${UNIT_DIR}/auth/token_test.cc)
target_link_libraries(federation_unit_tests PRIVATE gpufed_federation gpufed_auth
  GTest::gtest GTest::gtest_main)
gtest_discover_tests(federation_unit_tests PROPERTIES LABELS unit)
