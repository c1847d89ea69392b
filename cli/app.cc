#include "cli/app.h"

#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/clusters_yaml.h"
#include "cli/duration.h"
#include "cli/enum_names.h"
#include "cli/login.h"
#include "cli/output.h"
#include "cli/read_file.h"
#include "cli/sim_command.h"
#include "cli/workload_yaml.h"
#include "federation/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

#ifndef GPUFED_VERSION
#define GPUFED_VERSION "dev"
#endif

namespace gpufed::cli {
namespace {

// A cluster listing with --nodes carries every GPU of the pool; tens of thousands of GPUs
// exceed gRPC's 4 MiB default.
constexpr int kMaxReceiveMessageBytes = 64 << 20;

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

CLI::Validator DurationValidator(bool positive) {
  return {[positive](std::string& value) -> std::string {
            absl::StatusOr<absl::Duration> d = ParseDuration(value);
            if (!d.ok()) return std::string(d.status().message());
            if (positive && *d <= absl::ZeroDuration()) return "must be greater than zero";
            return "";
          },
          "DURATION"};
}

CLI::Validator EnvEntryValidator() {
  return {[](std::string& value) -> std::string {
            const size_t eq = value.find('=');
            if (eq == std::string::npos || eq == 0) return "expected NAME=VALUE";
            return "";
          },
          "NAME=VALUE"};
}

// TLS verifying the server against the configured CA (or the system's roots), unless the
// configuration asks for plaintext.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(const ClientConfig& config) {
  if (config.insecure_plaintext) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  if (!config.ca_file.empty()) {
    absl::StatusOr<std::string> pem = ReadTextFile(config.ca_file);
    if (!pem.ok()) {
      return absl::Status(pem.status().code(), absl::StrCat("ca_file: ", pem.status().message()));
    }
    // gRPC would take anything here and fail only at connect time, with a vaguer message.
    if (!absl::StrContains(*pem, "-----BEGIN CERTIFICATE-----")) {
      return absl::InvalidArgumentError(
          absl::StrCat("ca_file: ", config.ca_file, " holds no PEM certificate"));
    }
    options.pem_root_certs = *std::move(pem);
  }
  return grpc::SslCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> Dial(const ClientConfig& config) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials, Credentials(config));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  args.SetUserAgentPrefix(absl::StrCat("gpufedctl/", GPUFED_VERSION));
  // gRPC waits 1 s, then longer, before redialling a server that refused; our own retries of
  // UNAVAILABLE (commands.h) come sooner and would fail without even trying to connect.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  return grpc::CreateCustomChannel(config.server, credentials, args);
}

int ReportError(const absl::Status& status, std::ostream& err) {
  err << "error: " << absl::StatusCodeToString(status.code()) << ": " << status.message() << "\n";
  return kExitError;
}

// Everything the flags can hold, so the parser's targets outlive parsing.
struct Flags {
  std::string config_file;
  std::string server;
  std::string token;
  std::string token_file;
  std::string ca_file;
  bool insecure_plaintext = false;
  std::string output = "table";
  std::string timeout = "10s";

  SubmitFlags submit;
  std::string submit_file;
  bool what_if = false;

  std::string id;
  std::string reason;
  uint32_t telemetry_minutes = 60;

  std::vector<std::string> states;
  std::string list_tenant;
  std::string list_project;
  std::string list_cluster;
  uint32_t limit = 100;

  bool nodes = false;
  std::string apply_file;
  bool dry_run = false;
  std::string cordon_cluster;
  std::string enroll_cluster;
  std::string csr_file;
  std::string out_dir;
  std::string cordon_node;
  bool evict = false;

  std::string tenant_name;
  std::string display_name;
  std::string project_tenant;
  std::string project_name;

  std::string role;
  TokenOptions token_options;
  int64_t token_id = 0;

  QuotaOptions quota;
};

// gpufedctl login: the token from stdin or a quiet prompt, checked with the server, then kept
// in the config file gpufedctl reads (the same precedence: --config, $GPUFED_CONFIG, home).
int RunLogin(ConfigFlags config_flags, bool token_stdin, absl::Duration timeout, const CliIo& io) {
  const std::optional<ConfigPath> path = FindConfigFile(config_flags, io.env);
  if (!path.has_value()) {
    return ReportError(absl::FailedPreconditionError(
                           "no config file to keep the token in: give --config FILE (or set "
                           "$GPUFED_CONFIG or $HOME)"),
                       *io.err);
  }
  config_flags.missing_file_ok = true;
  absl::StatusOr<ClientConfig> config = ResolveClientConfig(config_flags, io.env);
  if (!config.ok()) return ReportError(config.status(), *io.err);
  absl::StatusOr<std::string> token =
      token_stdin
          ? ReadTokenFromStream(*io.in)
          : (io.in == &std::cin
                 ? ReadTokenFromTerminal(*io.err)
                 : absl::FailedPreconditionError("no terminal to ask for the token on: pipe it in "
                                                 "with --token-stdin"));
  if (!token.ok()) return ReportError(token.status(), *io.err);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = Dial(*config);
  if (!channel.ok()) return ReportError(channel.status(), *io.err);
  if (absl::Status s = VerifyToken(*channel, config->server, *token, timeout); !s.ok()) {
    return ReportError(s, *io.err);
  }
  if (absl::Status s = SaveTokenInConfigFile(path->path, *token); !s.ok()) {
    return ReportError(s, *io.err);
  }
  *io.out << "token for " << config->server << " saved in " << path->path << " (mode 0600)\n";
  return 0;
}

}  // namespace

int RunCli(int argc, const char* const* argv, const CliIo& io) {
  Flags f;
  CLI::App app{"gpufedctl: submit and inspect GPU workloads across federated clusters",
               "gpufedctl"};
  app.set_version_flag("--version", GPUFED_VERSION);
  app.require_subcommand(1);
  // Global flags may follow the subcommand: `gpufedctl list -o json`.
  app.fallthrough();
  app.footer(
      "Configuration: --config FILE, else $GPUFED_CONFIG, else ~/.config/gpufed/config.yaml\n"
      "(keys: server, token, token_file, tenant, project, ca_file, insecure_plaintext).\n"
      "$GPUFED_SERVER, $GPUFED_TOKEN (or $GPUFED_TOKEN_FILE) and $GPUFED_CA_FILE override the\n"
      "file; flags override both. See docs/cli.md.");

  CLI::Option* config_opt =
      app.add_option("--config", f.config_file, "Client configuration file (YAML)");
  CLI::Option* server_opt =
      app.add_option("--server", f.server, "Server address HOST:PORT (default 127.0.0.1:50051)");
  CLI::Option* token_opt = app.add_option("--token", f.token, "Bearer token");
  CLI::Option* token_file_opt =
      app.add_option("--token-file", f.token_file, "File holding the bearer token");
  CLI::Option* ca_file_opt = app.add_option(
      "--ca-file", f.ca_file, "CA certificate(s) (PEM) to verify the server with (TLS)");
  CLI::Option* insecure_opt = app.add_flag(
      "--insecure-plaintext", f.insecure_plaintext,
      "No TLS, for a development server run with --insecure-plaintext (the token travels in "
      "the clear)");
  app.add_option("-o,--output", f.output, "Output format (csv: report only)")
      ->check(CLI::IsMember({"table", "json", "csv"}))
      ->capture_default_str();
  app.add_option("--timeout", f.timeout, "Deadline of each call (not watch), e.g. 10s, 1m")
      ->check(DurationValidator(/*positive=*/true))
      ->capture_default_str();

  // submit
  CLI::App* submit = app.add_subcommand(
      "submit", "Submit a workload from flags (command after --), or workloads from a YAML file");
  CLI::Option* file_opt = submit->add_option(
      "-f,--file", f.submit_file, "YAML file with one or more workload documents ('-': stdin)");
  submit->add_flag("--what-if", f.what_if,
                   "Only show where it would go now and what it would cost; submit nothing");
  submit->add_option("--tenant", f.submit.tenant, "Tenant (default: from the config)");
  submit->add_option("--project", f.submit.project, "Project (default: from the config)");
  std::vector<CLI::Option*> spec_opts = {
      submit->add_option("--name", f.submit.name, "Workload name"),
      submit->add_option("--class", f.submit.workload_class, "Workload class")
          ->check(CLI::IsMember(WorkloadClassNames(), CLI::ignore_case)),
      submit->add_option("--priority", f.submit.priority, "Priority within the tenant"),
      submit->add_option("--replicas", f.submit.replicas, "Replicas in the gang")
          ->capture_default_str(),
      submit->add_option("--gpus", f.submit.gpus, "GPUs per replica")->capture_default_str(),
      submit->add_option("--mig-profile", f.submit.mig_profile,
                         "Each replica takes one MIG instance of this profile, e.g. 3g.40gb"),
      submit->add_option("--gpu-milli", f.submit.gpu_milli,
                         "Each replica takes this share of one GPU, in milli-GPUs (1..999)"),
      submit->add_option("--cpu-millis", f.submit.cpu_millis,
                         "Host CPU per replica, in millicores"),
      submit->add_option("--memory-mib", f.submit.memory_mib, "Host memory per replica, MiB"),
      submit->add_option("--model", f.submit.models, "Allowed GPU model (repeatable)")
          ->allow_extra_args(false),
      submit->add_option("--min-gpu-memory-mib", f.submit.min_gpu_memory_mib,
                         "Minimum memory per GPU, MiB"),
      submit->add_option("--topology", f.submit.topology, "Where replicas must sit")
          ->check(CLI::IsMember(TopologyNames(), CLI::ignore_case)),
      submit->add_option("--duration", f.submit.duration, "Estimated duration, e.g. 30s, 1h30m")
          ->check(DurationValidator(/*positive=*/false)),
      submit->add_option("--idempotency-key", f.submit.idempotency_key,
                         "Deduplication key (default: random)"),
      submit->add_option("--image", f.submit.image, "Container image"),
      submit->add_option("--env", f.submit.env, "Environment variable NAME=VALUE (repeatable)")
          ->allow_extra_args(false)
          ->check(EnvEntryValidator()),
      submit->add_flag("--sim-fail", f.submit.sim_fail, "sim backend: end the workload FAILED"),
      submit->add_option("--sim-exit-code", f.submit.sim_exit_code,
                         "sim backend: exit code to report"),
      submit->add_option("command", f.submit.command, "Command and arguments, after --"),
  };

  // get, list, cancel, watch
  CLI::App* get = app.add_subcommand("get", "Show one workload");
  get->add_option("id", f.id, "Workload ID")->required();

  CLI::App* explain = app.add_subcommand(
      "explain",
      "Why a workload is pending: the nearest blocker, and every cluster's rules and offers, "
      "evaluated now");
  explain->add_option("id", f.id, "Workload ID")->required();

  CLI::App* telemetry = app.add_subcommand(
      "telemetry",
      "A workload's GPU telemetry per minute: SM, engine and tensor activity, memory, "
      "power, and the effective GPU-time each minute measured");
  telemetry->add_option("id", f.id, "Workload ID")->required();
  telemetry->add_option("--minutes", f.telemetry_minutes, "The last this many minutes")
      ->check(CLI::Range(1, 60 * 24 * 31))
      ->capture_default_str();

  CLI::App* list = app.add_subcommand("list", "List workloads, newest first");
  list->add_option("--state", f.states, "Only workloads in this state (repeatable)")
      ->allow_extra_args(false)
      ->check(CLI::IsMember(WorkloadStateNames(), CLI::ignore_case));
  CLI::Option* list_tenant_opt = list->add_option(
      "--tenant", f.list_tenant, "Tenant (default: from the config; '' for every tenant)");
  list->add_option("--project", f.list_project, "Project");
  list->add_option("--cluster", f.list_cluster, "Cluster the workloads were placed on");
  list->add_option("--limit", f.limit, "Most workloads to show; 0 for all")->capture_default_str();

  CLI::App* cancel = app.add_subcommand("cancel", "Cancel a workload");
  cancel->add_option("id", f.id, "Workload ID")->required();
  cancel->add_option("--reason", f.reason, "Recorded in the workload's history");

  CLI::App* watch = app.add_subcommand(
      "watch", "Stream state changes of one workload (until it ends) or of all (until Ctrl-C)");
  watch->add_option("id", f.id, "Workload ID");

  CLI::App* clusters = app.add_subcommand("clusters", "List clusters and their free GPUs");
  clusters->add_flag("--nodes", f.nodes, "Also list every GPU and what holds it");
  CLI::App* declarations = clusters->add_subcommand(
      "declarations", "What platform admins declared: attributes, price books, round-trip times");
  std::string delete_cluster_name;
  CLI::App* clusters_delete = clusters->add_subcommand(
      "delete",
      "Delete a cordoned cluster nothing holds, whose agent credentials are revoked, with its "
      "declaration (platform admin)");
  clusters_delete->add_option("name", delete_cluster_name, "Cluster name")->required();
  CLI::App* enroll = clusters->add_subcommand(
      "enroll",
      "Issue a cluster its client certificate for mutual TLS and write it, its key and the "
      "cluster CA to --out-dir (platform admin)");
  enroll->add_option("cluster", f.enroll_cluster, "Cluster name")->required();
  enroll->add_option("--csr", f.csr_file,
                     "PEM certificate signing request for a key you keep (its subject is "
                     "ignored); without it the server makes the key pair");
  enroll->add_option("--out-dir", f.out_dir, "Folder for CLUSTER.crt, CLUSTER.key, cluster-ca.crt")
      ->required();
  CLI::App* revoke_cluster = clusters->add_subcommand(
      "revoke",
      "Cut a cluster off at once: its certificates and agent tokens are revoked and its agent "
      "disconnected (platform admin)");
  revoke_cluster->add_option("cluster", f.enroll_cluster, "Cluster name")->required();
  CLI::App* apply = app.add_subcommand(
      "apply",
      "Declare clusters' attributes, price books and round-trip times from a YAML file "
      "(platform admin); prints what changed");
  apply->add_option("-f,--file", f.apply_file, "YAML file listing clusters ('-': stdin)")
      ->required();
  apply->add_flag("--dry-run", f.dry_run, "Only show what would change");
  CLI::App* cordon = app.add_subcommand(
      "cordon", "No new placements on a cluster (or one node) until uncordon (platform admin)");
  CLI::App* uncordon = app.add_subcommand("uncordon", "Lift a cordon (platform admin)");
  CLI::App* drain = app.add_subcommand(
      "drain", "Cordon, and with --evict move the restartable work elsewhere (platform admin)");
  drain->add_flag("--evict", f.evict,
                  "Stop the work whose retry policy restarts it after a preemption; it runs "
                  "elsewhere as its next attempt");
  for (CLI::App* c : {cordon, uncordon, drain}) {
    c->add_option("cluster", f.cordon_cluster, "Cluster name")->required();
    c->add_option("--node", f.cordon_node, "Only this node of the cluster");
  }

  // tenants, projects, tokens
  CLI::App* tenants = app.add_subcommand("tenants", "Create and list tenants");
  tenants->require_subcommand(1);
  CLI::App* tenants_create = tenants->add_subcommand("create", "Create a tenant");
  tenants_create->add_option("name", f.tenant_name, "Tenant name")->required();
  tenants_create->add_option("--display-name", f.display_name, "Human-readable name");
  CLI::App* tenants_list = tenants->add_subcommand("list", "List tenants");
  CLI::App* tenants_delete = tenants->add_subcommand(
      "delete", "Delete a tenant without projects or live tokens (platform admin)");
  tenants_delete->add_option("name", f.tenant_name, "Tenant name")->required();

  CLI::App* projects = app.add_subcommand("projects", "Create and list projects");
  projects->require_subcommand(1);
  CLI::App* projects_create = projects->add_subcommand("create", "Create a project");
  projects_create->add_option("tenant", f.project_tenant, "Tenant")->required();
  projects_create->add_option("name", f.project_name, "Project name")->required();
  CLI::App* projects_list = projects->add_subcommand("list", "List a tenant's projects");
  projects_list->add_option("tenant", f.project_tenant, "Tenant")->required();
  CLI::App* projects_delete =
      projects->add_subcommand("delete", "Delete a project no workload names (tenant admin)");
  projects_delete->add_option("tenant", f.project_tenant, "Tenant")->required();
  projects_delete->add_option("name", f.project_name, "Project name")->required();

  CLI::App* tokens = app.add_subcommand("tokens", "Create and revoke API tokens");
  tokens->require_subcommand(1);
  CLI::App* tokens_create =
      tokens->add_subcommand("create", "Create a token; the secret is printed once");
  tokens_create->add_option("--role", f.role, "Role")
      ->required()
      ->check(CLI::IsMember(RoleNames(), CLI::ignore_case));
  tokens_create->add_option("--subject", f.token_options.subject, "Who the token is for")
      ->required();
  tokens_create->add_option("--tenant", f.token_options.tenant, "Tenant (tenant roles)");
  tokens_create->add_option("--project", f.token_options.project,
                            "Bind the token to this project of --tenant only");
  tokens_create->add_option("--cluster", f.token_options.cluster, "Cluster (agent role)");
  tokens_create->add_option("--ttl", f.token_options.ttl,
                            "Lifetime, e.g. 720h (default: the server's, 90 days; agents: none)");
  CLI::App* tokens_list =
      tokens->add_subcommand("list", "The tokens you administer (never their secrets)");
  std::string tokens_tenant, tokens_project;
  tokens_list->add_option("--tenant", tokens_tenant, "Tenant (default: your own scope)");
  tokens_list->add_option("--project", tokens_project, "Only tokens bound to this project");
  CLI::App* tokens_revoke = tokens->add_subcommand(
      "revoke", "Revoke a token at once, its open streams included (the id tokens create printed)");
  tokens_revoke->add_option("id", f.token_id, "Token id")->required()->check(CLI::PositiveNumber);

  CLI::App* members = app.add_subcommand(
      "members", "Who holds which role where: role bindings (platform and tenant admins)");
  members->require_subcommand(1);
  std::string member_subject, member_role, member_tenant, member_project;
  CLI::App* members_set = members->add_subcommand(
      "set", "Bind a subject to a role at a scope, or change it (its tokens above it are lowered)");
  members_set->add_option("subject", member_subject, "The member (a person or program)")
      ->required();
  members_set->add_option("--role", member_role, "Role")
      ->required()
      ->check(CLI::IsMember(RoleNames(), CLI::ignore_case));
  members_set->add_option("--tenant", member_tenant, "Tenant (none: the platform)");
  members_set->add_option("--project", member_project, "Project of the tenant");
  CLI::App* members_remove = members->add_subcommand(
      "remove", "Remove a subject's binding at a scope, revoking its tokens there");
  members_remove->add_option("subject", member_subject, "The member")->required();
  members_remove->add_option("--tenant", member_tenant, "Tenant (none: the platform)");
  members_remove->add_option("--project", member_project, "Project of the tenant");
  CLI::App* members_list = members->add_subcommand("list", "The role bindings you administer");
  members_list->add_option("--tenant", member_tenant, "Tenant (default: your own scope)");
  members_list->add_option("--project", member_project, "Only bindings at this project");
  CLI::App* audit = app.add_subcommand("audit", "Read and verify the audit trail");
  audit->require_subcommand(1);
  CLI::App* audit_list = audit->add_subcommand("list", "Audit rows you may read, newest first");
  AuditOptions audit_options;
  audit_list->add_option("--tenant", audit_options.tenant,
                         "Only this tenant's rows (platform callers)");
  audit_list->add_option("--actor", audit_options.actor, "Only this actor, e.g. user:alice");
  audit_list->add_option("--object", audit_options.object, "Only this object, e.g. workload/12");
  audit_list->add_option("--since", audit_options.since,
                         "From this time (RFC 3339) or this long ago (2h)");
  audit_list->add_option("--until", audit_options.until,
                         "Before this time (RFC 3339) or this long ago (30m)");
  audit_list->add_option("--limit", audit_options.limit, "Most rows to show (0: all)")
      ->capture_default_str();
  CLI::App* audit_verify = audit->add_subcommand(
      "verify", "Check the audit chain (platform admin); exits non-zero when it is broken");

  CLI::App* report =
      app.add_subcommand("report", "Usage and cost by tenant, project, cluster, GPU model, ...");
  ReportOptions report_options;
  report->add_option("--from", report_options.from,
                     "Window start: a UTC date (2026-11-01) or RFC 3339 at a UTC midnight; "
                     "default: the start of this month");
  report->add_option("--to", report_options.to,
                     "Window end (excluded), as --from; default: the end of today");
  report->add_option("--period", report_options.period, "One line per: whole, day, week, month")
      ->check(CLI::IsMember({"whole", "day", "week", "month"}))
      ->capture_default_str();
  report
      ->add_option("--by", report_options.group_by,
                   "Group by (comma-separated): tenant, project, cluster, gpu_model, mig_profile, "
                   "workload_class, capacity")
      ->delimiter(',');
  report->add_option("--tenant", report_options.tenant, "Only this tenant (platform callers)");
  report->add_option("--project", report_options.project, "Only this project (with --tenant)");
  report->add_option("--cluster", report_options.cluster, "Only this cluster");
  report
      ->add_option("--view", report_options.view,
                   "What -o csv writes: usage (the lines) or guarantees (idle guaranteed "
                   "capacity); the table shows both")
      ->check(CLI::IsMember({"usage", "guarantees"}))
      ->capture_default_str();

  CLI::App* cost = app.add_subcommand(
      "cost", "Each cluster's capacity cost split into tenants' charges and idle (platform)");
  CostOptions cost_options;
  cost->add_option("--from", cost_options.from, "Window start, as report's");
  cost->add_option("--to", cost_options.to, "Window end (excluded), as report's");
  cost->add_option("--cluster", cost_options.cluster, "Only this cluster");
  cost->add_option("--idle-policy", cost_options.idle_policy,
                   "separate (idle is its own line) or spread (over the tenants that used each "
                   "resource type); default: the server's")
      ->check(CLI::IsMember({"separate", "spread"}));

  CLI::App* quota = app.add_subcommand("quota", "Set, show and delete quotas");
  quota->require_subcommand(1);
  CLI::App* quota_set = quota->add_subcommand(
      "set", "Set a tenant's quota (platform admin) or a project's (--project; tenant admin too)");
  quota_set->add_option("tenant", f.quota.tenant, "Tenant")->required();
  quota_set
      ->add_option("resource", f.quota.resource,
                   "gpu (GPU-equivalents), a GPU model (H100-80GB) or a MIG profile")
      ->required();
  quota_set->add_option("--project", f.quota.project, "A project of the tenant");
  quota_set->add_option("--guaranteed", f.quota.guaranteed, "Guaranteed amount, e.g. 32 or 0.5")
      ->required();
  quota_set->add_option("--limit", f.quota.limit, "Most it may hold by borrowing (default: none)");
  quota_set->add_flag("--overcommit", f.quota.overcommit,
                      "Accept guarantees that add up to more than the pool has");
  CLI::App* quota_get = quota->add_subcommand("get", "Show quotas");
  CLI::Option* quota_get_tenant = quota_get->add_option(
      "tenant", f.quota.tenant,
      "Tenant (default: the configured tenant, else every tenant you may see)");
  CLI::App* quota_usage =
      quota->add_subcommand("usage", "What tenants and projects hold against their quotas");
  CLI::Option* quota_usage_tenant = quota_usage->add_option(
      "tenant", f.quota.tenant,
      "Tenant (default: the configured tenant, else every tenant you may see)");
  CLI::App* quota_weight = quota->add_subcommand(
      "weight", "Set a tenant's fair-share weight (platform admin) or a project's (--project)");
  quota_weight->add_option("tenant", f.quota.tenant, "Tenant")->required();
  quota_weight->add_option("weight", f.quota.weight, "Weight, 1 to 1000000")->required();
  quota_weight->add_option("--project", f.quota.project, "A project of the tenant");
  CLI::App* quota_preemptions = quota->add_subcommand(
      "preemptions", "The latest preemptions: who took back what from whom, and why");
  CLI::Option* quota_preemptions_tenant = quota_preemptions->add_option(
      "tenant", f.quota.tenant,
      "Tenant (default: the configured tenant, else every tenant you may see)");
  CLI::App* quota_delete = quota->add_subcommand("delete", "Delete a quota");
  quota_delete->add_option("tenant", f.quota.tenant, "Tenant")->required();
  quota_delete->add_option("resource", f.quota.resource, "Resource")->required();
  quota_delete->add_option("--project", f.quota.project, "A project of the tenant");

  // login: keeps a token in the config file (cli/login.h).
  CLI::App* login = app.add_subcommand(
      "login", "Check a token with the server and keep it in the config file (mode 0600)");
  bool token_stdin = false;
  login->add_flag("--token-stdin", token_stdin,
                  "Read the token from stdin (without it: a prompt that does not echo)");

  // sim: runs locally (cli/sim_command.h).
  SimCommand sim(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, *io.out, *io.err);
    return code == 0 ? 0 : kExitUsage;
  }

  // Checked here rather than with CLI11's excludes(), which lists every pair in the help.
  if (file_opt->count() > 0) {
    for (const CLI::Option* opt : spec_opts) {
      if (opt->count() > 0) {
        *io.err << opt->get_name() << " cannot be combined with -f: the file says what to run "
                << "(only --tenant and --project may fill what documents leave out)\n"
                << "Run with --help for more information.\n";
        return kExitUsage;
      }
    }
  }

  if (*ParseOutputFormat(f.output) == OutputFormat::kCsv && !report->parsed()) {
    *io.err << "-o csv: only gpufedctl report writes CSV\n";
    return kExitUsage;
  }
  // sim needs no server and no configuration.
  if (sim.parsed()) {
    return sim.Run(*ParseOutputFormat(f.output), *io.out, *io.err,
                   SimCommand::ProgressWanted(*io.out, *io.err));
  }

  // Configuration.
  ConfigFlags config_flags;
  if (config_opt->count() > 0) config_flags.config_file = f.config_file;
  if (server_opt->count() > 0) config_flags.server = f.server;
  if (token_opt->count() > 0) config_flags.token = f.token;
  if (token_file_opt->count() > 0) config_flags.token_file = f.token_file;
  if (ca_file_opt->count() > 0) config_flags.ca_file = f.ca_file;
  if (insecure_opt->count() > 0) config_flags.insecure_plaintext = f.insecure_plaintext;
  if (login->parsed()) {
    if (token_opt->count() > 0 || token_file_opt->count() > 0) {
      *io.err << "login reads the token from stdin (--token-stdin) or asks for it, not from "
                 "--token or --token-file (the command line is visible to other users)\n";
      return kExitUsage;
    }
    return RunLogin(config_flags, token_stdin, *ParseDuration(f.timeout), io);
  }
  absl::StatusOr<ClientConfig> config = ResolveClientConfig(config_flags, io.env);
  if (!config.ok()) return ReportError(config.status(), *io.err);

  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = Dial(*config);
  if (!channel.ok()) return ReportError(channel.status(), *io.err);

  CommandEnv env;
  env.channel = *std::move(channel);
  env.server = config->server;
  env.token = config->token;
  env.format = *ParseOutputFormat(f.output);
  env.timeout = *ParseDuration(f.timeout);
  env.retry = io.retry;
  env.out = io.out;
  env.err = io.err;
  env.now = io.now;
  env.interrupt = io.interrupt;
  Commands commands(std::move(env));

  absl::Status status;
  if (submit->parsed()) {
    std::vector<WorkloadDocument> docs;
    if (file_opt->count() > 0) {
      absl::StatusOr<std::vector<WorkloadDocument>> loaded;
      if (f.submit_file == "-") {
        std::ostringstream text;
        text << io.in->rdbuf();
        loaded = ParseWorkloadYaml(text.str(), "<stdin>");
      } else {
        loaded = LoadWorkloadFile(f.submit_file);
      }
      if (!loaded.ok()) return ReportError(loaded.status(), *io.err);
      docs = *std::move(loaded);
    } else {
      absl::StatusOr<v1::WorkloadSpec> spec = SpecFromFlags(f.submit);
      if (!spec.ok()) return ReportError(spec.status(), *io.err);
      docs.push_back(WorkloadDocument{*std::move(spec), ""});
    }
    for (WorkloadDocument& doc : docs) {
      ApplySubmitDefaults(doc.spec, {f.submit.tenant, config->tenant},
                          {f.submit.project, config->project});
    }
    status = f.what_if ? commands.WhatIf(docs) : commands.Submit(docs);
  } else if (get->parsed()) {
    status = commands.Get(f.id);
  } else if (explain->parsed()) {
    status = commands.Explain(f.id);
  } else if (telemetry->parsed()) {
    status = commands.Telemetry(f.id, absl::Minutes(f.telemetry_minutes));
  } else if (list->parsed()) {
    ListOptions options;
    // An explicit --tenant '' asks for every tenant the caller may see.
    options.tenant = list_tenant_opt->count() > 0 ? f.list_tenant : config->tenant;
    options.project = f.list_project;
    options.cluster = f.list_cluster;
    options.limit = f.limit;
    for (const std::string& name : f.states) options.states.push_back(*ParseWorkloadState(name));
    status = commands.List(options);
  } else if (cancel->parsed()) {
    status = commands.Cancel(f.id, f.reason);
  } else if (watch->parsed()) {
    status = commands.Watch(f.id);
  } else if (enroll->parsed()) {
    std::string csr_pem;
    if (!f.csr_file.empty()) {
      absl::StatusOr<std::string> csr = ReadTextFile(f.csr_file);
      if (!csr.ok()) {
        return ReportError(
            absl::InvalidArgumentError(absl::StrCat("--csr: ", csr.status().message())), *io.err);
      }
      csr_pem = *std::move(csr);
    }
    status = commands.EnrollCluster(f.enroll_cluster, csr_pem, f.out_dir);
  } else if (revoke_cluster->parsed()) {
    status = commands.RevokeCluster(f.enroll_cluster);
  } else if (declarations->parsed()) {
    status = commands.Declarations();
  } else if (clusters_delete->parsed()) {
    status = commands.DeleteCluster(delete_cluster_name);
  } else if (clusters->parsed()) {
    status = commands.Clusters(f.nodes);
  } else if (apply->parsed()) {
    absl::StatusOr<ClustersFile> loaded;
    if (f.apply_file == "-") {
      std::ostringstream text;
      text << io.in->rdbuf();
      loaded = ParseClustersYaml(text.str(), "<stdin>");
    } else {
      loaded = LoadClustersFile(f.apply_file);
    }
    if (!loaded.ok()) return ReportError(loaded.status(), *io.err);
    status = commands.Apply(*loaded, f.dry_run);
  } else if (cordon->parsed() || uncordon->parsed()) {
    status = commands.Cordon(f.cordon_cluster, f.cordon_node, cordon->parsed());
  } else if (drain->parsed()) {
    status = commands.Drain(f.cordon_cluster, f.cordon_node, f.evict);
  } else if (tenants_create->parsed()) {
    status = commands.CreateTenant(f.tenant_name, f.display_name);
  } else if (tenants_list->parsed()) {
    status = commands.ListTenants();
  } else if (tenants_delete->parsed()) {
    status = commands.DeleteTenant(f.tenant_name);
  } else if (projects_create->parsed()) {
    status = commands.CreateProject(f.project_tenant, f.project_name);
  } else if (projects_list->parsed()) {
    status = commands.ListProjects(f.project_tenant);
  } else if (projects_delete->parsed()) {
    status = commands.DeleteProject(f.project_tenant, f.project_name);
  } else if (quota_set->parsed()) {
    status = commands.SetQuota(f.quota);
  } else if (quota_get->parsed()) {
    status = commands.GetQuotas(quota_get_tenant->count() > 0 ? f.quota.tenant : config->tenant);
  } else if (quota_usage->parsed()) {
    status = commands.QuotaUsage(quota_usage_tenant->count() > 0 ? f.quota.tenant : config->tenant);
  } else if (quota_weight->parsed()) {
    status = commands.SetShareWeight(f.quota);
  } else if (quota_preemptions->parsed()) {
    status = commands.ListPreemptions(quota_preemptions_tenant->count() > 0 ? f.quota.tenant
                                                                            : config->tenant);
  } else if (quota_delete->parsed()) {
    status = commands.DeleteQuota(f.quota.tenant, f.quota.project, f.quota.resource);
  } else if (tokens_create->parsed()) {
    f.token_options.role = *ParseRole(f.role);
    status = commands.CreateToken(f.token_options);
  } else if (tokens_list->parsed()) {
    status = commands.ListTokens(tokens_tenant, tokens_project);
  } else if (tokens_revoke->parsed()) {
    status = commands.RevokeToken(f.token_id);
  } else if (members_set->parsed()) {
    status =
        commands.SetMember(member_subject, *ParseRole(member_role), member_tenant, member_project);
  } else if (members_remove->parsed()) {
    status = commands.RemoveMember(member_subject, member_tenant, member_project);
  } else if (members_list->parsed()) {
    status = commands.ListMembers(member_tenant, member_project);
  } else if (audit_list->parsed()) {
    status = commands.AuditList(audit_options);
  } else if (audit_verify->parsed()) {
    status = commands.AuditVerify();
  } else if (report->parsed()) {
    status = commands.Report(report_options);
  } else if (cost->parsed()) {
    status = commands.Cost(cost_options);
  }
  if (!status.ok()) return ReportError(status, *io.err);
  return 0;
}

}  // namespace gpufed::cli
