# gpufed_test_support: helpers shared by the storage, service and end-to-end tests (a real
# PostgreSQL per test binary, a fresh migrated database per test). Include this file from any
# tests.cmake that needs it; it defines the library once. postgres_harness.cc asserts with
# tests/support/status_matchers.h, which is built on gMock.
include_guard(GLOBAL)

add_library(gpufed_test_support STATIC
  ${CMAKE_CURRENT_LIST_DIR}/postgres_harness.cc
  ${CMAKE_CURRENT_LIST_DIR}/process_harness.cc
  ${CMAKE_CURRENT_LIST_DIR}/tcp_proxy.cc)
target_link_libraries(gpufed_test_support
  PUBLIC gpufed_storage gpufed_proto gRPC::grpc++ GTest::gtest GTest::gmock absl::status
         absl::statusor absl::synchronization
  PRIVATE PkgConfig::PQXX PkgConfig::HTTPLIB nlohmann_json::nlohmann_json absl::strings)
# The process harness finds topology files and examples in the source tree.
target_compile_definitions(gpufed_test_support PRIVATE GPUFED_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

# Certificates made at test time (tests/support/test_certs.h): a CA and the certificates it
# signs, with OpenSSL's C API.
add_library(gpufed_test_certs STATIC ${CMAKE_CURRENT_LIST_DIR}/test_certs.cc)
target_link_libraries(gpufed_test_certs PUBLIC absl::status absl::statusor absl::time
  PRIVATE OpenSSL::Crypto absl::strings)

# JWTs made at test time (tests/support/test_jwt.h): RSA and EC P-256 keys, their JWKS, and
# tokens signed with cpp-jwt as an identity provider would sign them.
add_library(gpufed_test_jwt STATIC ${CMAKE_CURRENT_LIST_DIR}/test_jwt.cc)
target_link_libraries(gpufed_test_jwt PUBLIC absl::status absl::statusor absl::time
  PRIVATE cpp-jwt::cpp-jwt nlohmann_json::nlohmann_json OpenSSL::Crypto absl::strings)
