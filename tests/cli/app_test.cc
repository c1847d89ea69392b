#include "cli/app.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/cli/fake_gpufed_server.h"

namespace gpufed::cli {
namespace {

using ::gpufed::cli::testing::FakeGpufedServer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::StartsWith;

std::string ExamplePath(const std::string& name) {
  return std::string(GPUFED_SOURCE_DIR) + "/examples/" + name;
}

// Runs gpufedctl in-process with a private environment against a fake server.
class AppTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = FakeGpufedServer::Start();
    ASSERT_NE(server_, nullptr);
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("gpufed-cli-app-" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "home");
    env_["HOME"] = (dir_ / "home").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  // Writes the default config file pointing at the fake server.
  void WriteHomeConfig(const std::string& extra = "") {
    std::filesystem::create_directories(dir_ / "home/.config/gpufed");
    std::ofstream(dir_ / "home/.config/gpufed/config.yaml")
        << "server: " << server_->address() << "\ntoken: gpf_cfg\ntenant: demo\n"
        << "project: default\n"
        << extra;
    // It holds a token: private, as gpufedctl requires.
    std::filesystem::permissions(
        dir_ / "home/.config/gpufed/config.yaml",
        std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  }

  int Run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    // The fake server is plaintext.
    args.insert(args.begin(), {"gpufedctl", "--insecure-plaintext"});
    std::vector<const char*> argv;
    argv.reserve(args.size());
    for (const std::string& a : args) argv.push_back(a.c_str());
    CliIo io;
    io.out = &out_;
    io.err = &err_;
    io.in = &in_;
    io.env = [this](absl::string_view name) -> std::optional<std::string> {
      auto it = env_.find(std::string(name));
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
    io.retry.initial_backoff = absl::Milliseconds(1);
    io.retry.max_backoff = absl::Milliseconds(2);
    return RunCli(static_cast<int>(argv.size()), argv.data(), io);
  }

  std::unique_ptr<FakeGpufedServer> server_;
  std::filesystem::path dir_;
  std::map<std::string, std::string> env_;
  std::ostringstream out_;
  std::ostringstream err_;
  std::istringstream in_;
};

TEST_F(AppTest, SubmitFromFlagsWithCommandAfterDoubleDash) {
  WriteHomeConfig();
  ASSERT_EQ(Run({"submit",     "--name",     "train",     "--class",    "training",
                 "--replicas", "2",          "--gpus",    "8",          "--model",
                 "H100-80GB",  "--model",    "A100-80GB", "--topology", "same_node",
                 "--duration", "20s",        "--env",     "EPOCHS=3",   "--env",
                 "LR=0.1",     "--priority", "-5",        "--sim-fail", "--sim-exit-code",
                 "3",          "--",         "python",    "train.py",   "--lr",
                 "0.1"}),
            0)
      << err_.str();
  EXPECT_EQ(out_.str(), "workload/1 train created\n");
  ASSERT_THAT(server_->submits(), SizeIs(1));
  const v1::WorkloadSpec spec = server_->submits()[0].spec();
  EXPECT_EQ(spec.tenant(), "demo");  // From the config file.
  EXPECT_EQ(spec.project(), "default");
  EXPECT_EQ(spec.replicas(), 2u);
  EXPECT_EQ(spec.per_replica().gpus(), 8u);
  EXPECT_EQ(spec.priority(), -5);
  EXPECT_THAT(spec.gpu_models(), ElementsAre("H100-80GB", "A100-80GB"));
  EXPECT_EQ(spec.topology(), v1::TOPOLOGY_REQUIREMENT_SAME_NODE);
  EXPECT_EQ(spec.estimated_duration().seconds(), 20);
  EXPECT_EQ(spec.run().env().size(), 2u);
  EXPECT_EQ(spec.run().sim_outcome(), v1::SIM_OUTCOME_FAIL);
  EXPECT_EQ(spec.run().sim_exit_code(), 3);
  EXPECT_THAT(spec.run().command(), ElementsAre("python", "train.py", "--lr", "0.1"));
  EXPECT_EQ(spec.idempotency_key().size(), 32u);
  EXPECT_THAT(server_->authorizations(), ElementsAre("Bearer gpf_cfg"));
}

TEST_F(AppTest, SubmitDefaultsToOneReplicaOfOneGpu) {
  WriteHomeConfig();
  ASSERT_EQ(Run({"submit", "--name", "x", "--tenant", "other"}), 0) << err_.str();
  const v1::WorkloadSpec spec = server_->submits()[0].spec();
  EXPECT_EQ(spec.replicas(), 1u);
  EXPECT_EQ(spec.per_replica().gpus(), 1u);
  EXPECT_EQ(spec.tenant(), "other");  // The flag beats the config.
  EXPECT_TRUE(spec.run().command().empty());
}

TEST_F(AppTest, SubmitMigProfileAndHostResources) {
  WriteHomeConfig();
  ASSERT_EQ(Run({"submit", "--name", "m", "--replicas", "3", "--mig-profile", "3g.40gb",
                 "--cpu-millis", "4000", "--memory-mib", "8192"}),
            0)
      << err_.str();
  const v1::WorkloadSpec spec = server_->submits()[0].spec();
  EXPECT_EQ(spec.replicas(), 3u);
  EXPECT_EQ(spec.per_replica().mig_profile(), "3g.40gb");
  EXPECT_EQ(spec.per_replica().cpu_millis(), 4000u);
  EXPECT_EQ(spec.per_replica().memory_mib(), 8192u);

  ASSERT_EQ(Run({"submit", "--name", "s", "--gpu-milli", "250"}), 0) << err_.str();
  EXPECT_EQ(server_->submits()[1].spec().per_replica().gpu_milli(), 250u);

  EXPECT_EQ(Run({"submit", "--name", "s", "--gpu-milli", "250", "--gpus", "2"}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("--gpus: must be 1"));
}

TEST_F(AppTest, SubmitEveryExampleFile) {
  WriteHomeConfig();
  for (const char* name : {"train-gang.yaml", "inference-small.yaml", "batch.yaml"}) {
    ASSERT_EQ(Run({"submit", "-f", ExamplePath(name)}), 0) << name << ": " << err_.str();
  }
  const std::vector<v1::SubmitRequest> submits = server_->submits();
  ASSERT_THAT(submits, SizeIs(5));
  for (const v1::SubmitRequest& r : submits) {
    EXPECT_EQ(r.spec().tenant(), "demo");
    EXPECT_EQ(r.spec().project(), "default");
    EXPECT_FALSE(r.spec().idempotency_key().empty());
  }
  EXPECT_NE(submits[2].spec().idempotency_key(), submits[3].spec().idempotency_key());
}

TEST_F(AppTest, SubmitFromStdin) {
  WriteHomeConfig();
  in_.str("name: piped\nproject: p2\n");
  ASSERT_EQ(Run({"submit", "-f", "-", "--project", "ignored"}), 0) << err_.str();
  EXPECT_EQ(server_->submits()[0].spec().name(), "piped");
  EXPECT_EQ(server_->submits()[0].spec().project(), "p2");  // The document wins over the flag.
}

TEST_F(AppTest, BadYamlFailsBeforeAnyCall) {
  WriteHomeConfig();
  const std::string path = Write("bad.yaml", "name: x\nreplicas: two\n");
  EXPECT_EQ(Run({"submit", "-f", path}), 1);
  EXPECT_EQ(err_.str(), "error: INVALID_ARGUMENT: " + path +
                            ":2: replicas: expected a non-negative integer, got \"two\"\n");
  EXPECT_THAT(server_->submits(), IsEmpty());
}

TEST_F(AppTest, ApplyShowsTheDiffAndADryRunStoresNothing) {
  WriteHomeConfig();
  const std::string example = ExamplePath("clusters.yaml");
  ASSERT_EQ(Run({"apply", "-f", example, "--dry-run"}), 0) << err_.str();
  ASSERT_THAT(server_->apply_requests(), SizeIs(1));
  EXPECT_TRUE(server_->apply_requests()[0].dry_run());
  EXPECT_EQ(server_->apply_requests()[0].declarations_size(), 4);
  EXPECT_EQ(server_->apply_requests()[0].declarations(1).prices(0).price_per_hour_micros(),
            4'100'000);
  EXPECT_THAT(out_.str(), StartsWith("CLUSTER          RESULT   CHANGES\n"
                                     "onprem-dgx-fra   added    + 2 price line(s)\n"));
  EXPECT_THAT(out_.str(), HasSubstr("\n4 cluster(s): 4 added (dry run: nothing was stored)\n"));
  EXPECT_EQ(server_->authorizations().back(), "Bearer gpf_cfg");

  ASSERT_EQ(Run({"apply", "-f", example}), 0) << err_.str();
  EXPECT_FALSE(server_->apply_requests().back().dry_run());
  EXPECT_THAT(out_.str(), HasSubstr("\n4 cluster(s): 4 added\n"));

  // Applying the same file again changes nothing.
  ASSERT_EQ(Run({"apply", "-f", example, "-o", "json"}), 0) << err_.str();
  const nlohmann::json json = nlohmann::json::parse(out_.str());
  ASSERT_EQ(json["diffs"].size(), 4u);
  for (const nlohmann::json& diff : json["diffs"]) {
    EXPECT_EQ(diff["kind"], "DECLARATION_CHANGE_UNCHANGED") << diff;
    EXPECT_TRUE(diff["changes"].empty()) << diff;
  }
  EXPECT_EQ(json["dry_run"], false);
}

TEST_F(AppTest, ClustersDeclarationsShowsWhatWasDeclared) {
  WriteHomeConfig();
  ASSERT_EQ(Run({"apply", "-f", ExamplePath("clusters.yaml")}), 0) << err_.str();
  ASSERT_EQ(Run({"clusters", "declarations"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("DEFAULT-CAPACITY"));
  EXPECT_THAT(out_.str(), HasSubstr("gdpr,sovereign   committed          "
                                    "eu-west=14ms,us-east=92ms\n"));
  EXPECT_THAT(out_.str(), HasSubstr("(none)"));
  EXPECT_THAT(out_.str(), HasSubstr("cloud-eu-a100    A100-80GB   -         spot        1.64       "
                                    "2026-01-01T00:00:00Z\n"));
  EXPECT_THAT(server_->cluster_requests(), IsEmpty()) << "not the cluster listing";

  ASSERT_EQ(Run({"clusters", "declarations", "-o", "json"}), 0) << err_.str();
  const nlohmann::json json = nlohmann::json::parse(out_.str());
  ASSERT_EQ(json["declarations"].size(), 4u);
  EXPECT_EQ(json["declarations"][0]["cluster"], "cloud-eu-a100");
  EXPECT_EQ(json["declarations"][0]["prices"][0]["price_per_hour_micros"], "4100000");
  EXPECT_EQ(json["declarations"][0]["client_rtts"]["eu-west"], "0.004s");
}

TEST_F(AppTest, ApplyRefusesABadFileBeforeAnyCall) {
  WriteHomeConfig();
  const std::string path =
      Write("bad.yaml", "clusters:\n  - name: a\n    default_capacity: reserved\n");
  EXPECT_EQ(Run({"apply", "-f", path}), 1);
  EXPECT_EQ(err_.str(), "error: INVALID_ARGUMENT: " + path +
                            ":3: clusters[0].default_capacity: expected one of on-demand, spot, "
                            "committed, got \"reserved\"\n");
  EXPECT_THAT(server_->apply_requests(), IsEmpty());
  EXPECT_EQ(Run({"apply"}), 2) << "-f is required";
  EXPECT_EQ(Run({"apply", "-f", Write("missing-dir/x.yaml", "")}), 1);
}

TEST_F(AppTest, ApplyPointsAServerErrorAtTheLineOfTheFile) {
  WriteHomeConfig();
  const std::string example = ExamplePath("clusters.yaml");
  server_->FailNextApply(grpc::Status(
      grpc::StatusCode::INVALID_ARGUMENT,
      "declarations[1].prices[3].mig_profile: \"3g.40gb\" is not a MIG profile of L4"));
  EXPECT_EQ(Run({"apply", "-f", example}), 1);
  EXPECT_EQ(err_.str(), "error: INVALID_ARGUMENT: " + example +
                            ":53: declarations[1].prices[3].mig_profile: \"3g.40gb\" is not a "
                            "MIG profile of L4\n");
  // Not retried: only UNAVAILABLE is.
  EXPECT_THAT(server_->apply_requests(), SizeIs(1));
}

TEST_F(AppTest, ApplyFromStdin) {
  WriteHomeConfig();
  in_.str("clusters:\n  - name: piped\n    jurisdiction: eu\n");
  ASSERT_EQ(Run({"apply", "-f", "-"}), 0) << err_.str();
  ASSERT_THAT(server_->apply_requests(), SizeIs(1));
  EXPECT_EQ(server_->apply_requests()[0].declarations(0).cluster(), "piped");
  in_.clear();
  in_.str("clusters:\n  - name: piped\n    jurisdictoin: eu\n");
  EXPECT_EQ(Run({"apply", "-f", "-"}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("<stdin>:3: clusters[0].jurisdictoin: unknown field"));
}

TEST_F(AppTest, ServerErrorsExitOneWithCodeAndMessage) {
  WriteHomeConfig();
  EXPECT_EQ(Run({"submit", "--name", ""}), 1);
  EXPECT_EQ(err_.str(), "error: INVALID_ARGUMENT: spec.name: must not be empty\n");
  EXPECT_EQ(Run({"get", "12345"}), 1);
  EXPECT_EQ(err_.str(), "error: NOT_FOUND: workload 12345 not found\n");
  EXPECT_THAT(out_.str(), IsEmpty());
}

TEST_F(AppTest, UsageErrorsExitTwo) {
  WriteHomeConfig();
  EXPECT_EQ(Run({}), 2);
  EXPECT_EQ(Run({"frobnicate"}), 2);
  EXPECT_EQ(Run({"list", "--no-such-flag"}), 2);
  EXPECT_EQ(Run({"submit", "--class", "training-ish", "--name", "x"}), 2);
  EXPECT_EQ(Run({"submit", "-f", "x.yaml", "--name", "x"}), 2);
  EXPECT_EQ(Run({"submit", "--replicas", "-1", "--name", "x"}), 2);
  EXPECT_EQ(Run({"submit", "--replicas", "two", "--name", "x"}), 2);
  EXPECT_EQ(Run({"submit", "--duration", "soon", "--name", "x"}), 2);
  EXPECT_EQ(Run({"submit", "--env", "NOEQUALS", "--name", "x"}), 2);
  EXPECT_EQ(Run({"list", "--state", "sleeping"}), 2);
  EXPECT_EQ(Run({"list", "-o", "yaml"}), 2);
  EXPECT_EQ(Run({"list", "--timeout", "0s"}), 2);
  EXPECT_EQ(Run({"get"}), 2);
  EXPECT_EQ(Run({"tenants"}), 2);
  EXPECT_EQ(Run({"tokens", "create", "--role", "emperor", "--subject", "x"}), 2);
  EXPECT_THAT(server_->authorizations(), IsEmpty());  // None of these reached the server.
}

TEST_F(AppTest, HelpExitsZero) {
  EXPECT_EQ(Run({"--help"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("submit"));
  EXPECT_EQ(Run({"submit", "--help"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("--idempotency-key"));
}

TEST_F(AppTest, GlobalFlagsMayFollowTheSubcommand) {
  WriteHomeConfig();
  ASSERT_EQ(Run({"submit", "--name", "a"}), 0);
  ASSERT_EQ(Run({"list", "-o", "json", "--token", "gpf_flag"}), 0) << err_.str();
  const nlohmann::json json = nlohmann::json::parse(out_.str());
  EXPECT_EQ(json["workloads"][0]["spec"]["name"], "a");
  EXPECT_EQ(server_->authorizations().back(), "Bearer gpf_flag");
  EXPECT_EQ(server_->list_requests().back().tenant(), "demo");  // The config's tenant.
  EXPECT_EQ(server_->list_requests().back().page_size(), 100u);
}

TEST_F(AppTest, ListStatesAndExplicitEmptyTenant) {
  WriteHomeConfig();
  ASSERT_EQ(Run({"list", "--tenant", "", "--state", "pending", "--state", "RUNNING", "--limit", "5",
                 "--cluster", "c1", "--project", "p"}),
            0)
      << err_.str();
  const v1::ListWorkloadsRequest r = server_->list_requests().back();
  EXPECT_EQ(r.tenant(), "");
  EXPECT_EQ(r.project(), "p");
  EXPECT_EQ(r.cluster(), "c1");
  EXPECT_EQ(r.page_size(), 5u);
  EXPECT_THAT(r.states(), ElementsAre(v1::WORKLOAD_STATE_PENDING, v1::WORKLOAD_STATE_RUNNING));
}

TEST_F(AppTest, EnvironmentOverridesTheFileAndFlagsOverrideTheEnvironment) {
  WriteHomeConfig();
  env_["GPUFED_TOKEN"] = "gpf_env";
  env_["GPUFED_SERVER"] = "127.0.0.1:1";  // Nothing listens there.
  EXPECT_EQ(Run({"tenants", "list"}), 1);
  EXPECT_THAT(err_.str(), StartsWith("error: UNAVAILABLE: "));
  EXPECT_THAT(err_.str(), HasSubstr("127.0.0.1:1"));
  ASSERT_EQ(Run({"tenants", "list", "--server", server_->address()}), 0) << err_.str();
  EXPECT_EQ(server_->authorizations().back(), "Bearer gpf_env");
}

TEST_F(AppTest, TimeoutFlagSetsTheDeadline) {
  WriteHomeConfig();
  const absl::Time before = absl::Now();
  ASSERT_EQ(Run({"tenants", "list", "--timeout", "1h"}), 0) << err_.str();
  EXPECT_GT(absl::FromChrono(server_->deadlines().back()), before + absl::Minutes(59));
}

TEST_F(AppTest, MissingExplicitConfigIsAnError) {
  EXPECT_EQ(Run({"--config", (dir_ / "nope.yaml").string(), "tenants", "list"}), 1);
  EXPECT_THAT(err_.str(), StartsWith("error: NOT_FOUND: config file "));
}

TEST_F(AppTest, AdminCommands) {
  WriteHomeConfig();
  ASSERT_EQ(Run({"tenants", "create", "acme", "--display-name", "Acme Corp"}), 0) << err_.str();
  ASSERT_EQ(Run({"projects", "create", "acme", "research"}), 0) << err_.str();
  ASSERT_EQ(Run({"projects", "list", "acme", "-o", "json"}), 0) << err_.str();
  EXPECT_EQ(nlohmann::json::parse(out_.str())["projects"][0]["name"], "research");
  ASSERT_EQ(
      Run({"tokens", "create", "--role", "agent", "--subject", "edge-l4", "--cluster", "edge-l4"}),
      0)
      << err_.str();
  EXPECT_EQ(out_.str(), "gpf_fake_1\n");
  EXPECT_EQ(server_->token_requests()[0].role(), v1::ROLE_AGENT);
  EXPECT_EQ(server_->token_requests()[0].cluster(), "edge-l4");
  ASSERT_EQ(Run({"tokens", "create", "--role", "Platform-Admin", "--subject", "root"}), 0);
  EXPECT_EQ(server_->token_requests()[1].role(), v1::ROLE_PLATFORM_ADMIN);
  EXPECT_THAT(err_.str(), HasSubstr("gpufedctl tokens revoke 2"));
  ASSERT_EQ(Run({"tokens", "revoke", "2"}), 0) << err_.str();
  EXPECT_EQ(server_->revoked_tokens(), std::vector<int64_t>{2});
  EXPECT_EQ(Run({"tokens", "revoke", "0"}), 2);  // not a token id: a usage error
  EXPECT_EQ(server_->revoked_tokens().size(), 1u);
}

TEST_F(AppTest, CancelAndWatch) {
  WriteHomeConfig();
  ASSERT_EQ(Run({"submit", "--name", "a"}), 0);
  server_->SetWatchScript({v1::WORKLOAD_STATE_CANCELLED});
  ASSERT_EQ(Run({"watch", "1"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("PENDING -> CANCELLED"));
  EXPECT_EQ(Run({"cancel", "1", "--reason", "test"}), 1);
  EXPECT_THAT(err_.str(), StartsWith("error: FAILED_PRECONDITION: "));
}

TEST_F(AppTest, ExplainTextAndJson) {
  WriteHomeConfig();
  ASSERT_EQ(Run({"submit", "--name", "big", "--gpus", "8", "--model", "H200"}), 0) << err_.str();
  server_->SetExplanation("1",
                          "no cluster can ever hold it: needs 8 GPUs of H200, but no cluster has "
                          "GPUs that match (GPU models in the pool: L4)",
                          /*never_fits=*/true);
  ASSERT_EQ(Run({"explain", "1"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), StartsWith("Workload 1 (demo/default/big): PENDING\n"
                                     "no cluster can ever hold it: needs 8 GPUs of H200"));
  EXPECT_THAT(out_.str(), HasSubstr("\nWaiting will not help: "));
  EXPECT_EQ(server_->authorizations().back(), "Bearer gpf_cfg");

  ASSERT_EQ(Run({"explain", "1", "-o", "json"}), 0) << err_.str();
  const nlohmann::json json = nlohmann::json::parse(out_.str());
  EXPECT_EQ(json["never_fits"], true);
  EXPECT_TRUE(json.contains("reason_code"));
  EXPECT_EQ(json["workload"]["spec"]["name"], "big");

  EXPECT_EQ(Run({"explain", "42"}), 1);
  EXPECT_EQ(err_.str(), "error: NOT_FOUND: workload 42 not found\n");
  EXPECT_EQ(Run({"explain"}), 2) << "the id is required";
}

TEST_F(AppTest, SubmitWhatIfAsksWhereEachDocumentWouldGoAndSubmitsNothing) {
  WriteHomeConfig();
  v1::WhatIfResponse r;
  r.mutable_assignment()->set_cluster("dgx");
  r.set_price_per_hour_micros(3'200'000);
  r.set_estimated_cost_micros(3'200'000);
  r.set_estimated_hours(1);
  r.set_objective(v1::OBJECTIVE_COST);
  server_->SetWhatIf(r);
  const std::string path = Write("two.yaml", "name: a\n---\nname: b\nproject: p2\n");
  ASSERT_EQ(Run({"submit", "--what-if", "-f", path}), 0) << err_.str();
  EXPECT_THAT(out_.str(), StartsWith("Workload:        a (demo/default), not submitted\n"
                                     "Would go to:     dgx\n"
                                     "Price:           3.20 per hour\n"
                                     "Estimated cost:  3.20 over 1h (no estimated duration: 1h "
                                     "assumed)\n"));
  EXPECT_THAT(out_.str(), HasSubstr("\n\nWorkload:        b (demo/p2), not submitted\n"));
  ASSERT_THAT(server_->what_ifs(), SizeIs(2));
  EXPECT_EQ(server_->what_ifs()[1].spec().project(), "p2");
  EXPECT_EQ(server_->what_ifs()[0].spec().tenant(), "demo");
  EXPECT_THAT(server_->submits(), IsEmpty());

  // From flags too, and as JSON.
  ASSERT_EQ(Run({"submit", "--what-if", "--name", "c", "--gpus", "2", "-o", "json"}), 0)
      << err_.str();
  const nlohmann::json json = nlohmann::json::parse(out_.str());
  EXPECT_EQ(json["assignment"]["cluster"], "dgx");
  EXPECT_EQ(json["price_per_hour_micros"], "3200000");
  EXPECT_EQ(server_->what_ifs().back().spec().per_replica().gpus(), 2u);
  EXPECT_THAT(server_->submits(), IsEmpty());

  // The server's refusal names the field.
  EXPECT_EQ(Run({"submit", "--what-if", "--name", ""}), 1);
  EXPECT_EQ(err_.str(), "error: INVALID_ARGUMENT: spec.name: must not be empty\n");
}

TEST_F(AppTest, ClustersWithNodes) {
  WriteHomeConfig();
  v1::Cluster c;
  c.set_name("sim-a");
  c.add_nodes()->add_gpus()->set_allocated_to("9");
  server_->SetClusters({c});
  ASSERT_EQ(Run({"clusters", "--nodes"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("ALLOCATED_TO"));
  EXPECT_TRUE(server_->cluster_requests().back().include_nodes());
}

TEST_F(AppTest, DrainEvictsAndListsWhatStays) {
  WriteHomeConfig();
  v1::Cluster c;
  c.set_name("sim-a");
  server_->SetClusters({c});
  v1::Workload moves;
  moves.mutable_assignment()->set_cluster("sim-a");
  moves.mutable_spec()->mutable_retry()->set_max_attempts(3);
  const std::string moves_id = server_->AddWorkload(moves);
  v1::Workload stays;
  stays.mutable_assignment()->set_cluster("sim-a");
  const std::string stays_id = server_->AddWorkload(stays);

  ASSERT_EQ(Run({"drain", "sim-a", "--node", "n1", "--evict"}), 0) << err_.str();
  ASSERT_EQ(server_->drain_requests().size(), 1u);
  const v1::DrainRequest sent = server_->drain_requests().front();
  EXPECT_EQ(sent.name(), "sim-a");
  EXPECT_EQ(sent.node(), "n1");
  EXPECT_TRUE(sent.evict());
  EXPECT_THAT(out_.str(), HasSubstr("1 workload(s) evicted, 1 staying"));
  EXPECT_THAT(out_.str(), HasSubstr("evicted: " + moves_id));
  EXPECT_THAT(out_.str(), HasSubstr("staying: " + stays_id));

  ASSERT_EQ(Run({"drain", "sim-a"}), 0) << err_.str();
  EXPECT_FALSE(server_->drain_requests().back().evict());
  EXPECT_NE(Run({"drain", "elsewhere"}), 0);
}

}  // namespace
}  // namespace gpufed::cli
