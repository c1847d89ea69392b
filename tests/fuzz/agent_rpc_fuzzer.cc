// gpufed.v1.AgentService: Connect is one stream of AgentMessages; each input is one message as
// the stream reads it (raw bytes through api::ParseMessage, api/agent_service.cc) and handles it:
// register, status reports, inventory updates, heartbeats — conversion and the checks the use
// cases (federation/agent_use_cases.cc) and stores make before writing.

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "api/convert.h"
#include "federation/validation.h"
#include "gpufed/v1/agent_service.pb.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/rpc_checks.h"
#include "tests/fuzz/rpc_harness.h"

namespace gpufed::fuzz {
namespace {

// The oneof cases handled below; a new kind of agent message fails the start-up check.
const std::set<std::string>& HandledBodies() {
  static const std::set<std::string> handled{"register", "heartbeat", "status", "inventory",
                                             "telemetry"};
  return handled;
}

void HandleMessage(const v1::AgentMessage& m) {
  switch (m.body_case()) {
    case v1::AgentMessage::kRegister:
      (void)CheckRegister(m.register_());
      return;
    case v1::AgentMessage::kStatus:
      for (const v1::WorkloadStatus& s : m.status().updates()) {
        OkOrInvalid(api::AgentReportFromProto(s).status(), "AgentReportFromProto");
      }
      return;
    case v1::AgentMessage::kInventory: {
      // ControlPlane::UpdateInventory, against the cluster the stream registered.
      ClusterInfo info;
      info.name = "fuzz";
      OkOrInvalid(ValidateStorableInventory(info, api::NodesFromProto(m.inventory().inventory())),
                  "ValidateStorableInventory");
      return;
    }
    case v1::AgentMessage::kTelemetry: {
      // ControlPlane::ApplyTelemetry validates again what the conversion accepted.
      absl::StatusOr<std::vector<TelemetryMinute>> minutes = api::TelemetryFromProto(m.telemetry());
      if (OkOrInvalid(minutes.status(), "TelemetryFromProto")) {
        Check(ValidateTelemetry(*minutes).ok(), "TelemetryFromProto accepted invalid minutes");
      }
      return;
    }
    case v1::AgentMessage::kHeartbeat:    // carries only seq and epoch
    case v1::AgentMessage::BODY_NOT_SET:  // INVALID_ARGUMENT, nothing read
      return;
  }
}

const RpcTable& Table() {
  static const RpcTable* table = [] {
    const google::protobuf::OneofDescriptor* body =
        v1::AgentMessage::descriptor()->FindOneofByName("body");
    Check(body != nullptr, "AgentMessage has no oneof body");
    for (int i = 0; i < body->field_count(); ++i) {
      Check(HandledBodies().count(body->field(i)->name()) == 1,
            "AgentMessage." + body->field(i)->name() + ": no fuzz entry (agent_rpc_fuzzer.cc)");
    }
    Check(static_cast<size_t>(body->field_count()) == HandledBodies().size(),
          "agent_rpc_fuzzer.cc handles a message kind AgentMessage lacks");
    std::vector<Rpc> rpcs;
    rpcs.push_back(Unary<v1::AgentMessage>("Connect", HandleMessage));
    return new RpcTable("gpufed.v1.AgentService", std::move(rpcs));
  }();
  return *table;
}

}  // namespace
}  // namespace gpufed::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  gpufed::fuzz::Table();
  return 0;
}

// One method: no selector byte, the whole input is the message.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpufed::fuzz::Table().RunRequest(0, data, size);
  return 0;
}
