#include "tests/agent/test_agent_server.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpufed::testing {

class TestAgentServer::Service final : public v1::AgentService::Service {
 public:
  grpc::Status Connect(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::ServerMessage, v1::AgentMessage>* stream) override {
    std::string auth;
    auto it = context->client_metadata().find("authorization");
    if (it != context->client_metadata().end()) auth.assign(it->second.data(), it->second.size());
    size_t index;
    {
      absl::MutexLock lock(&mu_);
      index = log_.streams.size();
      log_.streams.push_back({auth, {}, true});
    }
    {
      absl::MutexLock lock(&write_mu_);
      current_ = stream;
      server_seq_ = 0;
    }
    v1::AgentMessage msg;
    while (stream->Read(&msg)) {
      bool reply_registered = false;
      bool ack = false;
      bool renew = false;
      absl::Duration lease;
      {
        absl::MutexLock lock(&mu_);
        log_.streams[index].messages.push_back(msg);
        reply_registered = msg.has_register_() && auto_register_;
        ack = msg.has_status() && auto_ack_;
        lease = lease_;
        renew = msg.has_heartbeat() && renew_leases_ && lease > absl::ZeroDuration();
      }
      auto to_proto = [](absl::Duration d) {
        google::protobuf::Duration p;
        p.set_seconds(absl::ToInt64Seconds(d));
        p.set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(d % absl::Seconds(1))));
        return p;
      };
      if (renew) {
        v1::ServerMessage out;
        out.mutable_lease()->set_heartbeat_seq(msg.seq());
        *out.mutable_lease()->mutable_lease() = to_proto(lease);
        WriteOn(stream, std::move(out));
      }
      if (reply_registered) {
        v1::ServerMessage out;
        absl::Duration hb;
        {
          absl::MutexLock lock(&mu_);
          out.mutable_registered()->set_epoch(epoch_);
          hb = heartbeat_;
        }
        out.mutable_registered()->set_cluster(msg.register_().cluster());
        if (lease > absl::ZeroDuration())
          *out.mutable_registered()->mutable_lease() = to_proto(lease);
        out.mutable_registered()->mutable_heartbeat_interval()->set_seconds(
            absl::ToInt64Seconds(hb));
        out.mutable_registered()->mutable_heartbeat_interval()->set_nanos(
            static_cast<int32_t>(absl::ToInt64Nanoseconds(hb % absl::Seconds(1))));
        WriteOn(stream, std::move(out));
      }
      if (ack) {
        v1::ServerMessage out;
        for (const v1::WorkloadStatus& s : msg.status().updates()) {
          v1::WorkloadStatus* a = out.mutable_ack()->add_statuses();
          a->set_workload_id(s.workload_id());
          a->set_state(s.state());
          a->set_attempt(s.attempt());
        }
        WriteOn(stream, std::move(out));
      }
      changed_.SignalAll();
    }
    {
      absl::MutexLock lock(&write_mu_);
      if (current_ == stream) current_ = nullptr;
    }
    absl::MutexLock lock(&mu_);
    log_.streams[index].open = false;
    changed_.SignalAll();
    return grpc::Status::OK;
  }

  bool Send(v1::ServerMessage msg) {
    absl::MutexLock lock(&write_mu_);
    if (current_ == nullptr) return false;
    return WriteLocked(current_, std::move(msg));
  }

  mutable absl::Mutex mu_;
  mutable absl::CondVar changed_;
  Log log_ ABSL_GUARDED_BY(mu_);
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 7;
  absl::Duration heartbeat_ ABSL_GUARDED_BY(mu_) = absl::Milliseconds(100);
  bool auto_ack_ ABSL_GUARDED_BY(mu_) = true;
  bool auto_register_ ABSL_GUARDED_BY(mu_) = true;
  absl::Duration lease_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  bool renew_leases_ ABSL_GUARDED_BY(mu_) = true;

 private:
  void WriteOn(grpc::ServerReaderWriter<v1::ServerMessage, v1::AgentMessage>* stream,
               v1::ServerMessage msg) {
    absl::MutexLock lock(&write_mu_);
    WriteLocked(stream, std::move(msg));
  }

  bool WriteLocked(grpc::ServerReaderWriter<v1::ServerMessage, v1::AgentMessage>* stream,
                   v1::ServerMessage msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
    msg.set_seq(++server_seq_);
    {
      absl::MutexLock lock(&mu_);
      msg.set_epoch(epoch_);
    }
    return stream->Write(msg);
  }

  // One writer at a time per stream; also guards `current_` against the handler returning.
  absl::Mutex write_mu_;
  grpc::ServerReaderWriter<v1::ServerMessage, v1::AgentMessage>* current_
      ABSL_GUARDED_BY(write_mu_) = nullptr;
  uint64_t server_seq_ ABSL_GUARDED_BY(write_mu_) = 0;
};

std::unique_ptr<TestAgentServer> TestAgentServer::Start(int port) {
  std::unique_ptr<TestAgentServer> s(new TestAgentServer());
  s->service_ = std::make_unique<Service>();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(),
                           &s->port_);
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) return nullptr;
  return s;
}

TestAgentServer::~TestAgentServer() { Stop(); }

std::string TestAgentServer::address() const { return absl::StrCat("127.0.0.1:", port_); }

void TestAgentServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  // A deadline of now cancels every open call, as a crash would.
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
}

void TestAgentServer::set_epoch(uint64_t epoch) {
  absl::MutexLock lock(&service_->mu_);
  service_->epoch_ = epoch;
}

void TestAgentServer::set_heartbeat_interval(absl::Duration d) {
  absl::MutexLock lock(&service_->mu_);
  service_->heartbeat_ = d;
}

void TestAgentServer::set_lease(absl::Duration lease) {
  absl::MutexLock lock(&service_->mu_);
  service_->lease_ = lease;
}

void TestAgentServer::set_renew_leases(bool on) {
  absl::MutexLock lock(&service_->mu_);
  service_->renew_leases_ = on;
}

void TestAgentServer::set_auto_ack(bool on) {
  absl::MutexLock lock(&service_->mu_);
  service_->auto_ack_ = on;
}

void TestAgentServer::set_auto_register(bool on) {
  absl::MutexLock lock(&service_->mu_);
  service_->auto_register_ = on;
}

bool TestAgentServer::Send(v1::ServerMessage msg) { return service_->Send(std::move(msg)); }

bool TestAgentServer::WaitFor(const std::function<bool(const Log&)>& pred,
                              absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&service_->mu_);
  while (!pred(service_->log_)) {
    if (service_->changed_.WaitWithDeadline(&service_->mu_, deadline)) {
      return pred(service_->log_);
    }
  }
  return true;
}

TestAgentServer::Log TestAgentServer::Snapshot() const {
  absl::MutexLock lock(&service_->mu_);
  return service_->log_;
}

std::vector<v1::WorkloadStatus> StatusesOn(const TestAgentServer::StreamLog& s) {
  std::vector<v1::WorkloadStatus> out;
  for (const v1::AgentMessage& m : s.messages) {
    if (!m.has_status()) continue;
    out.insert(out.end(), m.status().updates().begin(), m.status().updates().end());
  }
  return out;
}

int CountReports(const TestAgentServer::Log& log, const std::string& id, v1::WorkloadState state) {
  int n = 0;
  for (const TestAgentServer::StreamLog& s : log.streams) {
    for (const v1::WorkloadStatus& st : StatusesOn(s)) {
      if (st.workload_id() == id && st.state() == state) ++n;
    }
  }
  return n;
}

}  // namespace gpufed::testing
