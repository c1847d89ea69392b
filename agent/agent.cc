#include "agent/agent.h"

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "agent/spot_reclaim.h"
#include "federation/mig.h"
#include "federation/status_macros.h"
#include "federation/types.h"
#include "spdlog/spdlog.h"

namespace gpufed::agent {
namespace {

using google::protobuf::util::TimeUtil;

constexpr int kMaxMessageBytes = 64 << 20;
// gRPC servers by default refuse client pings more often than every 5 minutes on a stream that
// carries no server data; an idle cluster's stream only carries our heartbeats, so a shorter
// keepalive would earn a GOAWAY. Dead peers are still found sooner: gRPC sets TCP_USER_TIMEOUT
// to the keepalive timeout, and the heartbeats keep unacknowledged data in flight.
constexpr int kKeepaliveTimeMs = 300'000;
constexpr int kKeepaliveTimeoutMs = 20'000;
// How long the reader waits for the sender to notice a finished stream before cancelling it.
constexpr absl::Duration kSenderExitWait = absl::Seconds(2);
constexpr absl::Duration kMinHeartbeat = absl::Milliseconds(10);
// Heartbeats remembered until answered (their answer extends the lease from when they were sent).
constexpr size_t kMaxUnansweredHeartbeats = 64;
// Repeated connection failures are logged at warning level once per this many attempts.
constexpr int kFailureLogEvery = 12;
// A spot reclaim's log line names at most this many workloads.
constexpr size_t kMaxIdsLogged = 20;

bool IsActive(v1::WorkloadState s) {
  return s == v1::WORKLOAD_STATE_PLACED || s == v1::WORKLOAD_STATE_RUNNING;
}

google::protobuf::Timestamp ToProto(absl::Time t) {
  return TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(t));
}

absl::Duration FromProto(const google::protobuf::Duration& d) {
  return absl::Nanoseconds(TimeUtil::DurationToNanoseconds(d));
}

// Whether `d` has passed from `since` to `now` (monotonic readings); `since` min(): never
// happened, so it has.
bool Elapsed(MonotonicTime since, absl::Duration d, MonotonicTime now) {
  return since == MonotonicTime::min() || absl::FromChrono(now - since) >= d;
}

std::string LayoutText(const google::protobuf::RepeatedPtrField<v1::MigInstance>& layout) {
  if (layout.empty()) return "no instances";
  return absl::StrJoin(layout, ",", [](std::string* out, const v1::MigInstance& m) {
    absl::StrAppend(out, m.profile(), "@", m.start());
  });
}

bool SameLayout(const google::protobuf::RepeatedPtrField<v1::MigInstance>& a,
                const google::protobuf::RepeatedPtrField<v1::MigInstance>& b) {
  if (a.size() != b.size()) return false;
  for (int i = 0; i < a.size(); ++i) {
    if (a[i].profile() != b[i].profile() || a[i].start() != b[i].start()) return false;
  }
  return true;
}

// "a, b, c" or "a, b, ... and 7 more": ids for a log line.
std::string IdList(const std::vector<std::string>& ids) {
  if (ids.empty()) return "none";
  if (ids.size() <= kMaxIdsLogged) return absl::StrJoin(ids, ", ");
  return absl::StrCat(absl::StrJoin(ids.begin(), ids.begin() + kMaxIdsLogged, ", "), ", ... and ",
                      ids.size() - kMaxIdsLogged, " more");
}

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// `inventory` without the nodes named in `away`.
v1::Inventory WithoutNodes(const v1::Inventory& inventory, const std::vector<std::string>& away) {
  if (away.empty()) return inventory;
  v1::Inventory out;
  for (const v1::Node& node : inventory.nodes()) {
    if (!Contains(away, node.name())) *out.add_nodes() = node;
  }
  return out;
}

std::string Describe(const grpc::Status& s) {
  // gRPC and Abseil share the code numbering.
  return absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())), ": ",
                      s.error_message());
}

}  // namespace

absl::StatusOr<std::unique_ptr<Agent>> Agent::Create(AgentOptions options, ClusterTopology topology,
                                                     const BackendFactory& make_backend) {
  if (options.server_address.empty()) return absl::InvalidArgumentError("server: required");
  if (options.credentials == nullptr) {
    return absl::InvalidArgumentError("credentials: required (TLS, or explicitly plaintext)");
  }
  if (topology.cluster.empty()) return absl::InvalidArgumentError("topology: no cluster name");
  if (options.initial_backoff <= absl::ZeroDuration() ||
      options.max_backoff < options.initial_backoff) {
    return absl::InvalidArgumentError("backoff: need 0 < initial_backoff <= max_backoff");
  }
  if (options.register_timeout <= absl::ZeroDuration() ||
      options.default_heartbeat_interval <= absl::ZeroDuration() ||
      options.status_resend_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "register_timeout, default_heartbeat_interval, status_resend_interval: must be > 0");
  }
  if (options.max_updates_per_report < 1) {
    return absl::InvalidArgumentError("max_updates_per_report: must be >= 1");
  }
  if (options.telemetry_interval < absl::ZeroDuration() ||
      options.telemetry_interval > absl::Seconds(60)) {
    return absl::InvalidArgumentError("telemetry_interval: must be 0..60s");
  }
  RETURN_IF_ERROR(ValidateSpotReclaimSchedule(options.spot_reclaim));
  if (!make_backend) return absl::InvalidArgumentError("backend: no factory");
  std::unique_ptr<Agent> agent(new Agent(std::move(options), std::move(topology)));
  Agent* self = agent.get();
  if (agent->options_.telemetry != nullptr &&
      agent->options_.telemetry_interval > absl::ZeroDuration()) {
    absl::MutexLock lock(&agent->mu_);
    agent->minutes_ = std::make_unique<MinuteAggregator>(agent->options_.telemetry_interval,
                                                         agent->options_.max_telemetry_minutes);
  }
  ASSIGN_OR_RETURN(agent->backend_,
                   make_backend([self](WorkloadEvent event) { self->OnEvent(std::move(event)); }));
  if (agent->backend_ == nullptr) return absl::InternalError("backend factory returned null");
  if (!agent->options_.state_dir.empty()) {
    std::vector<Ledger::Entry> unfinished;
    ASSIGN_OR_RETURN(std::unique_ptr<Ledger> ledger,
                     Ledger::Open(agent->options_.state_dir, &unfinished));
    absl::MutexLock lock(&agent->mu_);
    agent->ledger_ = std::move(ledger);
    agent->Recover(unfinished);
  }
  return agent;
}

Agent::Agent(AgentOptions options, ClusterTopology topology)
    : options_(std::move(options)),
      clock_(*ClockOrSystem(options_.clock)),
      topology_(std::move(topology)),
      heartbeat_interval_(options_.default_heartbeat_interval),
      inventory_(topology_.inventory),
      rng_(std::random_device{}()) {}

Agent::~Agent() {
  Shutdown();
  // No callback can reach this object once the backend is gone.
  backend_.reset();
}

void Agent::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  if (backend_ != nullptr) backend_->Shutdown();
  absl::MutexLock lock(&mu_);
  const MonotonicTime deadline = After(options_.shutdown_flush_timeout);
  while (registered_ && !stream_done_ && !outbox_.empty()) {
    if (WaitChanged(deadline)) break;
  }
  if (current_context_ != nullptr) current_context_->TryCancel();
}

AgentStats Agent::Stats() const {
  absl::MutexLock lock(&mu_);
  AgentStats s;
  s.registered = registered_;
  s.epoch = epoch_;
  s.registrations = registrations_;
  s.unacked_statuses = outbox_.size();
  s.known_workloads = workloads_.size();
  s.duplicate_assignments = duplicate_assignments_;
  s.repartitions_applied = repartitions_applied_;
  s.inventory_updates_sent = inventory_updates_sent_;
  s.lease_expiries = lease_expiries_;
  s.lease_stops = lease_stops_;
  s.spot_reclaims = spot_reclaims_;
  s.spot_reclaim_stops = spot_reclaim_stops_;
  s.spot_nodes_away = reclaimed_nodes_.size();
  s.telemetry_minutes_sent = telemetry_minutes_sent_;
  s.telemetry_minutes_dropped = minutes_ == nullptr ? 0 : minutes_->dropped();
  return s;
}

void Agent::ReplaceInventory(v1::Inventory inventory) {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_map<std::string, const v1::Gpu*> applied;
  for (const v1::Node& node : inventory_.nodes()) {
    for (const v1::Gpu& g : node.gpus()) applied[g.uuid()] = &g;
  }
  for (v1::Node& node : *inventory.mutable_nodes()) {
    for (v1::Gpu& g : *node.mutable_gpus()) {
      auto it = applied.find(g.uuid());
      if (it == applied.end()) continue;
      g.set_mig_enabled(it->second->mig_enabled());
      *g.mutable_mig_layout() = it->second->mig_layout();
    }
  }
  inventory_ = std::move(inventory);
  inventory_dirty_ = true;
  changed_.SignalAll();
}

v1::Inventory Agent::Inventory() const {
  absl::MutexLock lock(&mu_);
  return WithoutNodes(inventory_, reclaimed_nodes_);
}

v1::Inventory Agent::ReportedInventoryLocked() {
  if (!reclaimed_nodes_.empty()) reclaim_reported_ = true;
  return WithoutNodes(inventory_, reclaimed_nodes_);
}

absl::Duration Agent::Jitter(absl::Duration d) {
  absl::MutexLock lock(&rng_mu_);
  std::uniform_real_distribution<double> fraction(0.5, 1.0);
  return d * fraction(rng_);
}

void Agent::Run() {
  std::thread lease([this] { LeaseLoop(); });
  std::thread spot;
  if (options_.spot_reclaim.enabled()) spot = std::thread([this] { SpotLoop(); });
  std::thread telemetry;
  if (minutes_ != nullptr) telemetry = std::thread([this] { TelemetryLoop(); });
  absl::Duration backoff = options_.initial_backoff;
  int failures = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    grpc::Status status;
    const bool registered = RunStream(&status);
    // ABORTED on a registered stream: the server handed the cluster to another stream (a second
    // agent for the same cluster?). Coming straight back would just take it back and flap.
    const absl::Duration wait =
        Jitter(!registered                                        ? backoff
               : status.error_code() == grpc::StatusCode::ABORTED ? options_.max_backoff
                                                                  : options_.initial_backoff);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    if (registered) {
      backoff = options_.initial_backoff;
      failures = 0;
      spdlog::warn("disconnected from {}: {}; reconnecting", options_.server_address,
                   Describe(status));
    } else {
      ++failures;
      const std::string line =
          absl::StrCat("cannot register with ", options_.server_address, ": ", Describe(status),
                       " (attempt ", failures, "); retrying in ", absl::FormatDuration(wait));
      if (failures == 1 || failures % kFailureLogEvery == 0) {
        spdlog::warn("{}", line);
      } else {
        spdlog::debug("{}", line);
      }
      // A rejected token or inventory will not heal by itself quickly: do not hammer the server.
      switch (status.error_code()) {
        case grpc::StatusCode::UNAUTHENTICATED:
        case grpc::StatusCode::PERMISSION_DENIED:
        case grpc::StatusCode::INVALID_ARGUMENT:
        case grpc::StatusCode::UNIMPLEMENTED:
          backoff = options_.max_backoff;
          break;
        default:
          backoff = std::min(backoff * 2, options_.max_backoff);
      }
    }
    absl::MutexLock lock(&mu_);
    const MonotonicTime deadline = After(wait);
    while (!stopping_) {
      if (WaitChanged(deadline)) break;
    }
  }
  lease.join();
  if (spot.joinable()) spot.join();
  if (telemetry.joinable()) telemetry.join();
  spdlog::info("agent stopped");
}

bool Agent::RunStream(grpc::Status* final_status) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, kMaxMessageBytes);
  args.SetInt(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, kMaxMessageBytes);
  // A fresh subchannel per attempt, so gRPC's own reconnect backoff (up to 2 minutes) never
  // sits under ours.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(options_.server_address, options_.credentials, args);
  auto agent_service = v1::AgentService::NewStub(channel);

  Stream stream;
  stream.context = std::make_shared<grpc::ClientContext>();
  if (!options_.token.empty()) {
    stream.context->AddMetadata("authorization", absl::StrCat("Bearer ", options_.token));
  }
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      *final_status = grpc::Status(grpc::StatusCode::CANCELLED, "shutting down");
      return false;
    }
    current_context_ = stream.context;
    stream_done_ = false;
    sender_exited_ = false;
    registered_ = false;
    seq_ = 0;
  }
  stream.rw = agent_service->Connect(stream.context.get());
  std::thread sender([this, &stream] { SendLoop(&stream); });

  bool registered = false;
  v1::ServerMessage msg;
  while (stream.rw->Read(&msg)) {
    if (!registered) {
      if (!msg.has_registered()) {
        spdlog::error("protocol error: expected Registered from {}, got message case {}",
                      options_.server_address, static_cast<int>(msg.body_case()));
        stream.context->TryCancel();
        break;
      }
      const v1::Registered& reg = msg.registered();
      absl::MutexLock lock(&mu_);
      if (epoch_ != 0 && epoch_ != reg.epoch()) {
        spdlog::info("cluster epoch changed from {} to {}", epoch_, reg.epoch());
      }
      epoch_ = reg.epoch();
      const absl::Duration hb = FromProto(reg.heartbeat_interval());
      heartbeat_interval_ = hb > absl::ZeroDuration() ? std::max(hb, kMinHeartbeat)
                                                      : options_.default_heartbeat_interval;
      registered_ = true;
      ++registrations_;
      registered = true;
      heartbeats_sent_.clear();
      const absl::Duration lease = FromProto(reg.lease());
      lease_ = std::max(lease, absl::ZeroDuration());
      if (lease_ > absl::ZeroDuration()) {
        ExtendLeaseLocked(register_sent_ + absl::ToChronoNanoseconds(lease_));
      } else {
        lease_until_ = MonotonicTime::min();  // a server that grants no lease
        lease_expired_ = false;
      }
      // Everything unacknowledged goes out again, oldest first: the server's handlers are
      // idempotent, and the old stream may have died with any of it in flight.
      send_queue_.clear();
      for (const auto& [order, key] : outbox_order_) {
        outbox_[key].queued = true;
        send_queue_.push_back(key);
      }
      size_t active = 0;
      for (const auto& [id, r] : workloads_) active += IsActive(r.state) ? 1 : 0;
      spdlog::info(
          "connected to {} as cluster {}: epoch {}, heartbeat every {}, {} workload(s) running, "
          "{} status(es) to deliver",
          options_.server_address, topology_.cluster, epoch_,
          absl::FormatDuration(heartbeat_interval_), active, outbox_.size());
      changed_.SignalAll();
      continue;
    }
    Dispatch(msg);
  }

  {
    absl::MutexLock lock(&mu_);
    stream_done_ = true;
    registered_ = false;
    changed_.SignalAll();
    const MonotonicTime deadline = After(kSenderExitWait);
    while (!sender_exited_) {
      if (WaitChanged(deadline)) break;
    }
    // A sender stuck in Write on a half-dead stream needs the call cancelled; otherwise leave
    // the call alone so Finish reports the server's own status.
    if (!sender_exited_) stream.context->TryCancel();
  }
  sender.join();
  *final_status = stream.rw->Finish();
  absl::MutexLock lock(&mu_);
  if (current_context_ == stream.context) current_context_.reset();
  return registered;
}

void Agent::SendLoop(Stream* stream) {
  v1::AgentMessage reg;
  {
    absl::MutexLock lock(&mu_);
    reg = BuildRegister();
    register_sent_ = Mono();
  }
  const bool wrote = stream->rw->Write(reg);

  absl::MutexLock lock(&mu_);
  const MonotonicTime register_deadline = After(options_.register_timeout);
  while (wrote && !stream_done_ && !registered_) {
    if (WaitChanged(register_deadline) && !registered_ && !stream_done_) {
      spdlog::warn("no Registered from {} within {}; redialling", options_.server_address,
                   absl::FormatDuration(options_.register_timeout));
      stream->context->TryCancel();
      break;
    }
  }
  MonotonicTime next_heartbeat = After(heartbeat_interval_);
  const absl::Duration scan_every =
      std::max(options_.status_resend_interval / 2, absl::Milliseconds(10));
  MonotonicTime next_scan = After(scan_every);
  // Without telemetry, never.
  MonotonicTime next_sample =
      minutes_ != nullptr ? After(options_.telemetry_interval) : MonotonicTime::max();
  std::vector<v1::AgentMessage> out;
  while (wrote && !stream_done_ && registered_) {
    const MonotonicTime now = Mono();
    if (now >= next_scan) {
      // Statuses sent but not acknowledged for a while go out again on this stream.
      for (const auto& [order, key] : outbox_order_) {
        OutboxEntry& e = outbox_[key];
        if (!e.queued && Elapsed(e.last_sent, options_.status_resend_interval, now)) {
          e.queued = true;
          send_queue_.push_back(key);
        }
      }
      next_scan = After(scan_every);
    }
    if (inventory_dirty_) {
      // Before statuses: the server should know the new layout before the workloads on it run.
      v1::AgentMessage m;
      m.set_seq(++seq_);
      m.set_epoch(epoch_);
      *m.mutable_inventory()->mutable_inventory() = ReportedInventoryLocked();
      out.push_back(std::move(m));
      inventory_dirty_ = false;
      ++inventory_updates_sent_;
    }
    while (!send_queue_.empty()) {
      v1::AgentMessage m;
      v1::StatusReport* report = m.mutable_status();
      while (!send_queue_.empty() && report->updates_size() < options_.max_updates_per_report) {
        auto it = outbox_.find(send_queue_.front());
        send_queue_.pop_front();
        if (it == outbox_.end() || !it->second.queued) continue;  // acknowledged meanwhile
        it->second.queued = false;
        it->second.last_sent = now;
        *report->add_updates() = it->second.status;
      }
      if (report->updates_size() == 0) break;
      m.set_seq(++seq_);
      m.set_epoch(epoch_);
      out.push_back(std::move(m));
    }
    if (now >= next_heartbeat) {
      v1::AgentMessage m;
      m.set_seq(++seq_);
      m.set_epoch(epoch_);
      m.mutable_heartbeat()->set_running(static_cast<uint32_t>(active_count_));
      // Its answer extends the lease from now; a few unanswered ones are plenty to remember.
      heartbeats_sent_.emplace_back(m.seq(), now);
      if (heartbeats_sent_.size() > kMaxUnansweredHeartbeats) heartbeats_sent_.pop_front();
      out.push_back(std::move(m));
      next_heartbeat = After(heartbeat_interval_);
    }
    if (minutes_ != nullptr && now >= next_sample) {
      next_sample = After(options_.telemetry_interval);
      for (;;) {
        std::vector<v1::GpuMinute> ended =
            minutes_->TakeEnded(Now(), static_cast<size_t>(kMaxTelemetryMinutes));
        if (ended.empty()) break;
        v1::AgentMessage m;
        m.set_seq(++seq_);
        m.set_epoch(epoch_);
        for (v1::GpuMinute& g : ended) *m.mutable_telemetry()->add_minutes() = std::move(g);
        telemetry_minutes_sent_ += ended.size();
        out.push_back(std::move(m));
      }
    }
    if (out.empty()) {
      WaitChanged(std::min({next_heartbeat, next_scan, next_sample}));
      continue;
    }
    // Write without the lock: a slow server must not stall the backend's callbacks.
    mu_.Unlock();
    bool ok = true;
    for (const v1::AgentMessage& m : out) {
      if (!stream->rw->Write(m)) {
        ok = false;
        break;
      }
    }
    out.clear();
    mu_.Lock();
    if (!ok) break;
  }
  sender_exited_ = true;
  changed_.SignalAll();
}

void Agent::Dispatch(const v1::ServerMessage& msg) {
  switch (msg.body_case()) {
    case v1::ServerMessage::kAssign:
      HandleAssign(msg.assign());
      break;
    case v1::ServerMessage::kCancel:
      HandleCancel(msg.cancel());
      break;
    case v1::ServerMessage::kAck:
      HandleAck(msg.ack());
      break;
    case v1::ServerMessage::kLease:
      HandleLease(msg.lease());
      break;
    case v1::ServerMessage::kRegistered:
      spdlog::warn("ignoring a second Registered on the same stream");
      break;
    default:
      // A newer server may send messages this agent does not know yet.
      spdlog::debug("ignoring server message case {}", static_cast<int>(msg.body_case()));
  }
}

void Agent::Recover(const std::vector<Ledger::Entry>& unfinished) {
  const absl::Time now = Now();
  int lost = 0;
  for (const Ledger::Entry& e : unfinished) {
    Record r;
    r.epoch = e.epoch;
    r.attempt = e.attempt;
    r.time = now;
    auto [it, inserted] = workloads_.insert_or_assign(e.workload_id, std::move(r));
    if (e.state == v1::WORKLOAD_STATE_PLACED) {
      // It ran when the agent stopped: its processes were stopped with it (or by the backend
      // when it started), so it is reported ended and never started again.
      it->second.state = v1::WORKLOAD_STATE_RUNNING;
      ++active_count_;
      Finish(e.workload_id, it->second, v1::WORKLOAD_STATE_LOST, 0,
             "the agent restarted while it ran; its run was stopped", now);
      ++lost;
    } else {
      // Ended before the restart, and the server has not acknowledged it yet.
      it->second.state = e.state;
      it->second.exit_code = e.exit_code;
      it->second.message = "ended before the agent restarted";
      ended_.emplace_back(Mono(), e.workload_id);
      Enqueue(StatusOf(e.workload_id, it->second));
    }
  }
  if (!unfinished.empty()) {
    spdlog::warn(
        "ledger {}: {} run(s) the agent's last run left unreported; {} of them were running and "
        "are reported LOST (never started again)",
        ledger_->path(), unfinished.size(), lost);
  }
}

void Agent::TelemetryLoop() {
  absl::MutexLock lock(&mu_);
  MonotonicTime next = After(options_.telemetry_interval);
  while (!stopping_) {
    if (Mono() < next) {
      WaitChanged(next);
      continue;
    }
    next = After(options_.telemetry_interval);
    std::vector<Occupant> occupants = OccupantsLocked();
    if (occupants.empty()) continue;
    const absl::Time at = Now();
    mu_.Unlock();
    const std::vector<GpuMetrics> samples = options_.telemetry->Sample(occupants, at);
    mu_.Lock();
    for (size_t i = 0; i < occupants.size() && i < samples.size(); ++i) {
      minutes_->Add(occupants[i], samples[i], at);
    }
  }
}

std::vector<Occupant> Agent::OccupantsLocked() const {
  absl::flat_hash_map<std::string, const v1::Gpu*> gpus;
  for (const v1::Node& node : inventory_.nodes()) {
    for (const v1::Gpu& g : node.gpus()) gpus[g.uuid()] = &g;
  }
  std::vector<Occupant> occupants;
  for (const auto& [id, r] : workloads_) {
    if (r.state != v1::WORKLOAD_STATE_RUNNING) continue;
    for (const GpuUse& use : r.gpus) {
      Occupant o;
      o.workload_id = id;
      o.attempt = r.attempt;
      o.workload_class = r.workload_class;
      o.gpu_uuid = use.uuid;
      if (auto it = gpus.find(use.uuid); it != gpus.end()) {
        o.gpu_model = it->second->model();
        o.gpu_memory_mib = it->second->memory_mib();
      }
      o.mig_profile = use.mig_profile;
      o.mig_start = use.mig_start;
      o.gpu_milli = use.gpu_milli;
      occupants.push_back(std::move(o));
    }
  }
  return occupants;
}

Agent::Record Agent::NewRecord(const v1::WorkAssignment& a) {
  Record r;
  r.epoch = a.assignment().epoch() != 0 ? a.assignment().epoch() : epoch_;
  r.attempt = a.attempt();
  r.workload_class = a.spec().workload_class();
  r.stop_on_lease = a.stop_when_lease_expires();
  r.time = Now();
  if (ledger_ != nullptr) ledger_->Started(a.workload_id(), r.attempt, r.epoch);
  for (const v1::ReplicaAssignment& ra : a.assignment().replicas()) {
    if (!Contains(r.nodes, ra.node())) r.nodes.push_back(ra.node());
    for (const std::string& uuid : ra.gpu_uuids()) {
      r.gpus.push_back(GpuUse{ra.node(), uuid, ra.mig_profile(), ra.mig_start(), ra.gpu_milli()});
    }
  }
  return r;
}

void Agent::HandleAssign(const v1::AssignBatch& batch) {
  std::vector<const v1::WorkAssignment*> to_start;
  std::vector<std::string> to_cancel;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;  // do not start what Shutdown would kill unreported
    const absl::Time now = Now();
    int stale = 0;
    for (const v1::WorkAssignment& a : batch.assignments()) {
      const std::string& id = a.workload_id();
      if (id.empty()) {
        spdlog::warn("ignoring an assignment without workload_id");
        continue;
      }
      auto it = workloads_.find(id);
      if (it != workloads_.end() && a.attempt() > it->second.attempt) {
        // A later attempt of a workload known from an earlier one (it was moved away and
        // placed here again). The earlier run must end before this one starts.
        if (it->second.held) {
          // The earlier attempt waited for a node a spot reclaim took, and never started.
          it->second.held.reset();
          Finish(id, it->second, v1::WORKLOAD_STATE_CANCELLED, 0,
                 "not started: a later attempt replaced it while its spot node was away", now);
        }
        if (IsActive(it->second.state)) {
          it->second.next = a;
          to_cancel.push_back(id);
          continue;
        }
        workloads_.erase(it);
        it = workloads_.end();
      }
      if (it != workloads_.end()) {
        // Known (running or ended): never start twice. An ended one is re-reported, since
        // the server evidently missed its end.
        ++duplicate_assignments_;
        if (IsTerminal(it->second.state)) {
          it->second.terminal_acked = false;
          Enqueue(StatusOf(id, it->second));
        }
        continue;
      }
      // Placed under another epoch: the server fenced that placement off
      // (docs/domain.md#agents-and-fencing), so it must not run here. Reporting it FAILED (rather
      // than ignoring it) keeps it from sitting PLACED forever on a server that still lists it for
      // this cluster, and frees its GPUs.
      if (a.assignment().epoch() != 0 && a.assignment().epoch() != epoch_) {
        ++stale;
        Record r;
        r.state = v1::WORKLOAD_STATE_UNSPECIFIED;
        r.epoch = a.assignment().epoch();
        r.attempt = a.attempt();
        auto [inserted, ok] = workloads_.emplace(id, std::move(r));
        Finish(id, inserted->second, v1::WORKLOAD_STATE_FAILED, 0,
               absl::StrCat("not started: placed under cluster epoch ", a.assignment().epoch(),
                            " but the cluster is at epoch ", epoch_),
               now);
        continue;
      }
      workloads_.emplace(id, NewRecord(a));
      ++active_count_;
      to_start.push_back(&a);
    }
    if (stale > 0) {
      spdlog::warn("refused {} assignment(s) placed under another epoch than {}", stale, epoch_);
    }
  }
  for (const std::string& id : to_cancel) {
    spdlog::info("workload {}: a later attempt arrived; stopping the earlier run first", id);
    const absl::Status s = backend_->Cancel(id);
    if (!s.ok() && !absl::IsNotFound(s)) spdlog::warn("cancel {}: {}", id, s.ToString());
  }
  // Up to parallel_starts at once (the backend is thread-safe); the batch is done when all
  // are. Layout changes depend on what the batch's earlier work changed: those go in order.
  const bool repartitions = std::any_of(
      to_start.begin(), to_start.end(),
      [](const v1::WorkAssignment* a) { return !a->assignment().repartitions().empty(); });
  const size_t workers =
      repartitions
          ? 1
          : std::min(to_start.size(), static_cast<size_t>(std::max(1, options_.parallel_starts)));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < to_start.size(); i = next++) StartOne(*to_start[i]);
  };
  {
    std::vector<std::jthread> helpers;
    for (size_t w = 1; w < workers; ++w) helpers.emplace_back(work);
    work();
  }
}

void Agent::StartOne(const v1::WorkAssignment& work) {
  {
    absl::MutexLock lock(&mu_);
    auto it = workloads_.find(work.workload_id());
    if (it != workloads_.end() && it->second.lease_stopped && IsActive(it->second.state)) {
      // The lease ran out before it started: it must not start now.
      Finish(work.workload_id(), it->second, v1::WORKLOAD_STATE_LOST, 0,
             "not started: the agent's lease ran out", Now());
      return;
    }
    if (it != workloads_.end() && IsActive(it->second.state)) {
      Record& r = it->second;
      const std::string away = ReclaimedNodesOf(r);
      if (r.reclaimed) {
        // A reclaim took its node before it started.
        Finish(work.workload_id(), r, v1::WORKLOAD_STATE_CANCELLED, 0,
               absl::StrCat("not started: its spot node ",
                            away.empty() ? absl::StrJoin(r.nodes, ",") : away,
                            " was reclaimed by the provider"),
               Now());
        return;
      }
      if (!away.empty()) {
        // Placed before the server heard of the reclaim: it waits for the node (the server
        // will normally cancel it first, to place it elsewhere).
        r.held = work;
        // Not "workload <id> attempt <n>: ...": those lines record starts and ends.
        spdlog::info(
            "spot reclaim {}: workload {} (attempt {}) was placed on spot node {}, which "
            "is away; held until it is back",
            spot_reclaims_, work.workload_id(), r.attempt, away);
        return;
      }
    }
  }
  // MIG layout changes come first: the replicas may need the instances they create.
  const absl::Status repartitioned = ApplyRepartitions(work);
  const absl::Status started = repartitioned.ok() ? backend_->Start(work) : repartitioned;
  if (started.ok()) {
    bool reclaimed = false;
    {
      absl::MutexLock lock(&mu_);
      auto it = workloads_.find(work.workload_id());
      reclaimed = it != workloads_.end() && it->second.reclaimed && IsActive(it->second.state) &&
                  it->second.attempt == work.attempt();
    }
    // A reclaim came while it was starting, and its stop may have missed it: stop it now.
    if (reclaimed) {
      const absl::Status s = backend_->Cancel(work.workload_id());
      if (!s.ok() && !absl::IsNotFound(s)) {
        spdlog::warn("spot reclaim stop {}: {}", work.workload_id(), s.ToString());
      }
    }
    return;
  }
  absl::MutexLock lock(&mu_);
  auto it = workloads_.find(work.workload_id());
  if (it == workloads_.end() || !IsActive(it->second.state)) return;
  if (repartitioned.ok() && absl::IsFailedPrecondition(started)) {
    // The backend is shutting down: forget the id rather than fail the workload, so the
    // server sees it missing and places it again.
    workloads_.erase(it);
    --active_count_;
    return;
  }
  Finish(work.workload_id(), it->second, v1::WORKLOAD_STATE_FAILED, 0,
         absl::StrCat("not started: ", started.message()), Now());
}

absl::Status Agent::ApplyRepartitions(const v1::WorkAssignment& work) {
  const auto& changes = work.assignment().repartitions();
  for (int i = 0; i < changes.size(); ++i) {
    const v1::Repartition& change = changes[i];
    const std::string field = absl::StrCat("assignment.repartitions[", i, "]");
    {
      absl::MutexLock lock(&mu_);
      const v1::Gpu* gpu = nullptr;
      for (const v1::Node& node : inventory_.nodes()) {
        if (node.name() != change.node()) continue;
        for (const v1::Gpu& g : node.gpus()) {
          if (g.uuid() == change.gpu_uuid()) gpu = &g;
        }
      }
      if (gpu == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": no GPU ", change.gpu_uuid(), " on node ", change.node()));
      }
      // Already in effect (a resent assignment, or two assignments carrying the same change).
      if (gpu->mig_enabled() == change.mig_enabled() &&
          SameLayout(gpu->mig_layout(), change.layout())) {
        continue;
      }
      if (change.mig_enabled()) {
        const MigGeometry* geometry = FindMigGeometry(gpu->model());
        if (!gpu->mig_capable() || geometry == nullptr) {
          return absl::InvalidArgumentError(
              absl::StrCat(field, ": GPU ", gpu->uuid(), " (", gpu->model(), ") cannot run MIG"));
        }
        std::vector<MigInstance> layout;
        for (const v1::MigInstance& m : change.layout()) {
          layout.push_back(MigInstance{m.profile(), static_cast<int>(std::min(m.start(), 64u))});
        }
        if (absl::Status valid = ValidateMigLayout(*geometry, layout); !valid.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(field, ".layout: ", valid.message()));
        }
      } else if (!change.layout().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".layout: must be empty when MIG is turned off"));
      }
      // What other active workloads hold on this GPU must survive the change: only MIG
      // instances that the new layout keeps at the same place.
      for (const auto& [id, r] : workloads_) {
        if (id == work.workload_id() || !IsActive(r.state)) continue;
        for (const GpuUse& use : r.gpus) {
          if (use.uuid != change.gpu_uuid() || use.node != change.node()) continue;
          bool kept = false;
          if (change.mig_enabled() && !use.mig_profile.empty()) {
            for (const v1::MigInstance& m : change.layout()) {
              kept = kept || (m.profile() == use.mig_profile && m.start() == use.mig_start);
            }
          }
          if (!kept) {
            return absl::FailedPreconditionError(absl::StrCat(
                field, ": GPU ", change.gpu_uuid(), " on node ", change.node(),
                " is in use by workload ", id, ", which the new layout would take away"));
          }
        }
      }
    }
    // Without the lock: a backend on real GPUs may take a while.
    RETURN_IF_ERROR(backend_->Repartition(change));
    absl::MutexLock lock(&mu_);
    for (v1::Node& node : *inventory_.mutable_nodes()) {
      if (node.name() != change.node()) continue;
      for (v1::Gpu& g : *node.mutable_gpus()) {
        if (g.uuid() != change.gpu_uuid()) continue;
        g.set_mig_enabled(change.mig_enabled());
        *g.mutable_mig_layout() = change.layout();
      }
    }
    ++repartitions_applied_;
    inventory_dirty_ = true;
    changed_.SignalAll();
    spdlog::info("repartitioned GPU {} on node {} for workload {}: MIG {} ({}); reason: {}",
                 change.gpu_uuid(), change.node(), work.workload_id(),
                 change.mig_enabled() ? "on" : "off", LayoutText(change.layout()),
                 change.reason().empty() ? "none given" : change.reason());
  }
  return absl::OkStatus();
}

void Agent::HandleCancel(const v1::CancelBatch& batch) {
  std::vector<std::string> to_cancel;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = Now();
    for (const std::string& id : batch.workload_ids()) {
      if (id.empty()) continue;
      auto it = workloads_.find(id);
      if (it == workloads_.end()) {
        // Never seen: it is cancelled for good, and remembering it means a late assignment for
        // it will not start.
        Record r;
        r.state = v1::WORKLOAD_STATE_UNSPECIFIED;
        r.epoch = epoch_;
        auto [inserted, ok] = workloads_.emplace(id, std::move(r));
        Finish(id, inserted->second, v1::WORKLOAD_STATE_CANCELLED, 0,
               "cancelled before the agent started it", now);
      } else if (IsTerminal(it->second.state)) {
        it->second.terminal_acked = false;
        Enqueue(StatusOf(id, it->second));
      } else if (it->second.held) {
        // Waiting for a spot node that is away: never started, so nothing to stop.
        it->second.held.reset();
        Finish(id, it->second, v1::WORKLOAD_STATE_CANCELLED, 0,
               "cancelled before it started: its spot node was away", now);
      } else {
        to_cancel.push_back(id);
      }
    }
  }
  for (const std::string& id : to_cancel) {
    const absl::Status s = backend_->Cancel(id);
    // NOT_FOUND: its end is already on the way through OnEvent.
    if (!s.ok() && !absl::IsNotFound(s)) {
      spdlog::warn("cancel {}: {}", id, s.ToString());
    }
  }
}

void Agent::HandleAck(const v1::StatusAck& ack) {
  absl::MutexLock lock(&mu_);
  auto remove = [this](const StatusKey& key) {
    auto it = outbox_.find(key);
    if (it == outbox_.end()) return;
    outbox_order_.erase(it->second.order);
    outbox_.erase(it);
  };
  for (const v1::WorkloadStatus& s : ack.statuses()) {
    remove({s.workload_id(), s.state(), s.attempt()});
    if (!IsTerminal(s.state())) continue;
    if (ledger_ != nullptr) ledger_->Acked(s.workload_id(), s.attempt());
    // The end supersedes RUNNING: the server needs no older news of this attempt.
    remove({s.workload_id(), v1::WORKLOAD_STATE_RUNNING, s.attempt()});
    auto it = workloads_.find(s.workload_id());
    if (it != workloads_.end() && it->second.state == s.state() &&
        it->second.attempt == s.attempt()) {
      it->second.terminal_acked = true;
    }
  }
  Forget(Mono());
  changed_.SignalAll();
}

void Agent::HandleLease(const v1::LeaseRenewal& renewal) {
  absl::MutexLock lock(&mu_);
  std::optional<MonotonicTime> sent;
  while (!heartbeats_sent_.empty() && heartbeats_sent_.front().first <= renewal.heartbeat_seq()) {
    if (heartbeats_sent_.front().first == renewal.heartbeat_seq()) {
      sent = heartbeats_sent_.front().second;
    }
    heartbeats_sent_.pop_front();
  }
  const absl::Duration lease = FromProto(renewal.lease());
  if (!sent || lease <= absl::ZeroDuration()) return;  // not a heartbeat of this stream
  lease_ = lease;
  ExtendLeaseLocked(*sent + absl::ToChronoNanoseconds(lease));
}

void Agent::ExtendLeaseLocked(MonotonicTime until) {
  lease_until_ = std::max(lease_until_, until);
  if (lease_expired_ && lease_until_ > Mono()) {
    lease_expired_ = false;
    spdlog::info("lease renewed: the server answers again");
  }
  changed_.SignalAll();
}

void Agent::LeaseLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const bool held = lease_until_ != MonotonicTime::min() && !lease_expired_;
    if (held && Mono() >= lease_until_) {
      lease_expired_ = true;
      ++lease_expiries_;
      std::vector<std::string> stop;
      const absl::Time now = Now();
      for (auto& [id, r] : workloads_) {
        if (IsActive(r.state) && r.stop_on_lease && !r.lease_stopped) {
          r.lease_stopped = true;
          if (r.held) {
            // Held for a spot node that is away: never started, so it simply ends.
            r.held.reset();
            Finish(id, r, v1::WORKLOAD_STATE_LOST, 0, "not started: the agent's lease ran out",
                   now);
            continue;
          }
          stop.push_back(id);
        }
      }
      lease_stops_ += stop.size();
      spdlog::warn(
          "lease ran out: no answer from the server for {}; stopping {} workload(s) it will "
          "place elsewhere",
          absl::FormatDuration(lease_), stop.size());
      // Without the lock: the backend's stop may take a while, and its events take the lock.
      mu_.Unlock();
      for (const std::string& id : stop) {
        const absl::Status s = backend_->Cancel(id);
        if (!s.ok() && !absl::IsNotFound(s)) spdlog::warn("lease stop {}: {}", id, s.ToString());
      }
      mu_.Lock();
      continue;
    }
    WaitChanged(held ? lease_until_ : After(absl::Hours(1)));
  }
}

void Agent::SpotLoop() {
  const absl::Duration every = options_.spot_reclaim.every;
  const MonotonicTime origin = Mono();
  MonotonicTime next = NextSpotReclaim(origin, every, origin);
  bool said_waiting = false;
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const MonotonicTime now = Mono();
    if (reclaimed_nodes_.empty()) {
      if (now < next) {
        WaitChanged(next);
        continue;
      }
      std::vector<std::string> stop = BeginReclaimLocked(now);
      if (reclaimed_nodes_.empty()) {  // no spot node to take
        next = NextSpotReclaim(origin, every, now);
        continue;
      }
      // Without the lock: the backend's stop may take a while, and its events take the lock.
      mu_.Unlock();
      for (const std::string& id : stop) {
        const absl::Status s = backend_->Cancel(id);
        // NOT_FOUND: still starting (StartOne stops it) or already ending by itself.
        if (!s.ok() && !absl::IsNotFound(s)) {
          spdlog::warn("spot reclaim stop {}: {}", id, s.ToString());
        }
      }
      mu_.Lock();
      continue;
    }
    if (now < reclaim_until_) {
      WaitChanged(reclaim_until_);
      continue;
    }
    if (!ReclaimSettledLocked()) {
      // The server has not heard all of it yet (no stream, or acks on their way): the nodes
      // stay away, or it could hear of a stop after their return and take it for a cancel.
      // An ack or a new stream signals changed_.
      if (!said_waiting) {
        spdlog::info(
            "spot reclaim {}: nodes due back; waiting for the server to acknowledge the reclaim "
            "first",
            spot_reclaims_);
        said_waiting = true;
      }
      WaitChanged(After(absl::Hours(1)));
      continue;
    }
    said_waiting = false;
    std::vector<v1::WorkAssignment> held = EndReclaimLocked(now);
    next = NextSpotReclaim(origin, every, now);
    if (held.empty()) continue;
    mu_.Unlock();
    for (const v1::WorkAssignment& work : held) StartOne(work);
    mu_.Lock();
  }
}

std::vector<std::string> Agent::BeginReclaimLocked(MonotonicTime now) {
  std::vector<std::string> nodes = SpotNodes(inventory_);
  if (nodes.empty()) {
    spdlog::info("spot reclaim due, but no node is labelled {}: spot; nothing to take",
                 std::string(kCapacityTypeLabel));
    return {};
  }
  reclaimed_nodes_ = nodes;
  reclaim_began_ = now;
  reclaim_until_ = now + absl::ToChronoNanoseconds(options_.spot_reclaim.duration);
  reclaim_reported_ = false;
  inventory_dirty_ = true;
  std::vector<std::string> stop;
  for (auto& [id, r] : workloads_) {
    if (!IsActive(r.state) || r.held || r.reclaimed) continue;
    if (std::any_of(r.nodes.begin(), r.nodes.end(),
                    [&](const std::string& n) { return Contains(nodes, n); })) {
      r.reclaimed = true;
      stop.push_back(id);
    }
  }
  std::sort(stop.begin(), stop.end());
  ++spot_reclaims_;
  spot_reclaim_stops_ += stop.size();
  spdlog::info(
      "spot reclaim {}: the provider takes back {} spot node(s) for {}: {}; reporting the "
      "inventory without them and stopping the {} workload(s) on them: {}",
      spot_reclaims_, nodes.size(), absl::FormatDuration(options_.spot_reclaim.duration),
      absl::StrJoin(nodes, ", "), stop.size(), IdList(stop));
  changed_.SignalAll();
  return stop;
}

std::vector<v1::WorkAssignment> Agent::EndReclaimLocked(MonotonicTime now) {
  std::vector<v1::WorkAssignment> held;
  std::vector<std::string> ids;
  for (auto& [id, r] : workloads_) {
    if (!r.held) continue;
    held.push_back(*std::move(r.held));
    r.held.reset();
    ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  spdlog::info(
      "spot reclaim {}: {} spot node(s) back after {}: {}; reporting them again and starting the "
      "{} workload(s) held for them: {}",
      spot_reclaims_, reclaimed_nodes_.size(),
      absl::FormatDuration(absl::FromChrono(now - reclaim_began_)),
      absl::StrJoin(reclaimed_nodes_, ", "), ids.size(), IdList(ids));
  reclaimed_nodes_.clear();
  reclaim_reported_ = false;
  inventory_dirty_ = true;
  changed_.SignalAll();
  return held;
}

bool Agent::ReclaimSettledLocked() const {
  if (!reclaim_reported_) return false;
  return std::none_of(workloads_.begin(), workloads_.end(), [](const auto& entry) {
    const Record& r = entry.second;
    return r.reclaimed && !(IsTerminal(r.state) && r.terminal_acked);
  });
}

std::string Agent::ReclaimedNodesOf(const Record& r) const {
  std::vector<std::string> away;
  for (const std::string& n : r.nodes) {
    if (Contains(reclaimed_nodes_, n)) away.push_back(n);
  }
  return absl::StrJoin(away, ",");
}

void Agent::ClockMoved() {
  absl::MutexLock lock(&mu_);
  changed_.SignalAll();
}

void Agent::OnEvent(WorkloadEvent event) {
  std::optional<v1::WorkAssignment> next;
  {
    absl::MutexLock lock(&mu_);
    auto it = workloads_.find(event.workload_id);
    if (it == workloads_.end()) {
      spdlog::warn("backend reported workload {} that the agent does not know", event.workload_id);
      return;
    }
    Record& r = it->second;
    if (IsTerminal(r.state)) return;  // exactly one end per workload
    if (event.state == v1::WORKLOAD_STATE_RUNNING) {
      if (r.state == v1::WORKLOAD_STATE_RUNNING) return;
      r.state = v1::WORKLOAD_STATE_RUNNING;
      r.time = event.time;
      r.message = std::move(event.message);
      spdlog::info("workload {} attempt {}: RUNNING", event.workload_id, r.attempt);
      Enqueue(StatusOf(event.workload_id, r));
      return;
    }
    if (!IsTerminal(event.state)) return;
    if (r.lease_stopped && event.state == v1::WORKLOAD_STATE_CANCELLED) {
      // Stopped by the agent itself: the server ends the attempt as its cluster's loss.
      event.state = v1::WORKLOAD_STATE_LOST;
      event.message = absl::StrCat("stopped by the agent: its lease ran out (",
                                   absl::FormatDuration(lease_), " without an answer)");
    } else if (r.reclaimed && event.state == v1::WORKLOAD_STATE_CANCELLED) {
      const std::string away = ReclaimedNodesOf(r);
      event.message =
          absl::StrCat("stopped: its spot node ", away.empty() ? absl::StrJoin(r.nodes, ",") : away,
                       " was reclaimed by the provider");
    }
    spdlog::info(
        "workload {} attempt {}: {} {}", event.workload_id, r.attempt,
        std::string(absl::StripPrefix(v1::WorkloadState_Name(event.state), "WORKLOAD_STATE_")),
        event.message);
    Finish(event.workload_id, r, event.state, event.exit_code, std::move(event.message),
           event.time);
    if (!r.next) return;
    next = std::move(r.next);
    r = NewRecord(*next);
    ++active_count_;
  }
  StartOne(*next);
}

void Agent::Finish(const std::string& id, Record& r, v1::WorkloadState state, int32_t exit_code,
                   std::string message, absl::Time time) {
  if (IsActive(r.state)) --active_count_;
  r.gpus.clear();
  r.state = state;
  r.exit_code = exit_code;
  r.message = std::move(message);
  r.time = time;
  r.terminal_acked = false;
  ended_.emplace_back(Mono(), id);
  if (ledger_ != nullptr) ledger_->Ended(id, r.attempt, state, exit_code);
  Enqueue(StatusOf(id, r));
}

void Agent::Forget(MonotonicTime now) {
  size_t budget = ended_.size();  // each entry is looked at once per call
  while (budget-- > 0 && !ended_.empty() &&
         Elapsed(ended_.front().first, options_.finished_retention, now)) {
    std::string id = std::move(ended_.front().second);
    ended_.pop_front();
    auto it = workloads_.find(id);
    if (it == workloads_.end()) continue;
    if (IsTerminal(it->second.state) && it->second.terminal_acked) {
      workloads_.erase(it);
    } else {
      ended_.emplace_back(now, std::move(id));  // still owed to the server: look again later
    }
  }
}

v1::WorkloadStatus Agent::StatusOf(const std::string& id, const Record& r) const {
  v1::WorkloadStatus s;
  s.set_workload_id(id);
  s.set_state(IsActive(r.state) ? v1::WORKLOAD_STATE_RUNNING : r.state);
  s.set_exit_code(r.exit_code);
  s.set_message(r.message);
  *s.mutable_time() = ToProto(r.time);
  s.set_epoch(r.epoch);
  s.set_attempt(r.attempt);
  return s;
}

void Agent::Enqueue(v1::WorkloadStatus status) {
  StatusKey key{status.workload_id(), status.state(), status.attempt()};
  auto [it, inserted] = outbox_.try_emplace(key);
  if (inserted) {
    it->second.order = next_order_++;
    outbox_order_.emplace(it->second.order, key);
  }
  it->second.status = std::move(status);
  if (!it->second.queued) {
    it->second.queued = true;
    send_queue_.push_back(std::move(key));
  }
  changed_.SignalAll();
}

v1::AgentMessage Agent::BuildRegister() {
  v1::AgentMessage m;
  m.set_seq(++seq_);
  // The epoch it last believed in (0 before the first registration) lets the server spot an
  // agent coming back from a fenced epoch.
  m.set_epoch(epoch_);
  v1::Register* reg = m.mutable_register_();
  reg->set_cluster(topology_.cluster);
  *reg->mutable_info() = topology_.info;
  // The current inventory: it replaces whatever the server had, so a pending update is moot.
  *reg->mutable_inventory() = ReportedInventoryLocked();
  inventory_dirty_ = false;
  reg->set_agent_version(options_.agent_version);
  for (const auto& [id, r] : workloads_) {
    // Work a spot reclaim stopped is left out until its end is acknowledged: the server applies
    // Register's statuses before it looks at the inventory, and would take that end for a plain
    // cancel. It goes out from the outbox right after, once the server has evicted the work from
    // the missing node. Work held for a node away was never started.
    if (r.held || (r.reclaimed && IsTerminal(r.state))) continue;
    if (IsActive(r.state) || (IsTerminal(r.state) && !r.terminal_acked)) {
      *reg->add_known_workloads() = StatusOf(id, r);
    }
  }
  return m;
}

}  // namespace gpufed::agent
