# Deployment tests (label "deploy"): the systemd units, the example configuration files, and the
# demo that `make demo` runs. Included from tests/CMakeLists.txt.
#
#   ctest --test-dir build -L deploy --output-on-failure

set(GPUFED_DEPLOY_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})
if(CMAKE_RUNTIME_OUTPUT_DIRECTORY)
  set(GPUFED_DEPLOY_BIN_DIR ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
else()
  set(GPUFED_DEPLOY_BIN_DIR ${CMAKE_BINARY_DIR}/bin)
endif()

# The example YAML files hold exactly the keys docs/interfaces.md documents (yaml-cpp, the
# parser the programs use). Needs nothing running.
add_executable(deploy_example_config_test ${GPUFED_DEPLOY_TEST_DIR}/example_config_test.cc)
target_compile_definitions(deploy_example_config_test
                           PRIVATE GPUFED_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
target_link_libraries(deploy_example_config_test
                      PRIVATE yaml-cpp absl::strings GTest::gtest GTest::gtest_main)
gtest_discover_tests(deploy_example_config_test TEST_PREFIX "deploy." PROPERTIES LABELS deploy)

# systemd-analyze verify + security on both units, with ExecStart pointed at the built programs,
# plus a canary proving verify rejects a broken unit on this machine.
add_test(NAME deploy.systemd_units
         COMMAND ${GPUFED_DEPLOY_TEST_DIR}/verify_units.sh ${PROJECT_SOURCE_DIR}
                 ${GPUFED_DEPLOY_BIN_DIR})
set_tests_properties(deploy.systemd_units PROPERTIES LABELS deploy TIMEOUT 120)

# The real server and agent started from the example files, as the units start them; clean stop
# on SIGTERM.
add_test(NAME deploy.example_configs
         COMMAND ${GPUFED_DEPLOY_TEST_DIR}/example_configs.sh ${PROJECT_SOURCE_DIR}
                 ${GPUFED_DEPLOY_BIN_DIR})
set_tests_properties(deploy.example_configs PROPERTIES LABELS deploy TIMEOUT 400)

# scripts/demo.sh end to end on free ports: server, embedded PostgreSQL, three simulated
# clusters, a mixed batch that must all succeed, clean shutdown.
add_test(NAME deploy.demo
         COMMAND ${GPUFED_DEPLOY_TEST_DIR}/demo_test.sh ${PROJECT_SOURCE_DIR}
                 ${GPUFED_DEPLOY_BIN_DIR})
set_tests_properties(deploy.demo PROPERTIES LABELS deploy TIMEOUT 600)
