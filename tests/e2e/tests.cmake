include(${PROJECT_SOURCE_DIR}/tests/support/support.cmake)

# End-to-end tests: real processes (PostgreSQL, gpufed-server, gpufed-agent).
add_executable(e2e_tests ${CMAKE_CURRENT_LIST_DIR}/e2e_test.cc)
target_link_libraries(e2e_tests PRIVATE gpufed_test_support gpufed_storage gpufed_proto
  GTest::gmock GTest::gtest GTest::gtest_main absl::strings)
add_dependencies(e2e_tests gpufed-server gpufed-agent)
gtest_discover_tests(e2e_tests PROPERTIES LABELS e2e TIMEOUT 600 DISCOVERY_TIMEOUT 60)
