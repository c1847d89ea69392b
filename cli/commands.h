#ifndef GPUFED_CLI_COMMANDS_H_
#define GPUFED_CLI_COMMANDS_H_

// The gpufedctl commands (docs/interfaces.md, "gpufedctl"), independent of flag parsing: each
// takes its arguments as values, talks to the server over the channel in CommandEnv, writes its
// result to env.out and returns a status. An in-process server test can drive them through a
// real channel and read what they print. app.h maps flags onto these calls.
//
// Every call carries `authorization: Bearer <token>` (when a token is set) and a deadline of
// env.timeout, except Watch, which has none. Calls that are safe to repeat (reads, and Submit,
// whose idempotency key makes a repeat return the first workload) are retried on UNAVAILABLE
// per env.retry, with the same request each time. Server errors come back with the server's
// code and message; a few get a hint appended (which server, which token, which key).
//
// Thread safety: a Commands object is used by one thread at a time. Watch may be ended from
// another thread through env.interrupt.

#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cli/clusters_yaml.h"
#include "cli/interrupt.h"
#include "cli/output.h"
#include "cli/workload_yaml.h"
#include "gpufed/v1/audit_service.grpc.pb.h"
#include "gpufed/v1/cluster_service.grpc.pb.h"
#include "gpufed/v1/quota_service.grpc.pb.h"
#include "gpufed/v1/report_service.grpc.pb.h"
#include "gpufed/v1/tenant_service.grpc.pb.h"
#include "gpufed/v1/workload_service.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"

namespace gpufed::cli {

struct RetryPolicy {
  // Attempts after the first one, on UNAVAILABLE only.
  int max_retries = 3;
  // Doubles after each attempt up to max_backoff; each wait adds up to half again at random so
  // many clients do not retry in step.
  absl::Duration initial_backoff = absl::Milliseconds(250);
  absl::Duration max_backoff = absl::Seconds(2);
};

// What every command needs. The pointers must outlive the Commands object.
struct CommandEnv {
  std::shared_ptr<grpc::ChannelInterface> channel;
  // The address `channel` dials, for error messages.
  std::string server;
  // Bearer token; empty sends no authorization metadata.
  std::string token;
  OutputFormat format = OutputFormat::kTable;
  // Deadline of each unary call (each attempt, when retried).
  absl::Duration timeout = absl::Seconds(10);
  RetryPolicy retry;
  std::ostream* out = &std::cout;
  // Notes that are not the result (e.g. "more workloads exist").
  std::ostream* err = &std::cerr;
  std::function<absl::Time()> now = [] { return absl::Now(); };
  // Optional; lets Ctrl-C end Watch cleanly.
  Interrupt* interrupt = nullptr;
};

// The submit command's flags (everything but -f).
struct SubmitFlags {
  std::string name;
  std::string tenant;
  std::string project;
  std::string workload_class;  // enum_names.h spelling; empty: unspecified
  int32_t priority = 0;
  uint32_t replicas = 1;
  uint32_t gpus = 1;
  // Part of one GPU instead of whole GPUs: a MIG profile, or a share in milli-GPUs.
  std::string mig_profile;
  std::optional<uint32_t> gpu_milli;
  // Host resources per replica; 0: not requested.
  uint64_t cpu_millis = 0;
  uint64_t memory_mib = 0;
  std::vector<std::string> models;
  uint64_t min_gpu_memory_mib = 0;
  std::string topology;  // enum_names.h spelling; empty: unspecified
  std::string duration;  // "30s"; empty: unset
  std::string idempotency_key;
  std::string image;
  std::vector<std::string> env;  // "K=V"
  bool sim_fail = false;
  int32_t sim_exit_code = 0;
  std::vector<std::string> command;
};

// Builds a spec from flags. INVALID_ARGUMENT naming the flag for a bad class, topology,
// duration or env entry, for --mig-profile with --gpu-milli, and for either with --gpus other
// than 1. Tenant, project and idempotency key are copied as given (maybe empty).
absl::StatusOr<v1::WorkloadSpec> SpecFromFlags(const SubmitFlags& flags);

// Fills what a spec leaves empty: tenant and project from the first non-empty of the given
// defaults (typically the --tenant/--project flags, then the config file), and a random
// idempotency key so a retried call cannot create a second workload.
void ApplySubmitDefaults(v1::WorkloadSpec& spec, const std::vector<std::string>& tenants,
                         const std::vector<std::string>& projects);

// 128 random bits as 32 lower-case hex digits.
std::string NewIdempotencyKey();

struct ListOptions {
  std::string tenant;
  std::string project;
  std::string cluster;
  std::vector<v1::WorkloadState> states;
  // Most workloads to fetch, across pages; 0 means all.
  uint32_t limit = 100;
};

struct TokenOptions {
  std::string subject;
  v1::Role role = v1::ROLE_UNSPECIFIED;
  std::string tenant;
  std::string project;  // binds the token to this project of `tenant`
  std::string cluster;
  std::string ttl;  // "720h"; empty: the server's default
};

struct QuotaOptions {
  std::string tenant;
  std::string project;
  std::string resource;
  std::string guaranteed;
  std::string limit;  // empty: no borrowing
  bool overcommit = false;
  int64_t weight = 1;  // quota weight
};

struct AuditOptions {
  std::string tenant;  // platform callers: only this tenant's rows
  std::string actor;   // exact, e.g. "user:alice"
  std::string object;  // exact, e.g. "workload/12"
  std::string since;   // RFC 3339 ("2026-11-26T10:00:00Z") or an age ("2h": that long ago)
  std::string until;
  // Most rows to fetch, across pages; 0 means all.
  uint32_t limit = 100;
};

// gpufedctl report (docs/chargeback.md#reports).
struct ReportOptions {
  // The window: a UTC date ("2026-11-01", its midnight) or RFC 3339 at a UTC midnight. Empty
  // from: the start of the current month (UTC); empty to: the end of today (UTC).
  std::string from;
  std::string to;
  std::string period = "day";         // whole, day, week, month
  std::vector<std::string> group_by;  // tenant, project, cluster, gpu_model, ...
  std::string tenant;
  std::string project;
  std::string cluster;
  // What -o csv writes: the usage lines ("usage") or the idle guarantees ("guarantees").
  std::string view = "usage";
};

struct CostOptions {
  std::string from;  // as ReportOptions'
  std::string to;
  std::string cluster;      // "" for every cluster
  std::string idle_policy;  // "", "separate" or "spread" ("": the server's)
};

class Commands {
 public:
  explicit Commands(CommandEnv env);

  // Submits each document in order, stopping at the first error, which is returned prefixed
  // with the document's origin (when it has one); a note on env.err lists the ids already
  // submitted. The specs must be complete (ApplySubmitDefaults). Prints one result per workload.
  absl::Status Submit(const std::vector<WorkloadDocument>& docs);

  // Asks the server where each document would go now and what it would cost (WhatIf), in
  // order, stopping at the first error, which is returned prefixed with the document's origin.
  // Nothing is submitted. Prints, per document, where it would go, its price per hour and
  // estimated cost, and every candidate cluster (WriteWhatIf); JSON: one WhatIfResponse per
  // document per line. Retried like a read.
  absl::Status WhatIf(const std::vector<WorkloadDocument>& docs);

  absl::Status Get(absl::string_view id);

  // Prints the workload's state and, for a pending one, the server's fresh explanation; then,
  // when the server sent them, the objective and every candidate cluster with its rules and
  // offers (WriteCandidateTable).
  absl::Status Explain(absl::string_view id);

  // Prints workload `id`'s telemetry minutes of the last `window` (table or -o json).
  absl::Status Telemetry(absl::string_view id, absl::Duration window);

  // Pages through the server's results until options.limit workloads or the last page. JSON
  // output is one ListWorkloadsResponse holding every fetched workload and the token of the
  // next page (empty when there is none); the table notes on env.err that more exist.
  absl::Status List(const ListOptions& options);

  absl::Status Cancel(absl::string_view id, absl::string_view reason);

  // Prints events as they arrive. With an id, returns once the workload reaches a terminal state
  // (UNAVAILABLE if the stream ends before that). Without one, runs until the server ends the
  // stream or env.interrupt fires; an interrupt returns OK. If env.out stops accepting output
  // (a closed pipe), returns OK at once. A stream the server ends RESOURCE_EXHAUSTED (a reader
  // that fell behind) or UNAVAILABLE (the server went away) is opened again from the last event
  // received, with a note on env.err, waiting as env.retry says: up to env.retry.max_retries
  // times in a row without an event in between, then its status is returned.
  absl::Status Watch(absl::string_view id);

  // The cluster table; with include_nodes also the per-GPU table. In JSON, nodes are present
  // only with include_nodes.
  absl::Status Clusters(bool include_nodes);
  // Puts (or lifts) an operator's cordon on `cluster`, or on its node `node`.
  absl::Status Cordon(absl::string_view cluster, absl::string_view node, bool cordoned);
  // Cordons `cluster` (or its node `node`) and, with `evict`, moves the restartable work there
  // elsewhere; prints what was evicted and what stays.
  absl::Status Drain(absl::string_view cluster, absl::string_view node, bool evict);
  // Deletes a cluster nothing depends on any more (the server says what is left otherwise).
  absl::Status DeleteCluster(absl::string_view name);

  // Sends the file's declarations (ApplyClusters; with dry_run the server stores nothing) and
  // prints the diff it returns. A server error naming a part of the request is prefixed with
  // that part's line in the file. Retried like a read: applying twice changes nothing.
  absl::Status Apply(const ClustersFile& file, bool dry_run);
  // Every cluster declaration: attributes and round-trip times, then the price books.
  absl::Status Declarations();
  // Has the server issue `cluster` its client certificate for mutual TLS (EnrollCluster): for
  // the CSR `csr_pem`, or, when it is empty, for a key pair the server makes. Writes
  // OUT_DIR/CLUSTER.crt, OUT_DIR/CLUSTER.key (mode 0600; only when the server made the key) and
  // OUT_DIR/cluster-ca.crt, each replaced whole, and prints where, the serial and the expiry
  // (JSON: the response without the key). Not retried: each call issues another certificate.
  absl::Status EnrollCluster(absl::string_view cluster, const std::string& csr_pem,
                             const std::string& out_dir);
  // Cuts `cluster` off (RevokeCluster): its certificates and agent tokens are revoked and its
  // agent's connection closed. Retried: revoking twice changes nothing more.
  absl::Status RevokeCluster(absl::string_view cluster);

  absl::Status CreateTenant(absl::string_view name, absl::string_view display_name);
  absl::Status ListTenants();
  absl::Status CreateProject(absl::string_view tenant, absl::string_view name);
  absl::Status ListProjects(absl::string_view tenant);

  // Sets the quota of `tenant` (or of its `project`) on `resource`: amounts as "32" or "0.5"
  // (GPUs, or instances of a MIG profile); `limit` empty: no borrowing.
  absl::Status SetQuota(const QuotaOptions& options);
  absl::Status GetQuotas(absl::string_view tenant);
  absl::Status QuotaUsage(absl::string_view tenant);
  // Sets a tenant's (or, with options.project, a project's) fair-share weight.
  absl::Status SetShareWeight(const QuotaOptions& options);
  // The latest preemptions involving `tenant` (empty: every tenant's), newest first.
  absl::Status ListPreemptions(absl::string_view tenant);
  absl::Status DeleteQuota(absl::string_view tenant, absl::string_view project,
                           absl::string_view resource);

  // The table form prints only the secret on env.out (so `$(gpufedctl tokens create ...)`
  // captures it) and a reminder on env.err that it is shown once.
  absl::Status CreateToken(const TokenOptions& options);
  // The tokens the caller administers in `tenant` / `project` (empty: its own scope).
  absl::Status ListTokens(absl::string_view tenant, absl::string_view project);
  absl::Status DeleteTenant(absl::string_view name);
  absl::Status DeleteProject(absl::string_view tenant, absl::string_view name);
  // Revokes token `token_id` (CreateToken printed it): at once, its open streams included.
  absl::Status RevokeToken(int64_t token_id);
  // Members: binds `subject` to `role` at `tenant` / `project` (empty tenant: the platform), or
  // changes its role there; says which of its tokens were lowered.
  absl::Status SetMember(absl::string_view subject, v1::Role role, absl::string_view tenant,
                         absl::string_view project);
  // Removes the binding and says which of the subject's tokens were revoked with it.
  absl::Status RemoveMember(absl::string_view subject, absl::string_view tenant,
                            absl::string_view project);
  // The bindings the caller administers in `tenant` / `project` (empty: its own scope).
  absl::Status ListMembers(absl::string_view tenant, absl::string_view project);

  // The audit rows the caller may read, newest first (ID TIME ACTOR ACTION OBJECT OUTCOME
  // REASON); JSON: one ListAuditEventsResponse with every row fetched. INVALID_ARGUMENT naming
  // --since or --until for a time that does not parse.
  absl::Status AuditList(const AuditOptions& options);
  // Walks the audit chain on the server and prints every break (id, kind) and the head to keep.
  // DATA_LOSS when the chain is broken (gpufedctl exits non-zero).
  absl::Status AuditVerify();

  // Prints the usage report: a table, JSON (-o json) or CSV (-o csv).
  absl::Status Report(const ReportOptions& options);
  // Prints each cluster's cost allocation (platform readers): a table or JSON.
  absl::Status Cost(const CostOptions& options);

 private:
  // Runs `call` with a fresh context per attempt; retries on UNAVAILABLE when `retry_safe`.
  // `attempts`, when given, receives how many calls were made.
  absl::Status Unary(bool retry_safe, const std::function<grpc::Status(grpc::ClientContext*)>& call,
                     int* attempts = nullptr);
  void PrepareContext(grpc::ClientContext& context, bool with_deadline) const;
  absl::Status FromGrpc(const grpc::Status& status) const;

  CommandEnv env_;
  std::unique_ptr<v1::WorkloadService::Stub> workloads_;
  std::unique_ptr<v1::ClusterService::Stub> clusters_;
  std::unique_ptr<v1::TenantService::Stub> tenants_;
  std::unique_ptr<v1::QuotaService::Stub> quotas_;
  std::unique_ptr<v1::AuditService::Stub> audit_;
  std::unique_ptr<v1::ReportService::Stub> reports_;
};

}  // namespace gpufed::cli

#endif  // GPUFED_CLI_COMMANDS_H_
