# Command-line tests (label "cli"): formats, configuration and output need nothing running; the
# command and app tests drive gpufedctl in-process against a small fake server on a real gRPC
# channel (127.0.0.1, port 0). End-to-end tests against the real server live in tests/e2e.
add_executable(gpufed_cli_test
  ${CMAKE_CURRENT_LIST_DIR}/app_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/clusters_yaml_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/commands_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/config_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/duration_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/fake_gpufed_server.cc
  ${CMAKE_CURRENT_LIST_DIR}/login_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/money_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/output_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/process_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/workload_yaml_test.cc)
target_link_libraries(gpufed_cli_test PRIVATE
  gpufed_cli_lib
  nlohmann_json::nlohmann_json
  GTest::gmock
  GTest::gtest_main)
target_compile_definitions(gpufed_cli_test PRIVATE
  GPUFED_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
  GPUFEDCTL_PATH="$<TARGET_FILE:gpufedctl>")
# process_test.cc runs the real binary.
add_dependencies(gpufed_cli_test gpufedctl)
gtest_discover_tests(gpufed_cli_test
  PROPERTIES LABELS cli
  DISCOVERY_TIMEOUT 60)
