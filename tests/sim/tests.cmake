# Trace simulator tests (label "sim"): the openb reader on hand-written CSVs, the replay protocol
# on tiny pools with known answers, determinism, and `gpufedctl sim replay` end to end on the
# bundled openb trace.
add_executable(gpufed_sim_test
  ${CMAKE_CURRENT_LIST_DIR}/openb_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/replay_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/sim_cli_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/scenario_test.cc)
target_link_libraries(gpufed_sim_test PRIVATE
  gpufed_sim
  gpufed_cli_lib
  gpufed_test_support
  nlohmann_json::nlohmann_json
  GTest::gmock
  GTest::gtest_main)
target_compile_definitions(gpufed_sim_test PRIVATE
  GPUFED_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
  GPUFEDCTL_PATH="$<TARGET_FILE:gpufedctl>")
# sim_cli_test.cc runs the real binary.
add_dependencies(gpufed_sim_test gpufedctl)
gtest_discover_tests(gpufed_sim_test
  PROPERTIES LABELS sim TIMEOUT 600
  DISCOVERY_TIMEOUT 60)
