#ifndef GPUFED_TESTS_AGENT_TEST_AGENT_SERVER_H_
#define GPUFED_TESTS_AGENT_TEST_AGENT_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gpufed/v1/agent_service.grpc.pb.h"

namespace gpufed::testing {

// A small but real AgentService on 127.0.0.1 for agent tests: it records every stream and
// message, answers Register with Registered (epoch and heartbeat interval configurable),
// optionally acknowledges every status it receives, and lets the test push ServerMessages onto
// the current stream. Thread-safe.
class TestAgentServer {
 public:
  struct StreamLog {
    std::string authorization;  // the request's `authorization` metadata
    std::vector<v1::AgentMessage> messages;
    bool open = true;
  };
  // Everything seen so far, for WaitFor predicates.
  struct Log {
    std::vector<StreamLog> streams;
  };

  // Listens on 127.0.0.1:`port` (0 picks one). Null if the port cannot be bound.
  static std::unique_ptr<TestAgentServer> Start(int port = 0);
  ~TestAgentServer();

  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] std::string address() const;

  // Ends every open stream at once (as a crashing server would) and stops listening.
  void Stop();

  void set_epoch(uint64_t epoch);
  void set_heartbeat_interval(absl::Duration d);
  void set_auto_ack(bool on);
  void set_auto_register(bool on);
  // Registered grants this lease (zero: none), and while renewals are on every heartbeat is
  // answered with a LeaseRenewal of it. Off: the agent's lease runs out as in a partition.
  void set_lease(absl::Duration lease);
  void set_renew_leases(bool on);

  // Sends on the newest open stream, filling seq and epoch. False if there is none or it broke.
  bool Send(v1::ServerMessage msg);

  // Waits until `pred` holds for the log (true) or `timeout` passes (false).
  bool WaitFor(const std::function<bool(const Log&)>& pred,
               absl::Duration timeout = absl::Seconds(20)) const;
  [[nodiscard]] Log Snapshot() const;

 private:
  class Service;
  TestAgentServer() = default;

  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool stopped_ = false;
};

// The statuses of every StatusReport received on stream `s` (Register.known_workloads excluded).
std::vector<v1::WorkloadStatus> StatusesOn(const TestAgentServer::StreamLog& s);
// How often (workload_id, state) was reported in StatusReports across all streams.
int CountReports(const TestAgentServer::Log& log, const std::string& id, v1::WorkloadState state);

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_AGENT_TEST_AGENT_SERVER_H_
