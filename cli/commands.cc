#include "cli/commands.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/civil_time.h"
#include "api/report_csv.h"
#include "api/report_http.h"
#include "cli/duration.h"
#include "cli/enum_names.h"
#include "cli/money.h"
#include "cli/read_file.h"
#include "federation/quota.h"
#include "federation/status_macros.h"
#include "federation/usage_report.h"
#include "grpcpp/client_context.h"

namespace gpufed::cli {
namespace {

// ReplaceFile, its error as the --out-dir option's.
absl::Status WriteWholeFile(const std::string& path, const std::string& content, mode_t mode) {
  if (absl::Status s = ReplaceFile(path, content, mode); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("--out-dir: ", s.message()));
  }
  return absl::OkStatus();
}

// The server's page size cap (ListWorkloadsRequest: 1..1000).
constexpr uint32_t kMaxPageSize = 1000;

std::string FirstNonEmpty(const std::vector<std::string>& candidates) {
  for (const std::string& c : candidates) {
    if (!c.empty()) return c;
  }
  return "";
}

absl::Status Annotate(const absl::Status& status, absl::string_view prefix,
                      absl::string_view suffix) {
  return {status.code(), absl::StrCat(prefix, status.message(), suffix)};
}

// The waits between attempts under a RetryPolicy: from initial_backoff, doubling up to
// max_backoff, each up to half again longer at random so that many clients do not retry in step.
class RetryWaits {
 public:
  explicit RetryWaits(const RetryPolicy& policy)
      : policy_(policy), next_(policy.initial_backoff), jitter_source_(std::random_device{}()) {}

  void Wait() {
    std::uniform_real_distribution<double> jitter(1.0, 1.5);
    absl::SleepFor(next_ * jitter(jitter_source_));
    next_ = std::min(next_ * 2, policy_.max_backoff);
  }
  // The next wait is the first one again.
  void Reset() { next_ = policy_.initial_backoff; }

 private:
  const RetryPolicy& policy_;
  absl::Duration next_;
  std::mt19937 jitter_source_;
};

}  // namespace

absl::StatusOr<v1::WorkloadSpec> SpecFromFlags(const SubmitFlags& flags) {
  v1::WorkloadSpec spec;
  spec.set_name(flags.name);
  spec.set_tenant(flags.tenant);
  spec.set_project(flags.project);
  spec.set_idempotency_key(flags.idempotency_key);
  if (!flags.workload_class.empty()) {
    const std::optional<v1::WorkloadClass> c = ParseWorkloadClass(flags.workload_class);
    if (!c.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--class: expected one of ", absl::StrJoin(WorkloadClassNames(), ", ")));
    }
    spec.set_workload_class(*c);
  }
  spec.set_priority(flags.priority);
  spec.set_replicas(flags.replicas);
  v1::ReplicaResources& per_replica = *spec.mutable_per_replica();
  if (!flags.mig_profile.empty() && flags.gpu_milli.has_value()) {
    return absl::InvalidArgumentError("--mig-profile: cannot be combined with --gpu-milli");
  }
  const char* share_flag = !flags.mig_profile.empty()    ? "--mig-profile"
                           : flags.gpu_milli.has_value() ? "--gpu-milli"
                                                         : nullptr;
  if (share_flag != nullptr && flags.gpus != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gpus: must be 1 (or left out) with ", share_flag, ": a replica takes part of one GPU"));
  }
  if (!flags.mig_profile.empty()) {
    per_replica.set_mig_profile(flags.mig_profile);
  } else if (flags.gpu_milli.has_value()) {
    per_replica.set_gpu_milli(*flags.gpu_milli);
  } else {
    per_replica.set_gpus(flags.gpus);
  }
  per_replica.set_cpu_millis(flags.cpu_millis);
  per_replica.set_memory_mib(flags.memory_mib);
  spec.mutable_gpu_models()->Assign(flags.models.begin(), flags.models.end());
  spec.set_min_gpu_memory_mib(flags.min_gpu_memory_mib);
  if (!flags.topology.empty()) {
    const std::optional<v1::TopologyRequirement> t = ParseTopology(flags.topology);
    if (!t.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--topology: expected one of ", absl::StrJoin(TopologyNames(), ", ")));
    }
    spec.set_topology(*t);
  }
  if (!flags.duration.empty()) {
    absl::StatusOr<absl::Duration> d = ParseDuration(flags.duration);
    if (!d.ok()) return Annotate(d.status(), "--duration: ", "");
    absl::StatusOr<google::protobuf::Duration> proto = DurationToProto(*d);
    if (!proto.ok()) return Annotate(proto.status(), "--duration: ", "");
    *spec.mutable_estimated_duration() = *std::move(proto);
  }
  v1::RunSpec& run = *spec.mutable_run();
  run.set_image(flags.image);
  run.mutable_command()->Assign(flags.command.begin(), flags.command.end());
  for (const std::string& entry : flags.env) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--env: expected NAME=VALUE, got \"", absl::CEscape(entry), "\""));
    }
    (*run.mutable_env())[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  if (flags.sim_fail) run.set_sim_outcome(v1::SIM_OUTCOME_FAIL);
  run.set_sim_exit_code(flags.sim_exit_code);
  return spec;
}

void ApplySubmitDefaults(v1::WorkloadSpec& spec, const std::vector<std::string>& tenants,
                         const std::vector<std::string>& projects) {
  if (spec.tenant().empty()) spec.set_tenant(FirstNonEmpty(tenants));
  if (spec.project().empty()) spec.set_project(FirstNonEmpty(projects));
  if (spec.idempotency_key().empty()) spec.set_idempotency_key(NewIdempotencyKey());
}

std::string NewIdempotencyKey() {
  // random_device reads the kernel's entropy source; uniqueness, not secrecy, is what matters.
  std::random_device device;
  std::string bytes(16, '\0');
  for (size_t i = 0; i < bytes.size(); i += 4) {
    const uint32_t word = device();
    for (size_t j = 0; j < 4; ++j) bytes[i + j] = static_cast<char>((word >> (8 * j)) & 0xff);
  }
  return absl::BytesToHexString(bytes);
}

Commands::Commands(CommandEnv env)
    : env_(std::move(env)),
      workloads_(v1::WorkloadService::NewStub(env_.channel)),
      clusters_(v1::ClusterService::NewStub(env_.channel)),
      tenants_(v1::TenantService::NewStub(env_.channel)),
      quotas_(v1::QuotaService::NewStub(env_.channel)),
      audit_(v1::AuditService::NewStub(env_.channel)),
      reports_(v1::ReportService::NewStub(env_.channel)) {}

void Commands::PrepareContext(grpc::ClientContext& context, bool with_deadline) const {
  if (with_deadline) context.set_deadline(absl::ToChronoTime(absl::Now() + env_.timeout));
  if (!env_.token.empty()) context.AddMetadata("authorization", "Bearer " + env_.token);
}

absl::Status Commands::FromGrpc(const grpc::Status& status) const {
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  std::string message = status.error_message();
  switch (code) {
    case absl::StatusCode::kUnavailable:
      absl::StrAppend(&message, " (server ", env_.server, ")");
      break;
    case absl::StatusCode::kDeadlineExceeded:
      absl::StrAppend(&message, " (timeout ", DurationToText(env_.timeout), "; see --timeout)");
      break;
    case absl::StatusCode::kUnauthenticated:
      if (env_.token.empty()) {
        absl::StrAppend(&message,
                        " (no token was sent: use --token, $GPUFED_TOKEN or the config file)");
      }
      break;
    default:
      break;
  }
  return {code, message};
}

absl::Status Commands::Unary(bool retry_safe,
                             const std::function<grpc::Status(grpc::ClientContext*)>& call,
                             int* attempts) {
  RetryWaits waits(env_.retry);
  for (int attempt = 0;; ++attempt) {
    if (attempts != nullptr) *attempts = attempt + 1;
    grpc::ClientContext context;
    PrepareContext(context, /*with_deadline=*/true);
    const grpc::Status status = call(&context);
    if (status.ok()) return absl::OkStatus();
    if (!retry_safe || status.error_code() != grpc::StatusCode::UNAVAILABLE ||
        attempt >= env_.retry.max_retries) {
      return FromGrpc(status);
    }
    waits.Wait();
  }
}

absl::Status Commands::Submit(const std::vector<WorkloadDocument>& docs) {
  std::vector<std::string> submitted;
  for (const WorkloadDocument& doc : docs) {
    v1::SubmitRequest request;
    *request.mutable_spec() = doc.spec;
    v1::SubmitResponse response;
    // Safe to retry: every spec carries an idempotency key (ApplySubmitDefaults), so a repeat
    // of a call the server did commit returns that workload instead of a second one.
    const bool retry_safe = !doc.spec.idempotency_key().empty();
    int attempts = 0;
    absl::Status status = Unary(
        retry_safe,
        [&](grpc::ClientContext* context) {
          return workloads_->Submit(context, request, &response);
        },
        &attempts);
    if (!status.ok()) {
      if (!submitted.empty()) {
        *env_.err << "note: " << submitted.size() << " workload(s) were submitted before this "
                  << "error: " << absl::StrJoin(submitted, ", ") << "\n";
      }
      std::string suffix;
      if ((absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) && retry_safe) {
        suffix = absl::StrCat(
            "; the server may have accepted it: submitting again with "
            "idempotency key ",
            doc.spec.idempotency_key(), " cannot create a second workload");
      }
      return Annotate(status, doc.origin.empty() ? "" : absl::StrCat(doc.origin, ": "), suffix);
    }
    submitted.push_back(response.workload().id());
    if (env_.format == OutputFormat::kJson) {
      RETURN_IF_ERROR(WriteJson(response, *env_.out));
    } else {
      // After a retry, "not created" most likely means our own earlier attempt committed and
      // only its reply was lost: for the person reading, the workload was created now.
      if (attempts > 1) response.set_created(true);
      WriteSubmitResult(response, *env_.out);
    }
    env_.out->flush();
  }
  return absl::OkStatus();
}

absl::Status Commands::WhatIf(const std::vector<WorkloadDocument>& docs) {
  bool first = true;
  for (const WorkloadDocument& doc : docs) {
    v1::SubmitRequest request;
    *request.mutable_spec() = doc.spec;
    v1::WhatIfResponse response;
    // Safe to retry: a what-if stores nothing.
    absl::Status status = Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
      return workloads_->WhatIf(context, request, &response);
    });
    if (!status.ok()) {
      return Annotate(status, doc.origin.empty() ? "" : absl::StrCat(doc.origin, ": "), "");
    }
    if (env_.format == OutputFormat::kJson) {
      RETURN_IF_ERROR(WriteJson(response, *env_.out));
    } else {
      if (!first) *env_.out << "\n";
      WriteWhatIf(doc.spec, response, *env_.out);
    }
    first = false;
    env_.out->flush();
  }
  return absl::OkStatus();
}

absl::Status Commands::Get(absl::string_view id) {
  v1::GetWorkloadRequest request;
  request.set_id(std::string(id));
  v1::Workload workload;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return workloads_->Get(context, request, &workload);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(workload, *env_.out);
  WriteWorkloadDetail(workload, env_.now(), *env_.out);
  return absl::OkStatus();
}

absl::Status Commands::Explain(absl::string_view id) {
  v1::ExplainRequest request;
  request.set_id(std::string(id));
  v1::ExplainResponse response;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return workloads_->Explain(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  std::ostream& out = *env_.out;
  const v1::Workload& w = response.workload();
  // Names and the explanation come from elsewhere: escaped like every other text we print.
  out << "Workload " << SanitizeForTerminal(w.id()) << " ("
      << SanitizeForTerminal(w.spec().tenant()) << "/" << SanitizeForTerminal(w.spec().project())
      << "/" << SanitizeForTerminal(w.spec().name()) << "): " << WorkloadStateName(w.state())
      << "\n";
  out << SanitizeForTerminal(response.explanation()) << "\n";
  if (response.never_fits()) {
    out << "Waiting will not help: no cluster could hold it even when empty. Change the request "
           "(models, GPUs per replica, topology) or add capacity.\n";
  }
  if (!response.candidates().empty()) {
    out << "\nObjective: " << ObjectiveName(response.objective()) << "\n";
    WriteCandidateTable(response.objective(), response.candidates(), out);
  }
  return absl::OkStatus();
}

absl::Status Commands::Telemetry(absl::string_view id, absl::Duration window) {
  v1::ListWorkloadTelemetryRequest request;
  request.set_workload_id(std::string(id));
  // Up to the next whole minute: the minute under way is included once it arrives.
  const int64_t end = absl::ToUnixSeconds(absl::Now()) / 60 * 60 + 60;
  request.mutable_start_time()->set_seconds(end - absl::ToInt64Seconds(window) - 60);
  request.mutable_end_time()->set_seconds(end);
  request.set_page_size(10000);
  v1::ListWorkloadTelemetryResponse response;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return reports_->ListWorkloadTelemetry(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  auto fraction = [](bool has, double v) {
    return has ? absl::StrFormat("%.2f", v) : std::string("-");
  };
  Table table({"MINUTE", "CLUSTER", "GPU", "SECONDS", "SM", "ENGINE", "TENSOR", "UTIL%", "FB-MIB",
               "WATTS", "ACTIVITY", "FROM", "EFFECTIVE-GPU-S"});
  for (const v1::TelemetryMinuteView& v : response.minutes()) {
    const v1::GpuMinute& m = v.minute();
    std::string gpu = SanitizeForTerminal(m.gpu_uuid());
    if (!m.mig_profile().empty()) {
      absl::StrAppend(&gpu, " ", SanitizeForTerminal(m.mig_profile()), "@", m.mig_start());
    }
    table.AddRow(
        {absl::FormatTime("%Y-%m-%d %H:%M", TimeFromProto(m.minute()), absl::UTCTimeZone()),
         SanitizeForTerminal(v.cluster()), gpu, absl::StrCat(m.covered_seconds()),
         fraction(m.has_sm_active(), m.sm_active()),
         fraction(m.has_gr_engine_active(), m.gr_engine_active()),
         fraction(m.has_pipe_tensor_active(), m.pipe_tensor_active()),
         m.has_gpu_util() ? absl::StrFormat("%.0f", m.gpu_util()) : "-",
         m.has_fb_used_mib() ? absl::StrFormat("%.0f", m.fb_used_mib()) : "-",
         m.has_power_watts() ? absl::StrFormat("%.0f", m.power_watts()) : "-",
         absl::StrFormat("%.2f", v.activity()), v.activity_source(),
         absl::StrFormat("%.1f", static_cast<double>(v.effective_gpu_microseconds()) / 1e6)});
  }
  table.Render(*env_.out);
  if (response.truncated()) *env_.err << "more minutes than shown: ask for fewer --minutes\n";
  return absl::OkStatus();
}

absl::Status Commands::List(const ListOptions& options) {
  v1::ListWorkloadsRequest request;
  request.set_tenant(options.tenant);
  request.set_project(options.project);
  request.set_cluster(options.cluster);
  for (const v1::WorkloadState state : options.states) request.add_states(state);

  v1::ListWorkloadsResponse all;
  std::string page_token;
  while (true) {
    const uint32_t remaining =
        options.limit == 0 ? kMaxPageSize : options.limit - all.workloads_size();
    request.set_page_size(std::min(remaining, kMaxPageSize));
    request.set_page_token(page_token);
    v1::ListWorkloadsResponse page;
    RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
      return workloads_->List(context, request, &page);
    }));
    for (v1::Workload& w : *page.mutable_workloads()) {
      if (options.limit != 0 && static_cast<uint32_t>(all.workloads_size()) >= options.limit) {
        break;  // A server that sends more than asked for; keep the promise of --limit.
      }
      *all.add_workloads() = std::move(w);
    }
    if (page.next_page_token().empty()) break;
    if (page.next_page_token() == page_token) {
      return absl::InternalError("the server returned the same page token twice");
    }
    page_token = page.next_page_token();
    if (options.limit != 0 && static_cast<uint32_t>(all.workloads_size()) >= options.limit) {
      all.set_next_page_token(page_token);
      break;
    }
  }

  if (env_.format == OutputFormat::kJson) return WriteJson(all, *env_.out);
  WriteWorkloadTable(all.workloads(), env_.now(), *env_.out);
  if (!all.next_page_token().empty()) {
    *env_.err << "(showing the first " << all.workloads_size()
              << " workloads; raise --limit, or use --limit 0 for all)\n";
  }
  return absl::OkStatus();
}

absl::Status Commands::Cancel(absl::string_view id, absl::string_view reason) {
  v1::CancelRequest request;
  request.set_id(std::string(id));
  request.set_reason(std::string(reason));
  v1::Workload workload;
  // Not retried: a repeat after a cancel that did commit would answer FAILED_PRECONDITION.
  RETURN_IF_ERROR(Unary(/*retry_safe=*/false, [&](grpc::ClientContext* context) {
    return workloads_->Cancel(context, request, &workload);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(workload, *env_.out);
  WriteCancelResult(workload, *env_.out);
  return absl::OkStatus();
}

absl::Status Commands::Watch(absl::string_view id) {
  v1::WatchRequest request;
  request.set_workload_id(std::string(id));
  RetryWaits waits(env_.retry);
  int reopened = 0;  // since the last event received
  for (;;) {
    grpc::ClientContext context;
    PrepareContext(context, /*with_deadline=*/false);
    std::unique_ptr<grpc::ClientReader<v1::WorkloadEvent>> reader =
        workloads_->Watch(&context, request);

    bool finished = false;     // The watched workload reached a terminal state.
    bool output_gone = false;  // Nobody reads what we print any more.
    bool received = false;
    absl::Status print_status;
    {
      const Interrupt::Handler on_interrupt(env_.interrupt, [&context] { context.TryCancel(); });
      v1::WorkloadEvent event;
      while (reader->Read(&event)) {
        received = true;
        // Where to watch again from if the stream is cut (docs/interfaces.md, "Resuming a
        // Watch"): after this version of the one workload, or after this event of all of them.
        if (!id.empty()) {
          request.set_after_version(event.workload().version());
        } else if (event.has_resume_after()) {
          *request.mutable_resume_after() = event.resume_after();
        }
        if (env_.format == OutputFormat::kJson) {
          print_status = WriteJson(event, *env_.out);
          if (!print_status.ok()) break;
        } else {
          WriteWatchEvent(event, *env_.out);
        }
        env_.out->flush();
        if (!env_.out->good()) {
          output_gone = true;
          break;
        }
        if (!id.empty() && event.workload().id() == id && IsTerminalState(event.to_state())) {
          finished = true;
          break;
        }
      }
      // Finish() waits for the stream to close; stop it ourselves when we are done reading.
      if (finished || output_gone || !print_status.ok()) context.TryCancel();
    }
    const grpc::Status status = reader->Finish();
    if (!print_status.ok()) return print_status;
    if (finished || output_gone) return absl::OkStatus();
    const bool interrupted = env_.interrupt != nullptr && env_.interrupt->triggered();
    if (interrupted && status.error_code() == grpc::StatusCode::CANCELLED) {
      return absl::OkStatus();
    }
    // The server ends a reader that falls behind RESOURCE_EXHAUSTED; a server that went away
    // (restarted, or another replica takes over) is UNAVAILABLE. Both are watched again from the
    // last event received, env.retry.max_retries times in a row at most without a new event.
    if (received) {
      reopened = 0;
      waits.Reset();
    }
    const bool resumable = status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                           status.error_code() == grpc::StatusCode::UNAVAILABLE;
    if (resumable && !interrupted && reopened < env_.retry.max_retries) {
      ++reopened;
      *env_.err << "watch: the stream ended (" << status.error_message()
                << "); watching again from the last event\n";
      waits.Wait();
      continue;
    }
    if (!status.ok()) return FromGrpc(status);
    if (!id.empty()) {
      return absl::UnavailableError(absl::StrCat("the server ended the watch before workload ", id,
                                                 " finished (server ", env_.server, ")"));
    }
    return absl::OkStatus();
  }
}

absl::Status Commands::Clusters(bool include_nodes) {
  v1::ListClustersRequest request;
  // The table's NODES column needs the nodes even when their GPUs are not shown.
  request.set_include_nodes(include_nodes || env_.format == OutputFormat::kTable);
  v1::ListClustersResponse response;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return clusters_->ListClusters(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  WriteClusterTable(response.clusters(), *env_.out);
  if (include_nodes) {
    *env_.out << "\n";
    WriteGpuTable(response.clusters(), *env_.out);
  }
  return absl::OkStatus();
}

absl::Status Commands::Cordon(absl::string_view cluster, absl::string_view node, bool cordoned) {
  v1::CordonRequest request;
  request.set_name(std::string(cluster));
  request.set_node(std::string(node));
  v1::Cluster response;
  // Idempotent on the server: safe to retry.
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return cordoned ? clusters_->Cordon(context, request, &response)
                    : clusters_->Uncordon(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  *env_.out << (node.empty() ? "cluster/" : "node/") << SanitizeForTerminal(std::string(cluster))
            << (node.empty() ? "" : "/") << SanitizeForTerminal(std::string(node))
            << (cordoned ? " cordoned" : " uncordoned") << " (cluster "
            << ClusterStateName(response.state()) << ")\n";
  return absl::OkStatus();
}

absl::Status Commands::DeleteCluster(absl::string_view name) {
  v1::DeleteClusterRequest request;
  request.set_name(std::string(name));
  v1::DeleteClusterResponse response;
  // Not retried: a repeat after a first that committed would say NOT_FOUND.
  RETURN_IF_ERROR(Unary(/*retry_safe=*/false, [&](grpc::ClientContext* context) {
    return clusters_->DeleteCluster(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  *env_.out << "cluster " << SanitizeForTerminal(std::string(name)) << " deleted\n";
  return absl::OkStatus();
}

absl::Status Commands::Drain(absl::string_view cluster, absl::string_view node, bool evict) {
  v1::DrainRequest request;
  request.set_name(std::string(cluster));
  request.set_node(std::string(node));
  request.set_evict(evict);
  v1::DrainResponse response;
  // Idempotent on the server (an eviction already asked for is not asked again): safe to retry.
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return clusters_->Drain(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  *env_.out << (node.empty() ? "cluster/" : "node/") << SanitizeForTerminal(std::string(cluster))
            << (node.empty() ? "" : "/") << SanitizeForTerminal(std::string(node))
            << " draining (cluster " << ClusterStateName(response.cluster().state())
            << "): " << response.evicted_workload_ids_size() << " workload(s) evicted, "
            << response.staying_workload_ids_size() << " staying until they end\n";
  const auto list = [&](absl::string_view what, const auto& ids) {
    if (ids.empty()) return;
    *env_.out << "  " << what << ":";
    for (const std::string& id : ids) *env_.out << " " << SanitizeForTerminal(id);
    *env_.out << "\n";
  };
  list("evicted", response.evicted_workload_ids());
  list("staying", response.staying_workload_ids());
  return absl::OkStatus();
}

absl::Status Commands::Apply(const ClustersFile& file, bool dry_run) {
  v1::ApplyClustersRequest request;
  request.mutable_declarations()->Assign(file.declarations.begin(), file.declarations.end());
  request.set_dry_run(dry_run);
  v1::ApplyClustersResponse response;
  // Declarative: a repeat of a call that did commit changes nothing, so it is safe to retry.
  const absl::Status status = Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return clusters_->ApplyClusters(context, request, &response);
  });
  if (!status.ok()) return PointAtFile(file, status);
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  WriteApplyResult(response, *env_.out);
  return absl::OkStatus();
}

absl::Status Commands::Declarations() {
  v1::ListDeclarationsResponse response;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return clusters_->ListDeclarations(context, v1::ListDeclarationsRequest(), &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  WriteDeclarationTables(response.declarations(), *env_.out);
  return absl::OkStatus();
}

absl::Status Commands::CreateTenant(absl::string_view name, absl::string_view display_name) {
  v1::CreateTenantRequest request;
  request.set_name(std::string(name));
  request.set_display_name(std::string(display_name));
  v1::Tenant tenant;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/false, [&](grpc::ClientContext* context) {
    return tenants_->CreateTenant(context, request, &tenant);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(tenant, *env_.out);
  *env_.out << "tenant/" << SanitizeForTerminal(tenant.name()) << " created\n";
  return absl::OkStatus();
}

absl::Status Commands::DeleteTenant(absl::string_view name) {
  v1::DeleteTenantRequest request;
  request.set_name(std::string(name));
  v1::DeleteTenantResponse response;
  // Not retried: a retry after a delete that committed would answer NOT_FOUND.
  RETURN_IF_ERROR(Unary(/*retry_safe=*/false, [&](grpc::ClientContext* context) {
    return tenants_->DeleteTenant(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  *env_.out << "tenant/" << SanitizeForTerminal(name) << " deleted\n";
  return absl::OkStatus();
}

absl::Status Commands::DeleteProject(absl::string_view tenant, absl::string_view name) {
  v1::DeleteProjectRequest request;
  request.set_tenant(std::string(tenant));
  request.set_name(std::string(name));
  v1::DeleteProjectResponse response;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/false, [&](grpc::ClientContext* context) {
    return tenants_->DeleteProject(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  *env_.out << "project/" << SanitizeForTerminal(tenant) << "/" << SanitizeForTerminal(name)
            << " deleted\n";
  return absl::OkStatus();
}

absl::Status Commands::ListTenants() {
  v1::ListTenantsResponse response;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return tenants_->ListTenants(context, v1::ListTenantsRequest(), &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  WriteTenantTable(response.tenants(), env_.now(), *env_.out);
  return absl::OkStatus();
}

absl::Status Commands::CreateProject(absl::string_view tenant, absl::string_view name) {
  v1::CreateProjectRequest request;
  request.set_tenant(std::string(tenant));
  request.set_name(std::string(name));
  v1::Project project;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/false, [&](grpc::ClientContext* context) {
    return tenants_->CreateProject(context, request, &project);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(project, *env_.out);
  *env_.out << "project/" << SanitizeForTerminal(project.tenant()) << "/"
            << SanitizeForTerminal(project.name()) << " created\n";
  return absl::OkStatus();
}

absl::Status Commands::ListProjects(absl::string_view tenant) {
  v1::ListProjectsRequest request;
  request.set_tenant(std::string(tenant));
  v1::ListProjectsResponse response;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return tenants_->ListProjects(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  WriteProjectTable(response.projects(), env_.now(), *env_.out);
  return absl::OkStatus();
}

absl::Status Commands::SetQuota(const QuotaOptions& options) {
  v1::SetQuotaRequest request;
  v1::Quota* quota = request.mutable_quota();
  quota->set_tenant(options.tenant);
  quota->set_project(options.project);
  quota->set_resource(options.resource);
  int64_t milli = 0;
  RETURN_IF_ERROR(ParseQuotaAmount("--guaranteed", options.guaranteed, &milli));
  quota->set_guaranteed_milli(milli);
  if (!options.limit.empty()) {
    RETURN_IF_ERROR(ParseQuotaAmount("--limit", options.limit, &milli));
    quota->set_limit_milli(milli);
  }
  request.set_overcommit(options.overcommit);
  v1::Quota set;
  // Setting the same quota again changes nothing: safe to retry.
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return quotas_->SetQuota(context, request, &set);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(set, *env_.out);
  google::protobuf::RepeatedPtrField<v1::Quota> one;
  *one.Add() = set;
  WriteQuotaTable(one, *env_.out);
  if (set.overcommitted()) {
    *env_.err << "warning: the guarantees on " << SanitizeForTerminal(set.resource())
              << " add up to more than the pool has\n";
  }
  return absl::OkStatus();
}

absl::Status Commands::GetQuotas(absl::string_view tenant) {
  v1::ListQuotasRequest request;
  request.set_tenant(std::string(tenant));
  v1::ListQuotasResponse response;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return quotas_->ListQuotas(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  WriteQuotaTable(response.quotas(), *env_.out);
  return absl::OkStatus();
}

absl::Status Commands::QuotaUsage(absl::string_view tenant) {
  v1::GetQuotaUsageRequest request;
  request.set_tenant(std::string(tenant));
  v1::GetQuotaUsageResponse response;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return quotas_->GetQuotaUsage(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  WriteQuotaUsageTable(response.usage(), *env_.out);
  if (!response.fair_shares().empty()) {
    *env_.out << "\n";
    WriteFairShareTable(response.fair_shares(), *env_.out);
  }
  return absl::OkStatus();
}

absl::Status Commands::SetShareWeight(const QuotaOptions& options) {
  v1::SetShareWeightRequest request;
  request.mutable_weight()->set_tenant(options.tenant);
  request.mutable_weight()->set_project(options.project);
  request.mutable_weight()->set_weight(options.weight);
  v1::ShareWeight set;
  // Setting the same weight again changes nothing: safe to retry.
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return quotas_->SetShareWeight(context, request, &set);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(set, *env_.out);
  *env_.out << "weight of " << SanitizeForTerminal(set.tenant())
            << (set.project().empty() ? "" : "/") << SanitizeForTerminal(set.project()) << ": "
            << set.weight() << "\n";
  return absl::OkStatus();
}

absl::Status Commands::ListPreemptions(absl::string_view tenant) {
  v1::ListPreemptionsRequest request;
  request.set_tenant(std::string(tenant));
  v1::ListPreemptionsResponse response;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return quotas_->ListPreemptions(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  WritePreemptionTable(response.preemptions(), env_.now(), *env_.out);
  return absl::OkStatus();
}

absl::Status Commands::DeleteQuota(absl::string_view tenant, absl::string_view project,
                                   absl::string_view resource) {
  v1::DeleteQuotaRequest request;
  request.set_tenant(std::string(tenant));
  request.set_project(std::string(project));
  request.set_resource(std::string(resource));
  v1::DeleteQuotaResponse response;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/false, [&](grpc::ClientContext* context) {
    return quotas_->DeleteQuota(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  *env_.out << "quota " << SanitizeForTerminal(tenant) << (project.empty() ? "" : "/")
            << SanitizeForTerminal(project) << " " << SanitizeForTerminal(resource) << " deleted\n";
  return absl::OkStatus();
}

absl::Status Commands::EnrollCluster(absl::string_view cluster, const std::string& csr_pem,
                                     const std::string& out_dir) {
  v1::EnrollClusterRequest request;
  request.set_cluster(std::string(cluster));
  request.set_csr_pem(csr_pem);
  v1::EnrollClusterResponse response;
  // Not retried: each call issues (and records) another certificate.
  RETURN_IF_ERROR(Unary(/*retry_safe=*/false, [&](grpc::ClientContext* context) {
    return clusters_->EnrollCluster(context, request, &response);
  }));
  // The server checked the name (a-z, 0-9, '-'): it is safe in a file name.
  const std::string stem = absl::StrCat(out_dir, "/", cluster);
  const std::string cert_file = stem + ".crt";
  const std::string key_file = stem + ".key";
  const std::string ca_file = absl::StrCat(out_dir, "/cluster-ca.crt");
  // The key first, so that a certificate on disk always has its key beside it.
  if (!response.key_pem().empty()) {
    RETURN_IF_ERROR(WriteWholeFile(key_file, response.key_pem(), 0600));
  }
  RETURN_IF_ERROR(WriteWholeFile(cert_file, response.cert_pem(), 0644));
  RETURN_IF_ERROR(WriteWholeFile(ca_file, response.ca_cert_pem(), 0644));
  if (env_.format == OutputFormat::kJson) {
    response.clear_key_pem();  // it is in the file; never on a terminal
    return WriteJson(response, *env_.out);
  }
  *env_.out << "cluster/" << cluster << " certificate " << response.serial() << " valid until "
            << FormatTimestamp(response.not_after()) << "\n"
            << "  certificate: " << cert_file << "\n";
  if (!response.key_pem().empty()) *env_.out << "  key:         " << key_file << " (mode 0600)\n";
  *env_.out << "  cluster CA:  " << ca_file << "\n"
            << "Start its agent with --cert-file " << cert_file << " --key-file "
            << (response.key_pem().empty() ? "<your key>" : key_file) << "\n";
  return absl::OkStatus();
}

absl::Status Commands::RevokeCluster(absl::string_view cluster) {
  v1::RevokeClusterRequest request;
  request.set_cluster(std::string(cluster));
  v1::RevokeClusterResponse response;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return clusters_->RevokeCluster(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  *env_.out << "cluster/" << SanitizeForTerminal(std::string(cluster))
            << " revoked: " << response.revoked() << " credential(s); its agent is disconnected\n";
  return absl::OkStatus();
}

absl::Status Commands::CreateToken(const TokenOptions& options) {
  v1::CreateTokenRequest request;
  request.set_subject(options.subject);
  request.set_role(options.role);
  request.set_tenant(options.tenant);
  request.set_project(options.project);
  request.set_cluster(options.cluster);
  if (!options.ttl.empty()) {
    absl::StatusOr<absl::Duration> ttl = ParseDuration(options.ttl);
    if (!ttl.ok())
      return absl::InvalidArgumentError(absl::StrCat("--ttl: ", ttl.status().message()));
    ASSIGN_OR_RETURN(*request.mutable_ttl(), DurationToProto(*ttl));
  }
  v1::CreateTokenResponse response;
  // Not retried: each call mints another live secret.
  RETURN_IF_ERROR(Unary(/*retry_safe=*/false, [&](grpc::ClientContext* context) {
    return tenants_->CreateToken(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  *env_.out << response.token() << "\n";
  *env_.err << "token " << response.token_id() << " for " << SanitizeForTerminal(options.subject)
            << " (" << RoleName(options.role)
            << "); store it now, it is not shown again (revoke it with gpufedctl tokens revoke "
            << response.token_id() << ")\n";
  return absl::OkStatus();
}

absl::Status Commands::ListTokens(absl::string_view tenant, absl::string_view project) {
  v1::ListTokensRequest request;
  request.set_tenant(std::string(tenant));
  request.set_project(std::string(project));
  v1::ListTokensResponse response;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return tenants_->ListTokens(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  WriteTokenTable(response.tokens(), env_.now(), *env_.out);
  return absl::OkStatus();
}

absl::Status Commands::RevokeToken(int64_t token_id) {
  v1::RevokeTokenRequest request;
  request.set_token_id(token_id);
  v1::RevokeTokenResponse response;
  // Retry-safe: revoking twice is the same as once.
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return tenants_->RevokeToken(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  *env_.out << "token " << token_id << " revoked\n";
  return absl::OkStatus();
}

namespace {

std::string ScopeName(absl::string_view tenant, absl::string_view project) {
  if (tenant.empty()) return "the platform";
  return project.empty() ? std::string(tenant) : absl::StrCat(tenant, "/", project);
}

}  // namespace

absl::Status Commands::SetMember(absl::string_view subject, v1::Role role, absl::string_view tenant,
                                 absl::string_view project) {
  v1::SetRoleBindingRequest request;
  v1::RoleBinding* binding = request.mutable_binding();
  binding->set_subject(std::string(subject));
  binding->set_role(role);
  binding->set_tenant(std::string(tenant));
  binding->set_project(std::string(project));
  v1::SetRoleBindingResponse response;
  // Retry-safe: setting the same binding twice is the same as once.
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return tenants_->SetRoleBinding(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  *env_.out << SanitizeForTerminal(subject) << " is " << RoleName(role) << " in "
            << SanitizeForTerminal(ScopeName(tenant, project)) << "\n";
  if (!response.lowered_token_ids().empty()) {
    *env_.out << "tokens lowered to " << RoleName(role) << ": "
              << absl::StrJoin(response.lowered_token_ids(), ", ") << "\n";
  }
  return absl::OkStatus();
}

absl::Status Commands::RemoveMember(absl::string_view subject, absl::string_view tenant,
                                    absl::string_view project) {
  v1::DeleteRoleBindingRequest request;
  request.set_subject(std::string(subject));
  request.set_tenant(std::string(tenant));
  request.set_project(std::string(project));
  v1::DeleteRoleBindingResponse response;
  // Not retried: a second attempt after a first that committed would answer NOT_FOUND.
  RETURN_IF_ERROR(Unary(/*retry_safe=*/false, [&](grpc::ClientContext* context) {
    return tenants_->DeleteRoleBinding(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  *env_.out << SanitizeForTerminal(subject) << " removed from "
            << SanitizeForTerminal(ScopeName(tenant, project)) << "\n";
  if (!response.revoked_token_ids().empty()) {
    *env_.out << "tokens revoked: " << absl::StrJoin(response.revoked_token_ids(), ", ") << "\n";
  }
  return absl::OkStatus();
}

absl::Status Commands::ListMembers(absl::string_view tenant, absl::string_view project) {
  v1::ListRoleBindingsRequest request;
  request.set_tenant(std::string(tenant));
  request.set_project(std::string(project));
  v1::ListRoleBindingsResponse response;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return tenants_->ListRoleBindings(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  WriteMemberTable(response.bindings(), env_.now(), *env_.out);
  return absl::OkStatus();
}

namespace {

// RFC 3339, or an age ("2h": that long before `now`), for audit's --since and --until.
absl::StatusOr<google::protobuf::Timestamp> AuditTime(absl::string_view flag,
                                                      absl::string_view text, absl::Time now) {
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &error)) {
    absl::StatusOr<absl::Duration> age = ParseDuration(text);
    if (!age.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": expected RFC 3339 (2026-11-26T10:00:00Z) or an age (2h), got \"", text, "\""));
    }
    t = now - *age;
  }
  google::protobuf::Timestamp out;
  out.set_seconds(absl::ToUnixSeconds(t));
  out.set_nanos(static_cast<int32_t>(
      absl::ToInt64Nanoseconds(t - absl::FromUnixSeconds(absl::ToUnixSeconds(t)))));
  return out;
}

absl::string_view BreakKindName(v1::AuditBreakKind kind) {
  switch (kind) {
    case v1::AUDIT_BREAK_KIND_EDITED:
      return "edited";
    case v1::AUDIT_BREAK_KIND_DELETED:
      return "deleted";
    case v1::AUDIT_BREAK_KIND_INSERTED:
      return "inserted";
    default:
      return "unknown";
  }
}

}  // namespace

absl::Status Commands::AuditList(const AuditOptions& options) {
  v1::ListAuditEventsRequest request;
  request.set_tenant(options.tenant);
  request.set_actor(options.actor);
  request.set_object(options.object);
  if (!options.since.empty()) {
    ASSIGN_OR_RETURN(*request.mutable_since(), AuditTime("--since", options.since, env_.now()));
  }
  if (!options.until.empty()) {
    ASSIGN_OR_RETURN(*request.mutable_until(), AuditTime("--until", options.until, env_.now()));
  }
  v1::ListAuditEventsResponse all;
  while (true) {
    const uint32_t left = options.limit == 0 ? 1000 : options.limit - all.events_size();
    request.set_page_size(static_cast<int32_t>(std::min<uint32_t>(left, 1000)));
    v1::ListAuditEventsResponse page;
    RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
      return audit_->ListAuditEvents(context, request, &page);
    }));
    for (v1::AuditEvent& e : *page.mutable_events()) *all.add_events() = std::move(e);
    all.set_next_page_token(page.next_page_token());
    if (page.next_page_token().empty()) break;
    if (options.limit != 0 && all.events_size() >= static_cast<int>(options.limit)) break;
    request.set_page_token(page.next_page_token());
  }
  if (env_.format == OutputFormat::kJson) return WriteJson(all, *env_.out);
  Table table({"ID", "TIME", "ACTOR", "TENANT/PROJECT", "ACTION", "OBJECT", "OUTCOME", "REASON"});
  for (const v1::AuditEvent& e : all.events()) {
    std::string scope = e.tenant().empty() ? "-" : e.tenant();
    if (!e.project().empty()) absl::StrAppend(&scope, "/", e.project());
    std::string reason = e.reason();
    if (!e.detail().empty()) absl::StrAppend(&reason, reason.empty() ? "" : " | ", e.detail());
    table.AddRow({absl::StrCat(e.id()), FormatTimestamp(e.time()), e.actor(), scope, e.action(),
                  e.object(), e.outcome(), reason});
  }
  table.Render(*env_.out);
  if (!all.next_page_token().empty()) {
    *env_.err << "more audit rows exist (--limit 0 fetches all)\n";
  }
  return absl::OkStatus();
}

absl::Status Commands::AuditVerify() {
  v1::VerifyAuditResponse response;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return audit_->VerifyAudit(context, v1::VerifyAuditRequest(), &response);
  }));
  if (env_.format == OutputFormat::kJson) {
    RETURN_IF_ERROR(WriteJson(response, *env_.out));
  } else {
    if (response.breaks().empty()) {
      *env_.out << "audit chain intact: " << response.rows() << " rows\n";
    } else {
      Table table({"ID", "BROKEN"});
      for (const v1::AuditBreak& b : response.breaks()) {
        table.AddRow({absl::StrCat(b.id()), std::string(BreakKindName(b.kind()))});
      }
      table.Render(*env_.out);
    }
    *env_.out << "head: " << response.head_id() << " " << response.head_hash()
              << " (keep it elsewhere: rows cut from the end show only against it)\n";
  }
  if (!response.breaks().empty()) {
    return absl::DataLossError(
        absl::StrCat("audit chain broken in ", response.breaks_size(), " place(s)"));
  }
  return absl::OkStatus();
}

namespace {

// A report window from --from and --to: empty from is the start of this month (UTC), empty to
// the end of today.
absl::Status ReportWindow(absl::Time now, const std::string& from, const std::string& to,
                          google::protobuf::Timestamp* start, google::protobuf::Timestamp* end) {
  const absl::TimeZone utc = absl::UTCTimeZone();
  const absl::CivilDay today = absl::ToCivilDay(now, utc);
  if (from.empty()) {
    start->set_seconds(absl::ToUnixSeconds(absl::FromCivil(absl::CivilMonth(today), utc)));
  } else {
    ASSIGN_OR_RETURN(*start, api::ReportTimeFromText("--from", from));
  }
  if (to.empty()) {
    end->set_seconds(absl::ToUnixSeconds(absl::FromCivil(today + 1, utc)));
  } else {
    ASSIGN_OR_RETURN(*end, api::ReportTimeFromText("--to", to));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Commands::Report(const ReportOptions& options) {
  v1::GetUsageReportRequest request;
  const absl::TimeZone utc = absl::UTCTimeZone();
  RETURN_IF_ERROR(ReportWindow(env_.now(), options.from, options.to, request.mutable_start_time(),
                               request.mutable_end_time()));
  const std::optional<ReportPeriod> period = ParseReportPeriod(options.period);
  if (!period) {
    return absl::InvalidArgumentError(
        absl::StrCat("--period: whole, day, week or month, got \"", options.period, "\""));
  }
  request.set_period(static_cast<v1::ReportPeriod>(static_cast<int>(*period)));
  for (const std::string& name : options.group_by) {
    const std::optional<ReportDimension> d = ParseReportDimension(name);
    if (!d) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--by: tenant, project, cluster, gpu_model, mig_profile, workload_class or capacity, "
          "got \"",
          name, "\""));
    }
    request.add_group_by(static_cast<v1::ReportDimension>(static_cast<int>(*d) + 1));
  }
  request.set_tenant(options.tenant);
  request.set_project(options.project);
  request.set_cluster(options.cluster);
  v1::GetUsageReportResponse response;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return reports_->GetUsageReport(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  if (env_.format == OutputFormat::kCsv) {
    *env_.out << (options.view == "guarantees" ? api::IdleGuaranteeCsv(response)
                                               : api::UsageReportCsv(request, response));
    return absl::OkStatus();
  }
  std::vector<std::string> headers = {"PERIOD"};
  for (const std::string& name : options.group_by) headers.push_back(absl::AsciiStrToUpper(name));
  for (const char* h : {"GPU-HOURS", "UNPRICED", "COST", "RECORDS", "EFFECTIVE", "UTIL"}) {
    headers.emplace_back(h);
  }
  Table table(std::move(headers));
  constexpr int64_t kGpuMicrosPerHour = 3'600'000'000;
  for (const v1::UsageReportLine& line : response.lines()) {
    std::vector<std::string> row = {
        absl::FormatTime("%Y-%m-%d", TimeFromProto(line.period_start()), utc)};
    for (const std::string& key : line.keys()) row.push_back(key.empty() ? "-" : key);
    row.push_back(api::SixDecimals(line.gpu_microseconds(), kGpuMicrosPerHour));
    row.push_back(api::SixDecimals(line.unpriced_gpu_microseconds(), kGpuMicrosPerHour));
    row.push_back(FormatMicros(line.cost_micros()));
    row.push_back(absl::StrCat(line.records()));
    row.push_back(api::SixDecimals(line.effective_gpu_microseconds(), kGpuMicrosPerHour));
    // Effective over measured GPU-time; "-" with no telemetry, "coarse" where some of it was
    // measured only by the coarse counter (which overstates).
    std::string util = "-";
    if (line.measured_gpu_microseconds() > 0) {
      util =
          absl::StrFormat("%.1f%%", 100.0 * static_cast<double>(line.effective_gpu_microseconds()) /
                                        static_cast<double>(line.measured_gpu_microseconds()));
      if (line.coarse_gpu_microseconds() > 0) absl::StrAppend(&util, " coarse");
    }
    row.push_back(std::move(util));
    table.AddRow(std::move(row));
  }
  if (options.view != "guarantees") table.Render(*env_.out);
  if (response.guarantees().empty() && options.view != "guarantees") return absl::OkStatus();
  // Guaranteed capacity left idle, in the quota's units x hours.
  if (options.view != "guarantees") *env_.out << "\nIdle guarantees\n";
  Table guarantees({"PERIOD", "TENANT", "PROJECT", "RESOURCE", "RESERVED", "IDLE", "IDLE%"});
  for (const v1::IdleGuaranteeLine& g : response.guarantees()) {
    guarantees.AddRow(
        {absl::FormatTime("%Y-%m-%d", TimeFromProto(g.period_start()), utc), g.tenant(),
         g.project().empty() ? "-" : g.project(), g.resource(),
         api::SixDecimals(g.reserved_unit_microseconds(), kGpuMicrosPerHour),
         api::SixDecimals(g.idle_unit_microseconds(), kGpuMicrosPerHour),
         g.reserved_unit_microseconds() > 0
             ? absl::StrFormat("%.1f%%", 100.0 * static_cast<double>(g.idle_unit_microseconds()) /
                                             static_cast<double>(g.reserved_unit_microseconds()))
             : "-"});
  }
  guarantees.Render(*env_.out);
  return absl::OkStatus();
}

absl::Status Commands::Cost(const CostOptions& options) {
  v1::GetCostAllocationRequest request;
  RETURN_IF_ERROR(ReportWindow(env_.now(), options.from, options.to, request.mutable_start_time(),
                               request.mutable_end_time()));
  request.set_cluster(options.cluster);
  if (options.idle_policy == "separate") {
    request.set_idle_policy(v1::IDLE_POLICY_SEPARATE);
  } else if (options.idle_policy == "spread") {
    request.set_idle_policy(v1::IDLE_POLICY_SPREAD);
  } else if (!options.idle_policy.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--idle-policy: separate or spread, got \"", options.idle_policy, "\""));
  }
  v1::GetCostAllocationResponse response;
  RETURN_IF_ERROR(Unary(/*retry_safe=*/true, [&](grpc::ClientContext* context) {
    return reports_->GetCostAllocation(context, request, &response);
  }));
  if (env_.format == OutputFormat::kJson) return WriteJson(response, *env_.out);
  // Per cluster: each tenant's charge, then idle and unallocated, then the capacity they add up
  // to.
  Table table({"CLUSTER", "PART", "COST", "IDLE-SHARE", "PROFILE-PREMIUM"});
  for (const v1::ClusterCostAllocation& c : response.clusters()) {
    for (const v1::TenantCharge& t : c.tenants()) {
      table.AddRow({c.cluster(), t.tenant(), FormatMicros(t.charge_micros()),
                    FormatMicros(t.idle_share_micros()), FormatMicros(t.profile_premium_micros())});
    }
    if (c.idle_micros() != 0) {
      table.AddRow({c.cluster(), "(idle)", FormatMicros(c.idle_micros()), "-", "-"});
    }
    if (c.unallocated_micros() != 0) {
      table.AddRow({c.cluster(), "(unallocated)", FormatMicros(c.unallocated_micros()), "-", "-"});
    }
    table.AddRow({c.cluster(), "= capacity", FormatMicros(c.capacity_cost_micros()), "-", "-"});
  }
  table.Render(*env_.out);
  return absl::OkStatus();
}

}  // namespace gpufed::cli
