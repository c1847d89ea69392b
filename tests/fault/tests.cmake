include(${PROJECT_SOURCE_DIR}/tests/support/support.cmake)

# Fault tests: real processes (PostgreSQL, gpufed-server, gpufed-agent) and an injected fault
# each (a frozen agent, a killed server, a restarted database, ...); each checks what the
# operator would see and what must hold after.
add_executable(fault_tests
  ${CMAKE_CURRENT_LIST_DIR}/fault_support.cc
  ${CMAKE_CURRENT_LIST_DIR}/fault_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/spot_reclaim_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/under_load_test.cc)
target_link_libraries(fault_tests PRIVATE gpufed_test_support gpufed_storage gpufed_proto
  PkgConfig::PQXX GTest::gmock GTest::gtest GTest::gtest_main absl::strings absl::time)
add_dependencies(fault_tests gpufed-server gpufed-agent)
gtest_discover_tests(fault_tests PROPERTIES LABELS fault TIMEOUT 300 DISCOVERY_TIMEOUT 60)
