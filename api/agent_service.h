#ifndef GPUFED_API_AGENT_SERVICE_H_
#define GPUFED_API_AGENT_SERVICE_H_

#include "api/context.h"
#include "gpufed/v1/agent_service.grpc.pb.h"

namespace gpufed::api {

// gpufed.v1.AgentService: one bidirectional stream per agent. The stream is the transport of
// an AgentChannel: messages in are converted and handed to the control plane's agent use cases
// (register, status reports, heartbeats, inventory) on the agent executor, in arrival order;
// what the control plane sends goes out in order, in messages of bounded size.
class AgentServiceImpl final : public v1::AgentService::CallbackService {
 public:
  explicit AgentServiceImpl(ApiContext context) : ctx_(context) {}

  grpc::ServerBidiReactor<v1::AgentMessage, v1::ServerMessage>* Connect(
      grpc::CallbackServerContext* context) override;

 private:
  ApiContext ctx_;
};

}  // namespace gpufed::api

#endif  // GPUFED_API_AGENT_SERVICE_H_
