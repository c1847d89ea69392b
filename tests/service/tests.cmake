include(${PROJECT_SOURCE_DIR}/tests/support/support.cmake)

# Service tests: the real server in-process, called through real gRPC channels.
# apply_cli_test.cc drives gpufedctl (in-process) against the real server.
add_executable(service_tests ${CMAKE_CURRENT_LIST_DIR}/service_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/listen_test.cc ${CMAKE_CURRENT_LIST_DIR}/watch_resume_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/apply_cli_test.cc ${CMAKE_CURRENT_LIST_DIR}/audit_service_test.cc)
target_link_libraries(service_tests PRIVATE gpufed_server gpufed_cli_lib gpufed_test_support
  GTest::gtest GTest::gtest_main PkgConfig::PQXX PkgConfig::HTTPLIB)
target_compile_definitions(service_tests PRIVATE GPUFED_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
gtest_discover_tests(service_tests PROPERTIES LABELS service TIMEOUT 300 DISCOVERY_TIMEOUT 60)

# gpufed-server's configuration parsing (server/config.cc): needs nothing running.
add_executable(server_config_tests ${CMAKE_CURRENT_LIST_DIR}/server_config_test.cc)
target_link_libraries(server_config_tests PRIVATE gpufed_server gpufed_test_support GTest::gmock
  GTest::gtest GTest::gtest_main)
gtest_discover_tests(server_config_tests PROPERTIES LABELS service DISCOVERY_TIMEOUT 60)
# tests/support/status_matchers.h (ASSERT_OK, StatusIs, ...) is built on gMock.
target_link_libraries(service_tests PRIVATE GTest::gmock)

# Hostile input through the public API (tests/service/hostile_input_test.cc): every case answers
# INVALID_ARGUMENT naming the field and stores nothing.
add_executable(hostile_input_tests ${CMAKE_CURRENT_LIST_DIR}/hostile_input_test.cc)
target_link_libraries(hostile_input_tests PRIVATE gpufed_server gpufed_test_support GTest::gmock GTest::gtest
  GTest::gtest_main PkgConfig::PQXX)
gtest_discover_tests(hostile_input_tests PROPERTIES LABELS service TIMEOUT 300 DISCOVERY_TIMEOUT 60)

# TLS on the gRPC and HTTP listeners with certificates made at test time: trust, refusal, and
# certificates replaced on disk without a restart (tests/service/tls_test.cc).
add_executable(tls_tests ${CMAKE_CURRENT_LIST_DIR}/tls_test.cc)
target_link_libraries(tls_tests PRIVATE gpufed_server gpufed_cli_lib gpufed_test_support
  gpufed_test_certs GTest::gmock GTest::gtest GTest::gtest_main PkgConfig::HTTPLIB)
target_compile_definitions(tls_tests PRIVATE GPUFED_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
gtest_discover_tests(tls_tests PROPERTIES LABELS service TIMEOUT 300 DISCOVERY_TIMEOUT 60)

# Mutual TLS on the gRPC listener with a cluster CA (tests/service/mtls_test.cc): certificates the
# CA issued get through, other CAs', expired and not-yet-valid ones fail the handshake, a cluster
# certificate is no credential on the user API, and a bad cluster CA stops the server at start.
add_executable(mtls_tests ${CMAKE_CURRENT_LIST_DIR}/mtls_test.cc)
target_link_libraries(mtls_tests PRIVATE gpufed_server gpufed_cli_lib gpufed_test_support
  gpufed_test_certs GTest::gmock GTest::gtest GTest::gtest_main)
gtest_discover_tests(mtls_tests PROPERTIES LABELS service TIMEOUT 300 DISCOVERY_TIMEOUT 60)

# Limits that keep one caller from hurting others (tests/service/limits_test.cc): per-caller write
# rates, the Watch cap per caller, one agent stream per cluster, request sizes, deadline bounds.
add_executable(limits_tests ${CMAKE_CURRENT_LIST_DIR}/limits_test.cc)
target_link_libraries(limits_tests PRIVATE gpufed_server gpufed_test_support GTest::gmock
  GTest::gtest GTest::gtest_main PkgConfig::PQXX PkgConfig::HTTPLIB)
gtest_discover_tests(limits_tests PROPERTIES LABELS service TIMEOUT 300 DISCOVERY_TIMEOUT 60)

# The RBAC matrix (tests/service/rbac_matrix_test.cc): every RPC × role × scope against the
# declared policy (auth/policy.h), and every RPC has a policy.
add_executable(rbac_matrix_tests ${CMAKE_CURRENT_LIST_DIR}/rbac_matrix_test.cc)
target_link_libraries(rbac_matrix_tests PRIVATE gpufed_server gpufed_test_support
  gpufed_test_certs GTest::gmock GTest::gtest GTest::gtest_main)
target_compile_definitions(rbac_matrix_tests PRIVATE GPUFED_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
gtest_discover_tests(rbac_matrix_tests PROPERTIES LABELS service TIMEOUT 300 DISCOVERY_TIMEOUT 60)

# JWTs from an identity provider through a real gRPC channel (tests/service/jwt_test.cc): a
# server given a JWKS accepts its tokens with the role the subject's binding allows, refuses
# forged ones, and re-reads rotated keys.
add_executable(jwt_service_tests ${CMAKE_CURRENT_LIST_DIR}/jwt_test.cc)
target_link_libraries(jwt_service_tests PRIVATE gpufed_server gpufed_test_support gpufed_test_jwt
  GTest::gmock GTest::gtest GTest::gtest_main)
gtest_discover_tests(jwt_service_tests PROPERTIES LABELS service TIMEOUT 300 DISCOVERY_TIMEOUT 60)

# /metrics as Prometheus takes it (tests/service/prometheus_test.cc): `promtool check metrics`
# passes on what the real server serves, and a real Prometheus (Debian's prometheus package,
# started and stopped by the test) scrapes the server and answers a query for one series.
add_executable(prometheus_tests ${CMAKE_CURRENT_LIST_DIR}/prometheus_test.cc)
target_link_libraries(prometheus_tests PRIVATE gpufed_server gpufed_test_support GTest::gmock
  GTest::gtest GTest::gtest_main PkgConfig::HTTPLIB)
gtest_discover_tests(prometheus_tests PROPERTIES LABELS service TIMEOUT 300
  DISCOVERY_TIMEOUT 60)
