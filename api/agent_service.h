#ifndef GPUFED_API_AGENT_SERVICE_H_
#define GPUFED_API_AGENT_SERVICE_H_

#include "api/context.h"
#include "gpufed/v1/agent_service.grpc.pb.h"

namespace gpufed::api {

// gpufed.v1.AgentService: one bidirectional stream per agent. The stream is the transport of
// an AgentChannel: messages in are converted and handed to the control plane's agent use cases
// (register, status reports, heartbeats, inventory) on the agent executor, in arrival order;
// what the control plane sends goes out in order, in messages of bounded size.
//
// The stream reads raw bytes and parses them itself: gRPC reports a message that does not parse
// exactly as it reports the agent closing its side (a failed read), and the two must end
// differently — INVALID_ARGUMENT naming the field (api/parse_errors.h) versus OK.
class AgentServiceImpl final
    : public v1::AgentService::WithRawCallbackMethod_Connect<v1::AgentService::Service> {
 public:
  explicit AgentServiceImpl(ApiContext context) : ctx_(context) {}

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Connect(
      grpc::CallbackServerContext* context) override;

 private:
  ApiContext ctx_;
};

}  // namespace gpufed::api

#endif  // GPUFED_API_AGENT_SERVICE_H_
