#include "cli/commands.h"

#include <limits>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/cli/fake_gpufed_server.h"
#include "tests/cli/sync_stream.h"
#include "tests/support/status_matchers.h"

namespace gpufed::cli {
namespace {

using ::gpufed::cli::testing::FakeGpufedServer;
using ::gpufed::cli::testing::SyncStream;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;

// Waits for `condition` with a deadline; the waits here are for other threads' progress.
template <typename Condition>
bool WaitFor(Condition condition, absl::Duration limit = absl::Seconds(20)) {
  const absl::Time deadline = absl::Now() + limit;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = FakeGpufedServer::Start();
    ASSERT_NE(server_, nullptr);
  }

  CommandEnv Env(OutputFormat format = OutputFormat::kTable) {
    CommandEnv env;
    env.channel = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    env.server = server_->address();
    env.token = "gpf_secret";
    env.format = format;
    env.retry.initial_backoff = absl::Milliseconds(1);
    env.retry.max_backoff = absl::Milliseconds(4);
    env.out = &out_;
    env.err = &err_;
    env.now = [] { return absl::FromUnixSeconds(testing::kFakeCreateSeconds + 90); };
    env.interrupt = &interrupt_;
    return env;
  }

  static WorkloadDocument Doc(std::string name, std::string origin = "") {
    WorkloadDocument doc;
    doc.spec.set_name(std::move(name));
    doc.spec.set_tenant("demo");
    doc.spec.set_project("default");
    doc.spec.mutable_per_replica()->set_gpus(1);
    ApplySubmitDefaults(doc.spec, {}, {});
    doc.origin = std::move(origin);
    return doc;
  }

  std::string AddWorkload(std::string name, v1::WorkloadState state, std::string tenant = "demo") {
    v1::Workload w;
    w.mutable_spec()->set_name(std::move(name));
    w.mutable_spec()->set_tenant(std::move(tenant));
    w.mutable_spec()->set_project("default");
    w.mutable_spec()->mutable_per_replica()->set_gpus(1);
    w.set_state(state);
    return server_->AddWorkload(w);
  }

  // Watches every workload until `lines` lines are printed, then presses Ctrl-C; Watch's status.
  absl::Status WatchAllUntilLines(Commands& commands, int lines) {
    absl::Status status = absl::UnknownError("not finished");
    std::thread watcher([&] { status = commands.Watch(""); });
    const bool printed = WaitFor([&] {
      const std::string text = out_.contents();
      return std::count(text.begin(), text.end(), '\n') == lines;
    });
    EXPECT_TRUE(printed) << out_.contents();
    EXPECT_TRUE(interrupt_.Trigger());  // Ctrl-C
    watcher.join();
    return status;
  }

  std::unique_ptr<FakeGpufedServer> server_;
  SyncStream out_;
  std::ostringstream err_;
  Interrupt interrupt_;
};

TEST_F(CommandsTest, SubmitSendsSpecTokenAndDeadline) {
  Commands commands(Env());
  const absl::Time before = absl::Now();
  ASSERT_OK(commands.Submit({Doc("train")}));
  EXPECT_EQ(out_.contents(), "workload/1 train created\n");
  ASSERT_THAT(server_->submits(), SizeIs(1));
  EXPECT_EQ(server_->submits()[0].spec().name(), "train");
  EXPECT_THAT(server_->authorizations(), ElementsAre("Bearer gpf_secret"));
  // The call carried the 10 s default deadline.
  const absl::Time deadline = absl::FromChrono(server_->deadlines()[0]);
  EXPECT_GT(deadline, before + absl::Seconds(9));
  EXPECT_LT(deadline, absl::Now() + absl::Seconds(11));
}

TEST_F(CommandsTest, NoTokenSendsNoAuthorization) {
  CommandEnv env = Env();
  env.token.clear();
  Commands commands(std::move(env));
  ASSERT_OK(commands.Submit({Doc("train")}));
  EXPECT_THAT(server_->authorizations(), ElementsAre(""));
}

TEST_F(CommandsTest, UnauthenticatedWithoutTokenSaysHowToGiveOne) {
  server_->RequireToken("gpf_secret");
  CommandEnv env = Env();
  env.token.clear();
  Commands commands(std::move(env));
  const absl::Status status = commands.Get("1");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(status.message(), HasSubstr("--token"));
}

TEST_F(CommandsTest, SubmitRetriesUnavailableWithTheSameKeyAndCreatesOneWorkload) {
  // The first two replies are lost after the server committed: a retry must not duplicate.
  server_->FailNextSubmits({grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection reset"),
                            grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection reset")},
                           /*commit_first=*/true);
  Commands commands(Env());
  const WorkloadDocument doc = Doc("train");
  ASSERT_OK(commands.Submit({doc}));
  const std::vector<v1::SubmitRequest> submits = server_->submits();
  ASSERT_THAT(submits, SizeIs(3));
  for (const v1::SubmitRequest& r : submits) {
    EXPECT_EQ(r.spec().idempotency_key(), doc.spec.idempotency_key());
  }
  EXPECT_EQ(server_->workload_count(), 1);
  EXPECT_EQ(out_.contents(), "workload/1 train created\n");
}

TEST_F(CommandsTest, SubmitGivesUpAfterThreeRetriesAndNamesTheKey) {
  server_->FailNextSubmits(std::vector<grpc::Status>(
      10, grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused")));
  Commands commands(Env());
  const WorkloadDocument doc = Doc("train");
  const absl::Status status = commands.Submit({doc});
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr(doc.spec.idempotency_key()));
  EXPECT_THAT(status.message(), HasSubstr(server_->address()));
  EXPECT_THAT(server_->submits(), SizeIs(4));
}

TEST_F(CommandsTest, OtherErrorsAreNotRetried) {
  Commands commands(Env());
  const absl::Status status = commands.Submit({Doc("")});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "spec.name: must not be empty");
  EXPECT_THAT(server_->submits(), SizeIs(1));
}

TEST_F(CommandsTest, SameKeyTwiceIsOneWorkload) {
  Commands commands(Env());
  const WorkloadDocument doc = Doc("train");
  ASSERT_OK(commands.Submit({doc}));
  ASSERT_OK(commands.Submit({doc}));
  EXPECT_EQ(server_->workload_count(), 1);
  EXPECT_THAT(out_.contents(), HasSubstr("workload/1 train unchanged"));
}

TEST_F(CommandsTest, MultiDocumentSubmitStopsAtTheFirstErrorAndSaysWhere) {
  Commands commands(Env());
  const absl::Status status = commands.Submit(
      {Doc("a", "batch.yaml:1"), Doc("", "batch.yaml:5"), Doc("c", "batch.yaml:9")});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "batch.yaml:5: spec.name: must not be empty");
  EXPECT_EQ(out_.contents(), "workload/1 a created\n");
  EXPECT_THAT(err_.str(), HasSubstr("1 workload(s) were submitted before this error: 1"));
  EXPECT_EQ(server_->workload_count(), 1);
}

TEST_F(CommandsTest, SubmitJsonIsOneLinePerWorkload) {
  Commands commands(Env(OutputFormat::kJson));
  ASSERT_OK(commands.Submit({Doc("a"), Doc("b")}));
  const std::vector<std::string> lines = absl::StrSplit(out_.contents(), '\n', absl::SkipEmpty());
  ASSERT_THAT(lines, SizeIs(2));
  EXPECT_EQ(nlohmann::json::parse(lines[0])["workload"]["spec"]["name"], "a");
  EXPECT_EQ(nlohmann::json::parse(lines[1])["workload"]["spec"]["name"], "b");
  EXPECT_EQ(nlohmann::json::parse(lines[1])["created"], true);
}

TEST_F(CommandsTest, GetShowsDetailOrNotFound) {
  const std::string id = AddWorkload("infer", v1::WORKLOAD_STATE_PENDING);
  Commands commands(Env());
  ASSERT_OK(commands.Get(id));
  EXPECT_THAT(out_.contents(), HasSubstr("Name:             infer\n"));
  EXPECT_EQ(commands.Get("999").code(), absl::StatusCode::kNotFound);
}

TEST_F(CommandsTest, ExplainPrintsTheStateAndTheReason) {
  const std::string id = AddWorkload("train", v1::WORKLOAD_STATE_PENDING);
  server_->SetExplanation(id,
                          "waiting for capacity: needs 8 GPUs of H100-80GB, same_nvlink_domain; "
                          "14 free GPUs (14 H100-80GB) across 3 clusters, but no NVLink domain "
                          "has 8 free (largest: 6 on dgx/dgx-03-nvl)",
                          /*never_fits=*/false);
  Commands commands(Env());
  ASSERT_OK(commands.Explain(id));
  EXPECT_EQ(out_.contents(),
            "Workload 1 (demo/default/train): PENDING\n"
            "waiting for capacity: needs 8 GPUs of H100-80GB, same_nvlink_domain; 14 free GPUs "
            "(14 H100-80GB) across 3 clusters, but no NVLink domain has 8 free (largest: 6 on "
            "dgx/dgx-03-nvl)\n");
  EXPECT_THAT(out_.contents(), Not(HasSubstr("Waiting will not help")));
  EXPECT_THAT(server_->authorizations(), ElementsAre("Bearer gpf_secret"));
}

TEST_F(CommandsTest, ExplainSaysWhenWaitingWillNotHelp) {
  const std::string id = AddWorkload("huge", v1::WORKLOAD_STATE_PENDING);
  server_->SetExplanation(id,
                          "no cluster can ever hold it: needs 8 GPUs of H200, but no cluster has "
                          "GPUs that match (GPU models in the pool: H100-80GB, L4)",
                          /*never_fits=*/true);
  Commands commands(Env());
  ASSERT_OK(commands.Explain(id));
  const std::vector<std::string> lines = absl::StrSplit(out_.contents(), '\n', absl::SkipEmpty());
  ASSERT_THAT(lines, SizeIs(3)) << out_.contents();
  EXPECT_EQ(lines[0], "Workload 1 (demo/default/huge): PENDING");
  EXPECT_EQ(lines[1],
            "no cluster can ever hold it: needs 8 GPUs of H200, but no cluster has GPUs that "
            "match (GPU models in the pool: H100-80GB, L4)");
  EXPECT_THAT(lines[2], ::testing::StartsWith("Waiting will not help: "));
}

TEST_F(CommandsTest, ExplainPlacedWorkloadShowsWhereItIs) {
  const std::string id = AddWorkload("serve", v1::WORKLOAD_STATE_RUNNING);
  server_->SetExplanation(id, "RUNNING on sim-a (2 replicas)", false);
  Commands commands(Env());
  ASSERT_OK(commands.Explain(id));
  EXPECT_EQ(out_.contents(),
            "Workload 1 (demo/default/serve): RUNNING\nRUNNING on sim-a (2 replicas)\n");
}

TEST_F(CommandsTest, ExplainJsonIsTheWholeResponse) {
  const std::string id = AddWorkload("train", v1::WORKLOAD_STATE_PENDING);
  server_->SetExplanation(id, "fits now on sim-b; the scheduler places it in its next cycle",
                          /*never_fits=*/false, "sim-b");
  Commands commands(Env(OutputFormat::kJson));
  ASSERT_OK(commands.Explain(id));
  const std::vector<std::string> lines = absl::StrSplit(out_.contents(), '\n', absl::SkipEmpty());
  ASSERT_THAT(lines, SizeIs(1)) << "one JSON object on one line";
  const nlohmann::json json = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(json["workload"]["id"], id);
  EXPECT_EQ(json["workload"]["state"], "WORKLOAD_STATE_PENDING");
  EXPECT_EQ(json["explanation"], "fits now on sim-b; the scheduler places it in its next cycle");
  EXPECT_EQ(json["never_fits"], false);
  EXPECT_EQ(json["fits_now_on"], "sim-b");
}

TEST_F(CommandsTest, ExplainEscapesControlCharactersFromTheServer) {
  const std::string id = AddWorkload("evil\x1b[2J", v1::WORKLOAD_STATE_PENDING);
  server_->SetExplanation(id, "line one\nline two\x1b]0;owned\x07", false);
  Commands commands(Env());
  ASSERT_OK(commands.Explain(id));
  EXPECT_EQ(out_.contents(),
            "Workload 1 (demo/default/evil\\x1b[2J): PENDING\n"
            "line one\\nline two\\x1b]0;owned\\x07\n");
}

TEST_F(CommandsTest, ExplainErrorsComeBackAsTheServerSentThem) {
  Commands commands(Env());
  EXPECT_EQ(commands.Explain("999").code(), absl::StatusCode::kNotFound);
  const absl::Status bad = commands.Explain("abc");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("id: "));
  EXPECT_EQ(out_.contents(), "");
}

// Two clusters as a cost-minded workload ruled to "eu" meets them: dgx is allowed and chosen,
// with a committed and an unpriced spot offer besides; cloud-us breaks the rule.
std::vector<v1::ClusterCandidate> Candidates() {
  std::vector<v1::ClusterCandidate> candidates(2);
  v1::ClusterCandidate& dgx = candidates[0];
  dgx.set_cluster("dgx");
  dgx.set_allowed(true);
  dgx.set_chosen(true);
  v1::RuleCheck* rule = dgx.add_rules();
  rule->set_rule("jurisdiction");
  rule->set_passed(true);
  rule->set_detail("eu");
  rule = dgx.add_rules();
  rule->set_rule("max RTT");
  rule->set_passed(true);
  rule->set_detail("9 ms from eu-west");
  v1::OfferCheck* offer = dgx.add_offers();
  offer->set_gpu_model("H100-80GB");
  offer->set_capacity_type(v1::CAPACITY_TYPE_COMMITTED);
  offer->set_price_per_hour_micros(0);
  offer->mutable_rtt()->set_nanos(9'000'000);
  offer->set_key(0);
  offer->set_fits_now(true);
  offer = dgx.add_offers();
  offer->set_gpu_model("H100-80GB");
  offer->set_capacity_type(v1::CAPACITY_TYPE_SPOT);
  offer->mutable_rtt()->set_nanos(9'000'000);
  offer->set_key(std::numeric_limits<double>::infinity());
  offer->set_refused("spot not tolerated");
  v1::ClusterCandidate& us = candidates[1];
  us.set_cluster("cloud-us");
  rule = us.add_rules();
  rule->set_rule("jurisdiction");
  rule->set_passed(false);
  rule->set_detail("us");
  rule = us.add_rules();
  rule->set_rule("max RTT");
  rule->set_passed(false);
  rule->set_detail("none declared from eu-west");
  offer = us.add_offers();
  offer->set_gpu_model("A100-80GB");
  offer->set_capacity_type(v1::CAPACITY_TYPE_ON_DEMAND);
  offer->set_price_per_hour_micros(8'200'000);
  offer->set_key(8'200'000);
  return candidates;
}

TEST_F(CommandsTest, ExplainShowsEveryCandidateClusterAfterTheReason) {
  const std::string id = AddWorkload("train", v1::WORKLOAD_STATE_PENDING);
  server_->SetExplanation(id, "fits now on dgx; the scheduler places it in its next cycle",
                          /*never_fits=*/false, "dgx");
  server_->SetExplainCandidates(id, v1::OBJECTIVE_COST, Candidates());
  Commands commands(Env());
  ASSERT_OK(commands.Explain(id));
  EXPECT_EQ(out_.contents(),
            "Workload 1 (demo/default/train): PENDING\n"
            "fits now on dgx; the scheduler places it in its next cycle\n"
            "\n"
            "Objective: cost\n"
            "CLUSTER    ALLOWED   CHOSEN   RULES                                                   "
            "        "
            "MODEL       CAPACITY    PRICE/H    RTT   KEY    REFUSED              FITS-NOW\n"
            "dgx        yes       yes      jurisdiction=eu ok; max RTT=9 ms from eu-west ok        "
            "        "
            "H100-80GB   committed   0.00       9ms   0.00   -                    yes\n"
            "                                                                                      "
            "        "
            "H100-80GB   spot        unpriced   9ms   last   spot not tolerated   no\n"
            "cloud-us   no        -        jurisdiction=us FAIL; max RTT=none declared from "
            "eu-west FAIL   "
            "A100-80GB   on-demand   8.20       -     8.20   -                    no\n");
}

TEST_F(CommandsTest, ExplainJsonCarriesTheCandidates) {
  const std::string id = AddWorkload("train", v1::WORKLOAD_STATE_PENDING);
  server_->SetExplainCandidates(id, v1::OBJECTIVE_COST, Candidates());
  Commands commands(Env(OutputFormat::kJson));
  ASSERT_OK(commands.Explain(id));
  const std::vector<std::string> lines = absl::StrSplit(out_.contents(), '\n', absl::SkipEmpty());
  ASSERT_THAT(lines, SizeIs(1)) << "one JSON object on one line";
  const nlohmann::json json = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(json["objective"], "OBJECTIVE_COST");
  ASSERT_EQ(json["candidates"].size(), 2u);
  const nlohmann::json& dgx = json["candidates"][0];
  EXPECT_EQ(dgx["cluster"], "dgx");
  EXPECT_EQ(dgx["chosen"], true);
  EXPECT_EQ(dgx["rules"][1]["detail"], "9 ms from eu-west");
  // Free (committed) and unpriced are told apart: an unpriced offer has no price at all.
  EXPECT_EQ(dgx["offers"][0]["price_per_hour_micros"], "0");
  EXPECT_EQ(dgx["offers"][0]["rtt"], "0.009s");
  EXPECT_FALSE(dgx["offers"][1].contains("price_per_hour_micros")) << dgx["offers"][1].dump();
  EXPECT_EQ(dgx["offers"][1]["key"], "Infinity");
  EXPECT_EQ(dgx["offers"][1]["refused"], "spot not tolerated");
  const nlohmann::json& us = json["candidates"][1];
  EXPECT_EQ(us["allowed"], false);
  EXPECT_EQ(us["rules"][0]["passed"], false);
  EXPECT_FALSE(us["offers"][0].contains("rtt"));
  EXPECT_EQ(us["offers"][0]["key"], 8200000);
}

v1::WhatIfResponse FitsOnDgx() {
  v1::WhatIfResponse r;
  v1::Assignment& a = *r.mutable_assignment();
  a.set_cluster("dgx");
  a.set_epoch(2);
  v1::ReplicaAssignment& replica = *a.add_replicas();
  replica.set_node("dgx-01");
  replica.add_gpu_uuids("GPU-a");
  replica.add_gpu_uuids("GPU-b");
  replica.add_gpu_indices(0);
  replica.add_gpu_indices(1);
  r.set_price_per_hour_micros(6'400'000);
  r.set_estimated_cost_micros(9'600'000);
  r.set_estimated_hours(1.5);
  r.set_objective(v1::OBJECTIVE_COST);
  for (v1::ClusterCandidate& c : Candidates()) *r.add_candidates() = std::move(c);
  return r;
}

TEST_F(CommandsTest, WhatIfSaysWhereItWouldGoAndWhatItWouldCostAndSubmitsNothing) {
  server_->SetWhatIf(FitsOnDgx());
  WorkloadDocument doc = Doc("train");
  doc.spec.mutable_estimated_duration()->set_seconds(5400);
  Commands commands(Env());
  ASSERT_OK(commands.WhatIf({doc}));
  const std::string out = out_.contents();
  EXPECT_THAT(out, ::testing::StartsWith("Workload:        train (demo/default), not submitted\n"
                                         "Would go to:     dgx\n"
                                         "Replica 0:       dgx-01 GPUs 0,1 (GPU-a,GPU-b)\n"
                                         "Price:           6.40 per hour\n"
                                         "Estimated cost:  9.60 over 1h30m\n"
                                         "Objective:       cost\n"
                                         "\n"
                                         "CLUSTER    ALLOWED   CHOSEN   RULES"))
      << out;
  EXPECT_THAT(out, HasSubstr("spot        unpriced   9ms   last   spot not tolerated   no\n"));
  ASSERT_THAT(server_->what_ifs(), SizeIs(1));
  EXPECT_EQ(server_->what_ifs()[0].spec().name(), "train");
  EXPECT_THAT(server_->submits(), SizeIs(0));
  EXPECT_EQ(server_->workload_count(), 0);
  EXPECT_THAT(server_->authorizations(), ElementsAre("Bearer gpf_secret"));
}

TEST_F(CommandsTest, WhatIfThatDoesNotFitSaysWhyAndWhetherWaitingHelps) {
  v1::WhatIfResponse r;
  r.set_explanation("no cluster in jurisdiction de offers 8 GPUs");
  r.set_reason_code("NoClusterAllowed");
  r.set_never_fits(true);
  r.set_estimated_hours(1);
  r.set_objective(v1::OBJECTIVE_COST);
  server_->SetWhatIf(r);
  Commands commands(Env());
  ASSERT_OK(commands.WhatIf({Doc("train")}));
  const std::vector<std::string> lines = absl::StrSplit(out_.contents(), '\n', absl::SkipEmpty());
  ASSERT_THAT(lines, SizeIs(5)) << out_.contents();
  EXPECT_EQ(lines[1], "Would go to:  nowhere now");
  EXPECT_EQ(lines[2], "Why:          no cluster in jurisdiction de offers 8 GPUs");
  EXPECT_EQ(lines[3], "Objective:    cost");
  EXPECT_THAT(lines[4], ::testing::StartsWith("Waiting will not help: "));
}

TEST_F(CommandsTest, WhatIfOnUnpricedCapacityHasNoCost) {
  v1::WhatIfResponse r = FitsOnDgx();
  r.clear_price_per_hour_micros();
  r.clear_estimated_cost_micros();
  r.set_estimated_hours(1);
  r.clear_candidates();
  server_->SetWhatIf(r);
  Commands commands(Env());
  ASSERT_OK(commands.WhatIf({Doc("train")}));
  EXPECT_THAT(out_.contents(),
              HasSubstr("Price:           unpriced (a GPU it would take has no price in force)\n"
                        "Estimated cost:  unknown (unpriced)\n"));
  EXPECT_THAT(out_.contents(), Not(HasSubstr("CLUSTER")));
}

TEST_F(CommandsTest, WhatIfJsonIsOneLinePerDocumentAndErrorsNameTheDocument) {
  server_->SetWhatIf(FitsOnDgx());
  Commands commands(Env(OutputFormat::kJson));
  ASSERT_OK(commands.WhatIf({Doc("a"), Doc("b")}));
  const std::vector<std::string> lines = absl::StrSplit(out_.contents(), '\n', absl::SkipEmpty());
  ASSERT_THAT(lines, SizeIs(2));
  const nlohmann::json json = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(json["assignment"]["cluster"], "dgx");
  EXPECT_EQ(json["price_per_hour_micros"], "6400000");
  EXPECT_EQ(json["estimated_cost_micros"], "9600000");
  EXPECT_EQ(json["estimated_hours"], 1.5);
  EXPECT_EQ(json["candidates"].size(), 2u);

  const absl::Status bad = commands.WhatIf({Doc("ok"), Doc("", "batch.yaml:9")});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(), "batch.yaml:9: spec.name: must not be empty");
  EXPECT_THAT(server_->submits(), SizeIs(0));
}

TEST_F(CommandsTest, ListPagesUpToTheLimit) {
  for (int i = 0; i < 130; ++i) AddWorkload("w" + std::to_string(i), v1::WORKLOAD_STATE_PENDING);
  server_->SetMaxPageSize(50);
  Commands commands(Env(OutputFormat::kJson));
  ListOptions options;
  options.limit = 120;
  ASSERT_OK(commands.List(options));
  const nlohmann::json json = nlohmann::json::parse(out_.contents());
  ASSERT_EQ(json["workloads"].size(), 120u);
  EXPECT_EQ(json["workloads"][0]["id"], "130");  // Newest first, as the server sent them.
  EXPECT_EQ(json["next_page_token"], "120");
  const std::vector<v1::ListWorkloadsRequest> requests = server_->list_requests();
  ASSERT_THAT(requests, SizeIs(3));
  EXPECT_EQ(requests[0].page_size(), 120u);
  EXPECT_EQ(requests[1].page_size(), 70u);
  EXPECT_EQ(requests[1].page_token(), "50");
  EXPECT_EQ(requests[2].page_size(), 20u);
}

TEST_F(CommandsTest, ListLimitZeroFetchesEverything) {
  for (int i = 0; i < 130; ++i) AddWorkload("w" + std::to_string(i), v1::WORKLOAD_STATE_PENDING);
  server_->SetMaxPageSize(50);
  Commands commands(Env(OutputFormat::kJson));
  ListOptions options;
  options.limit = 0;
  ASSERT_OK(commands.List(options));
  const nlohmann::json json = nlohmann::json::parse(out_.contents());
  EXPECT_EQ(json["workloads"].size(), 130u);
  EXPECT_EQ(json["next_page_token"], "");
}

TEST_F(CommandsTest, ListFiltersAndTableNotesTruncation) {
  AddWorkload("a", v1::WORKLOAD_STATE_RUNNING);
  AddWorkload("b", v1::WORKLOAD_STATE_PENDING);
  AddWorkload("c", v1::WORKLOAD_STATE_RUNNING, "other");
  AddWorkload("d", v1::WORKLOAD_STATE_RUNNING);
  Commands commands(Env());
  ListOptions options;
  options.tenant = "demo";
  options.states = {v1::WORKLOAD_STATE_RUNNING};
  options.limit = 1;
  ASSERT_OK(commands.List(options));
  EXPECT_EQ(server_->list_requests()[0].tenant(), "demo");
  EXPECT_THAT(server_->list_requests()[0].states(), ElementsAre(v1::WORKLOAD_STATE_RUNNING));
  const std::vector<std::string> lines = absl::StrSplit(out_.contents(), '\n', absl::SkipEmpty());
  ASSERT_THAT(lines, SizeIs(2));
  EXPECT_THAT(lines[0], HasSubstr("ID   NAME   TENANT/PROJECT"));
  EXPECT_THAT(lines[1], HasSubstr("4    d      demo/default     RUNNING"));
  EXPECT_THAT(err_.str(), HasSubstr("raise --limit"));
}

TEST_F(CommandsTest, CancelReportsWhatHappened) {
  const std::string pending = AddWorkload("a", v1::WORKLOAD_STATE_PENDING);
  const std::string running = AddWorkload("b", v1::WORKLOAD_STATE_RUNNING);
  Commands commands(Env());
  ASSERT_OK(commands.Cancel(pending, "no longer needed"));
  ASSERT_OK(commands.Cancel(running, ""));
  EXPECT_EQ(out_.contents(),
            "workload/1 cancelled\n"
            "workload/2 cancel requested (RUNNING)\n");
  // Cancel is not retried and a terminal workload is the server's FAILED_PRECONDITION.
  EXPECT_EQ(commands.Cancel(pending, "").code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CommandsTest, WatchOneWorkloadEndsWhenItEnds) {
  const std::string id = AddWorkload("train", v1::WORKLOAD_STATE_PENDING);
  server_->SetWatchScript(
      {v1::WORKLOAD_STATE_PLACED, v1::WORKLOAD_STATE_RUNNING, v1::WORKLOAD_STATE_SUCCEEDED});
  Commands commands(Env());
  ASSERT_OK(commands.Watch(id));
  const std::vector<std::string> lines = absl::StrSplit(out_.contents(), '\n', absl::SkipEmpty());
  ASSERT_THAT(lines, SizeIs(4));
  EXPECT_THAT(lines[0], HasSubstr("  1  train  PENDING"));
  EXPECT_THAT(lines[1], HasSubstr("PENDING -> PLACED  cluster=sim-a"));
  EXPECT_THAT(lines[3], HasSubstr("RUNNING -> SUCCEEDED  cluster=sim-a  exit_code=0"));
  // Watch has no deadline: it may legitimately run for days.
  EXPECT_EQ(server_->deadlines().back(), std::chrono::system_clock::time_point::max());
}

TEST_F(CommandsTest, WatchJsonIsOneEventPerLine) {
  const std::string id = AddWorkload("train", v1::WORKLOAD_STATE_RUNNING);
  server_->SetWatchScript({v1::WORKLOAD_STATE_FAILED});
  Commands commands(Env(OutputFormat::kJson));
  ASSERT_OK(commands.Watch(id));
  const std::vector<std::string> lines = absl::StrSplit(out_.contents(), '\n', absl::SkipEmpty());
  ASSERT_THAT(lines, SizeIs(2));
  EXPECT_EQ(nlohmann::json::parse(lines[1])["to_state"], "WORKLOAD_STATE_FAILED");
  EXPECT_EQ(nlohmann::json::parse(lines[1])["from_state"], "WORKLOAD_STATE_RUNNING");
}

TEST_F(CommandsTest, WatchEndingEarlyIsAnError) {
  const std::string id = AddWorkload("train", v1::WORKLOAD_STATE_PENDING);
  Commands commands(Env());
  const absl::Status status = commands.Watch(id);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("before workload 1 finished"));
  EXPECT_EQ(commands.Watch("999").code(), absl::StatusCode::kNotFound);
}

TEST_F(CommandsTest, WatchOfOneWorkloadCutByTheServerResumesAfterItsLastVersion) {
  const std::string id = AddWorkload("train", v1::WORKLOAD_STATE_PENDING);
  server_->SetWatchScript(
      {v1::WORKLOAD_STATE_PLACED, v1::WORKLOAD_STATE_RUNNING, v1::WORKLOAD_STATE_SUCCEEDED});
  // A reader that fell behind, then a server that went away, each after one more step.
  server_->DropNextWatches({{1, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "fell behind")},
                            {1, grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone")}});
  Commands commands(Env());
  ASSERT_OK(commands.Watch(id));
  // Every state once, in order: nothing lost, nothing repeated.
  const std::vector<std::string> lines = absl::StrSplit(out_.contents(), '\n', absl::SkipEmpty());
  ASSERT_THAT(lines, SizeIs(4));
  EXPECT_THAT(lines[1], HasSubstr("PENDING -> PLACED"));
  EXPECT_THAT(lines[2], HasSubstr("PLACED -> RUNNING"));
  EXPECT_THAT(lines[3], HasSubstr("RUNNING -> SUCCEEDED"));
  const std::vector<v1::WatchRequest> requests = server_->watch_requests();
  ASSERT_THAT(requests, SizeIs(3));
  EXPECT_EQ(requests[0].after_version(), 0);
  EXPECT_EQ(requests[1].after_version(), 2);  // PLACED
  EXPECT_EQ(requests[2].after_version(), 3);  // RUNNING
  EXPECT_THAT(err_.str(), HasSubstr("watching again"));
}

TEST_F(CommandsTest, WatchGivesUpAfterItsRetriesWithoutAnEvent) {
  const std::string id = AddWorkload("train", v1::WORKLOAD_STATE_PENDING);
  server_->SetWatchScript({v1::WORKLOAD_STATE_PLACED});
  // The first stream delivers its events; then every stream ends before any event. A stream of
  // one workload always begins with its state, so each drop is of a workload seen at that version.
  std::vector<FakeGpufedServer::WatchDrop> drops(
      10, {0, grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone")});
  drops[0].steps = 1;
  server_->DropNextWatches(drops);
  CommandEnv env = Env();
  env.retry.max_retries = 3;
  Commands commands(std::move(env));
  EXPECT_EQ(commands.Watch(id).code(), absl::StatusCode::kUnavailable);
  // The first stream, then three more in a row without an event.
  EXPECT_THAT(server_->watch_requests(), SizeIs(4));
}

TEST_F(CommandsTest, WatchNeverReopensAfterAnErrorItCannotOutwait) {
  const std::string id = AddWorkload("train", v1::WORKLOAD_STATE_PENDING);
  server_->DropNextWatches({{0, grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "not yours")}});
  Commands commands(Env());
  EXPECT_EQ(commands.Watch(id).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(server_->watch_requests(), SizeIs(1));
}

TEST_F(CommandsTest, WatchOfEveryWorkloadResumesFromTheLastEventsResumePoint) {
  AddWorkload("a", v1::WORKLOAD_STATE_PENDING);
  AddWorkload("b", v1::WORKLOAD_STATE_RUNNING);
  server_->DropNextWatches({{0, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "behind")}});
  Commands commands(Env());
  // Two events from the first stream, two more from the second.
  EXPECT_OK(WatchAllUntilLines(commands, 4));
  const std::vector<v1::WatchRequest> requests = server_->watch_requests();
  ASSERT_THAT(requests, SizeIs(2));
  EXPECT_FALSE(requests[0].has_resume_after());
  // The fake's events carry resume_after = time = create seconds + version; "b" came last.
  ASSERT_TRUE(requests[1].has_resume_after());
  EXPECT_EQ(requests[1].resume_after().seconds(), testing::kFakeCreateSeconds + 1);
}

TEST_F(CommandsTest, WatchAllRunsUntilInterruptedAndThenEndsCleanly) {
  AddWorkload("a", v1::WORKLOAD_STATE_PENDING);
  AddWorkload("b", v1::WORKLOAD_STATE_RUNNING);
  Commands commands(Env());
  EXPECT_OK(WatchAllUntilLines(commands, 2));
  EXPECT_TRUE(WaitFor([&] { return server_->watch_all_cancelled() == 1; }));
  // A second Ctrl-C would find no handler: main() exits the hard way.
  EXPECT_FALSE(interrupt_.Trigger());
}

TEST_F(CommandsTest, WatchStopsWhenNobodyReadsTheOutput) {
  AddWorkload("a", v1::WORKLOAD_STATE_PENDING);
  CommandEnv env = Env();
  std::ostringstream closed;
  closed.setstate(std::ios::badbit);  // Like stdout after the reader of a pipe went away.
  env.out = &closed;
  Commands commands(std::move(env));
  EXPECT_OK(commands.Watch(""));
  EXPECT_TRUE(WaitFor([&] { return server_->watch_all_cancelled() == 1; }));
}

std::vector<v1::Cluster> OneCluster() {
  v1::Cluster c;
  c.set_name("edge-l4");
  c.mutable_info()->set_provider("edge");
  c.set_state(v1::CLUSTER_STATE_DEGRADED);
  c.set_gpus_total(1);
  c.set_gpus_free(0);
  v1::Node& node = *c.add_nodes();
  node.set_name("edge-01");
  node.set_schedulable(true);
  v1::Gpu& gpu = *node.add_gpus();
  gpu.set_model("L4");
  gpu.set_memory_mib(23034);
  gpu.set_allocated_to("17");
  gpu.set_healthy(false);
  return {c};
}

TEST_F(CommandsTest, ClustersTableCountsNodes) {
  server_->SetClusters(OneCluster());
  Commands commands(Env());
  ASSERT_OK(commands.Clusters(/*include_nodes=*/false));
  EXPECT_TRUE(server_->cluster_requests()[0].include_nodes());
  EXPECT_THAT(out_.contents(),
              HasSubstr("edge-l4   edge       -        degraded   1       1      0"));
  EXPECT_THAT(out_.contents(), ::testing::Not(HasSubstr("ALLOCATED_TO")));
}

TEST_F(CommandsTest, ClustersWithNodesShowsGpus) {
  server_->SetClusters(OneCluster());
  Commands commands(Env());
  ASSERT_OK(commands.Clusters(/*include_nodes=*/true));
  EXPECT_THAT(out_.contents(), HasSubstr("ALLOCATED_TO"));
  EXPECT_THAT(
      out_.contents(),
      HasSubstr(
          "edge-l4   edge-01   -      0     L4      23034MiB   -        -     unhealthy   17"));
}

TEST_F(CommandsTest, ClustersJsonOmitsNodesUnlessAsked) {
  server_->SetClusters(OneCluster());
  Commands commands(Env(OutputFormat::kJson));
  ASSERT_OK(commands.Clusters(/*include_nodes=*/false));
  EXPECT_FALSE(server_->cluster_requests()[0].include_nodes());
  const nlohmann::json json = nlohmann::json::parse(out_.contents());
  EXPECT_EQ(json["clusters"][0]["name"], "edge-l4");
  EXPECT_EQ(json["clusters"][0]["state"], "CLUSTER_STATE_DEGRADED");
  EXPECT_TRUE(json["clusters"][0]["nodes"].empty());
}

TEST_F(CommandsTest, TenantsProjectsAndTokens) {
  Commands commands(Env());
  ASSERT_OK(commands.CreateTenant("acme", "Acme Corp"));
  ASSERT_OK(commands.CreateProject("acme", "research"));
  ASSERT_OK(commands.ListTenants());
  ASSERT_OK(commands.ListProjects("acme"));
  EXPECT_EQ(out_.contents(),
            "tenant/acme created\n"
            "project/acme/research created\n"
            "NAME   DISPLAY NAME   AGE\n"
            "acme   Acme Corp      90s\n"
            "TENANT   NAME       AGE\n"
            "acme     research   90s\n");
  EXPECT_EQ(commands.CreateTenant("acme", "").code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(CommandsTest, QuotasAreSetShownAndDeletedInGpus) {
  Commands commands(Env());
  QuotaOptions set;
  set.tenant = "acme";
  set.resource = "H100-80GB";
  set.guaranteed = "32";
  set.limit = "48.5";
  ASSERT_OK(commands.SetQuota(set));
  QuotaOptions project = set;
  project.project = "research";
  project.resource = "1g.10gb";
  project.guaranteed = "0.5";
  project.limit = "";
  project.overcommit = true;
  ASSERT_OK(commands.SetQuota(project));
  ASSERT_OK(commands.GetQuotas("acme"));
  EXPECT_EQ(out_.contents(),
            "TENANT   PROJECT   RESOURCE    GUARANTEED   LIMIT   NOTE\n"
            "acme     -         H100-80GB   32           48.5\n"
            "TENANT   PROJECT    RESOURCE   GUARANTEED   LIMIT   NOTE\n"
            "acme     research   1g.10gb    0.5          -       overcommitted\n"
            "TENANT   PROJECT    RESOURCE    GUARANTEED   LIMIT   NOTE\n"
            "acme     -          H100-80GB   32           48.5\n"
            "acme     research   1g.10gb     0.5          -       overcommitted\n");
  EXPECT_THAT(err_.str(), HasSubstr("warning"));
  // Amounts are checked before anything is sent.
  QuotaOptions bad = set;
  bad.guaranteed = "1.2345";
  EXPECT_EQ(commands.SetQuota(bad).code(), absl::StatusCode::kInvalidArgument);
  const size_t before = out_.contents().size();
  ASSERT_OK(commands.QuotaUsage("acme"));
  EXPECT_EQ(out_.contents().substr(before),
            "TENANT   PROJECT    RESOURCE    USED     GUARANTEED   LIMIT   BORROWED\n"
            "acme     -          H100-80GB   36.375   32           48.5    4.375\n"
            "acme     research   1g.10gb     0.375    0.5          0.5     0\n");
  ASSERT_OK(commands.DeleteQuota("acme", "research", "1g.10gb"));
  EXPECT_EQ(commands.DeleteQuota("acme", "research", "1g.10gb").code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CommandsTest, TokenSecretAloneOnStdout) {
  Commands commands(Env());
  TokenOptions options;
  options.subject = "alice";
  options.role = v1::ROLE_TENANT_USER;
  options.tenant = "acme";
  ASSERT_OK(commands.CreateToken(options));
  EXPECT_EQ(out_.contents(), "gpf_fake_1\n");
  EXPECT_THAT(err_.str(), HasSubstr("alice (tenant-user)"));
  ASSERT_THAT(server_->token_requests(), SizeIs(1));
  EXPECT_EQ(server_->token_requests()[0].role(), v1::ROLE_TENANT_USER);
  EXPECT_EQ(server_->token_requests()[0].tenant(), "acme");
}

TEST(SpecFromFlagsTest, MapsEveryFlag) {
  SubmitFlags flags;
  flags.name = "x";
  flags.workload_class = "Inference";
  flags.priority = -3;
  flags.replicas = 2;
  flags.gpus = 4;
  flags.models = {"A100-80GB", "H100-80GB"};
  flags.min_gpu_memory_mib = 40000;
  flags.topology = "same_rack";
  flags.duration = "1m30s";
  flags.image = "img:1";
  flags.env = {"A=1", "B=x=y"};
  flags.sim_fail = true;
  flags.sim_exit_code = 7;
  flags.command = {"python", "serve.py"};
  absl::StatusOr<v1::WorkloadSpec> spec = SpecFromFlags(flags);
  ASSERT_OK(spec);
  EXPECT_EQ(spec->workload_class(), v1::WORKLOAD_CLASS_INFERENCE);
  EXPECT_EQ(spec->priority(), -3);
  EXPECT_EQ(spec->replicas(), 2u);
  EXPECT_EQ(spec->per_replica().gpus(), 4u);
  EXPECT_THAT(spec->gpu_models(), ElementsAre("A100-80GB", "H100-80GB"));
  EXPECT_EQ(spec->min_gpu_memory_mib(), 40000u);
  EXPECT_EQ(spec->topology(), v1::TOPOLOGY_REQUIREMENT_SAME_RACK);
  EXPECT_EQ(spec->estimated_duration().seconds(), 90);
  EXPECT_EQ(spec->run().image(), "img:1");
  EXPECT_EQ(spec->run().env().at("B"), "x=y");
  EXPECT_EQ(spec->run().sim_outcome(), v1::SIM_OUTCOME_FAIL);
  EXPECT_EQ(spec->run().sim_exit_code(), 7);
  EXPECT_THAT(spec->run().command(), ElementsAre("python", "serve.py"));
}

TEST(SpecFromFlagsTest, BadValuesNameTheFlag) {
  SubmitFlags flags;
  flags.duration = "soon";
  EXPECT_THAT(SpecFromFlags(flags).status().message(), HasSubstr("--duration: "));
  flags = {};
  flags.env = {"NOVALUE"};
  EXPECT_THAT(SpecFromFlags(flags).status().message(), HasSubstr("--env: "));
  flags = {};
  flags.topology = "same_planet";
  EXPECT_THAT(SpecFromFlags(flags).status().message(), HasSubstr("--topology: "));
}

TEST(SpecFromFlagsTest, MigProfileGpuShareAndHostResources) {
  SubmitFlags flags;
  flags.mig_profile = "1g.10gb";
  flags.cpu_millis = 2000;
  flags.memory_mib = 4096;
  absl::StatusOr<v1::WorkloadSpec> spec = SpecFromFlags(flags);
  ASSERT_OK(spec);
  EXPECT_EQ(spec->per_replica().mig_profile(), "1g.10gb");
  EXPECT_EQ(spec->per_replica().cpu_millis(), 2000u);
  EXPECT_EQ(spec->per_replica().memory_mib(), 4096u);

  flags = {};
  flags.gpu_milli = 0;  // given, even if zero: the server says what is wrong with it
  spec = SpecFromFlags(flags);
  ASSERT_OK(spec);
  EXPECT_EQ(spec->per_replica().kind_case(), v1::ReplicaResources::kGpuMilli);

  flags.mig_profile = "1g.10gb";
  EXPECT_EQ(SpecFromFlags(flags).status().message(),
            "--mig-profile: cannot be combined with --gpu-milli");
  flags = {};
  flags.gpu_milli = 500;
  flags.gpus = 2;
  EXPECT_EQ(SpecFromFlags(flags).status().message(),
            "--gpus: must be 1 (or left out) with --gpu-milli: a replica takes part of one GPU");
}

TEST(ApplySubmitDefaultsTest, FirstNonEmptyWinsAndKeysAreRandom) {
  v1::WorkloadSpec a;
  ApplySubmitDefaults(a, {"", "config-tenant"}, {"flag-project", "config-project"});
  EXPECT_EQ(a.tenant(), "config-tenant");
  EXPECT_EQ(a.project(), "flag-project");
  EXPECT_EQ(a.idempotency_key().size(), 32u);
  v1::WorkloadSpec b;
  b.set_tenant("own");
  b.set_idempotency_key("mine");
  ApplySubmitDefaults(b, {"flag"}, {});
  EXPECT_EQ(b.tenant(), "own");
  EXPECT_EQ(b.idempotency_key(), "mine");
  v1::WorkloadSpec c;
  ApplySubmitDefaults(c, {}, {});
  EXPECT_NE(a.idempotency_key(), c.idempotency_key());
}

}  // namespace
}  // namespace gpufed::cli
