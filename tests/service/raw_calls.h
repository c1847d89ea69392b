#ifndef GPUFED_TESTS_SERVICE_RAW_CALLS_H_
#define GPUFED_TESTS_SERVICE_RAW_CALLS_H_

// Calls made with raw bytes through gRPC's generic stub, for service tests that send what a
// generated stub would not, or read what no generated type of ours describes.

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "grpcpp/channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace gpufed::testing {

inline grpc::ByteBuffer ToByteBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

inline std::string FromByteBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_OK(buffer.Dump(&slices));
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

// A unary call of `method` ("/gpufed.v1.TenantService/CreateTenant") with a request of raw
// bytes, as `token` (none when empty); the response's bytes go to `response` when given.
inline grpc::Status RawUnaryCall(const std::shared_ptr<grpc::Channel>& channel,
                                 const std::string& token, const std::string& method,
                                 const std::string& bytes, std::string* response = nullptr) {
  grpc::GenericStub generic(channel);
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::ByteBuffer request = ToByteBuffer(bytes), reply;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
    done = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (response != nullptr && status.ok()) *response = FromByteBuffer(reply);
  return status;
}

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_SERVICE_RAW_CALLS_H_
