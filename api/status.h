#ifndef GPUFED_API_STATUS_H_
#define GPUFED_API_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace gpufed::api {

// The one place absl::Status becomes grpc::Status: codes map one to one, the message is kept.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace gpufed::api

#endif  // GPUFED_API_STATUS_H_
