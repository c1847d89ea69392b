#ifndef GPUFED_API_LIMITS_H_
#define GPUFED_API_LIMITS_H_

// What one caller may ask of the server (docs/interfaces.md#limits): who "one caller" is, and how
// large a request may be. Write rates are api/rate_limit.h's; stream caps WatchHub's; the
// deadline bound is the server's configuration (ApiContext::max_call_duration).

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "auth/principal.h"
#include "google/protobuf/message.h"

namespace gpufed::api {

// The largest message gRPC takes from anyone, before any handler runs (answered
// RESOURCE_EXHAUSTED by gRPC itself): an agent's inventory of a large cluster (~200 bytes a
// GPU: 100,000 GPUs are ~20 MB). Also the largest the server sends, which is what gpufedctl and
// gpufed-agent accept.
inline constexpr size_t kMaxMessageBytes = size_t{64} << 20;
// A user call's request: a spec's strings are at most 64 KiB together, every other request is
// smaller still.
inline constexpr size_t kMaxRequestBytes = size_t{1} << 20;
// ClusterService.ApplyClusters: up to 4,096 cluster declarations with their price books.
inline constexpr size_t kMaxApplyClustersRequestBytes = size_t{16} << 20;

// The key one caller's limits are kept under: its API token ("token:17"), or its subject when it
// presented none ("subject:alice"). Two tenants' tokens with the same subject are two callers.
std::string CallerKey(const auth::Principal& who);

// The most bytes `request` (a user call's request message) may take on the wire.
size_t MaxRequestBytes(const google::protobuf::Message& request);

// OK when `request` is at most MaxRequestBytes; otherwise INVALID_ARGUMENT naming the field that
// holds most of it, by its path ("spec.run.env: request too large: 10485800 bytes, at most
// 1048576"), or "request" when most of it is in fields this server does not know.
absl::Status CheckRequestSize(const google::protobuf::Message& request);

}  // namespace gpufed::api

#endif  // GPUFED_API_LIMITS_H_
