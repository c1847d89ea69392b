# Agent tests (label "agent"): topology files, flags, the sim and process backends, the protocol
# loop against a real in-test AgentService on 127.0.0.1, and the gpufed-agent binary.
#
#   ctest --test-dir build -L agent --output-on-failure

set(AGENT_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})

add_library(gpufed_agent_testing STATIC ${AGENT_TEST_DIR}/test_agent_server.cc)
target_link_libraries(gpufed_agent_testing PUBLIC gpufed_proto gpufed_agent_lib
  absl::synchronization absl::time absl::strings)

foreach(name topology flags sim_backend process_backend agent main ledger gpu_health
    spot_reclaim discovery telemetry dcgm_telemetry)
  add_executable(agent_${name}_test ${AGENT_TEST_DIR}/${name}_test.cc)
  target_link_libraries(agent_${name}_test PRIVATE gpufed_agent_lib gpufed_agent_testing
    GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_definitions(agent_${name}_test PRIVATE GPUFED_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  gtest_discover_tests(agent_${name}_test
    TEST_PREFIX "agent."
    DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS agent TIMEOUT 300)
endforeach()

# The DCGM source's test serves recorded pages from a cpp-httplib server of its own.
target_link_libraries(agent_dcgm_telemetry_test PRIVATE PkgConfig::HTTPLIB)

target_compile_definitions(agent_main_test PRIVATE GPUFED_AGENT_BIN="$<TARGET_FILE:gpufed-agent>")
add_dependencies(agent_main_test gpufed-agent)
