#ifndef GPUFED_TESTS_SERVICE_FAKE_AGENT_H_
#define GPUFED_TESTS_SERVICE_FAKE_AGENT_H_

// The agent side of the protocol driven by hand, so that service tests control each message (the
// agent program has its own end-to-end tests).

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gpufed/v1/agent_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"

namespace gpufed {

// A hand-driven agent stream.
class FakeAgentStream {
 public:
  FakeAgentStream(const std::string& address, const std::string& token)
      : FakeAgentStream(testing::Connect(address), token) {}
  // Over `channel` (a TLS channel presenting a client certificate, say); `token` empty: none.
  FakeAgentStream(const std::shared_ptr<grpc::Channel>& channel, const std::string& token) {
    stub_ = v1::AgentService::NewStub(channel);
    if (!token.empty()) ctx_.AddMetadata("authorization", "Bearer " + token);
    // A message that never comes fails the test instead of hanging it.
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    stream_ = stub_->Connect(&ctx_);
  }
  ~FakeAgentStream() {
    if (finished_) return;
    stream_->WritesDone();
    ctx_.TryCancel();
    stream_->Finish();
  }
  bool Write(v1::AgentMessage m) {
    m.set_seq(++seq_);
    return stream_->Write(m);
  }
  bool Read(v1::ServerMessage* m) { return stream_->Read(m); }
  // Reads until a message with the given body arrives (skipping acks etc.).
  bool ReadUntil(v1::ServerMessage::BodyCase body, v1::ServerMessage* m) {
    while (stream_->Read(m)) {
      if (m->body_case() == body) return true;
    }
    return false;
  }
  grpc::Status Finish() {
    finished_ = true;
    return stream_->Finish();
  }

 private:
  std::unique_ptr<v1::AgentService::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::ServerMessage>> stream_;
  uint64_t seq_ = 0;
  bool finished_ = false;
};

// A registration of `cluster` with `nodes` nodes of `gpus` GPUs of `model`.
inline v1::AgentMessage Registration(const std::string& cluster, int nodes, int gpus,
                                     const std::string& model) {
  v1::AgentMessage m;
  auto* r = m.mutable_register_();
  r->set_cluster(cluster);
  r->mutable_info()->set_provider("onprem");
  for (int n = 0; n < nodes; ++n) {
    auto* node = r->mutable_inventory()->add_nodes();
    node->set_name(absl::StrCat(cluster, "-n", n));
    node->set_schedulable(true);
    for (int g = 0; g < gpus; ++g) {
      auto* gpu = node->add_gpus();
      gpu->set_uuid(absl::StrCat("GPU-", cluster, "-", n, "-", g));
      gpu->set_index(g);
      gpu->set_model(model);
      gpu->set_memory_mib(81559);
      gpu->set_nvlink_domain(absl::StrCat(cluster, "-n", n, "-nvl"));
      gpu->set_healthy(true);
    }
  }
  return m;
}

// An agent stream for `cluster` (a token made by `admin`) that registered `nodes` nodes of
// `gpus` GPUs of `model`; null, with a test failure, if it did not.
inline std::unique_ptr<FakeAgentStream> RegisteredAgent(const std::string& address,
                                                        const std::string& admin,
                                                        const std::string& cluster, int nodes,
                                                        int gpus, const std::string& model) {
  absl::StatusOr<std::string> token = testing::CreateAgentToken(address, admin, cluster);
  EXPECT_OK(token);
  if (!token.ok()) return nullptr;
  auto agent = std::make_unique<FakeAgentStream>(address, *token);
  v1::ServerMessage m;
  if (!agent->Write(Registration(cluster, nodes, gpus, model)) ||
      !agent->ReadUntil(v1::ServerMessage::kRegistered, &m)) {
    ADD_FAILURE() << "agent for " << cluster << " did not register";
    return nullptr;
  }
  return agent;
}

}  // namespace gpufed

#endif  // GPUFED_TESTS_SERVICE_FAKE_AGENT_H_
