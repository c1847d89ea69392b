// Conversions (api/convert.h). The agent protocol's batching (AssignMessages, CancelMessages): no
// message to an agent grows with the work its cluster holds; the service test
// (tests/service/hostile_input_test.cc) checks the same through a real stream. Routing: placement
// rules and declarations survive the trip to protos and back, and what the domain cannot
// represent is INVALID_ARGUMENT naming the field. Explain and what-if: every candidate's rules,
// offers (unpriced is not free) and the choice reach the proto. Nothing running.

#include "api/convert.h"

#include <chrono>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace gpufed::api {
namespace {

using ::google::protobuf::util::TimeUtil;
using ::gpufed::testing::IsOkAndHolds;
using ::gpufed::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// Workload `id` whose spec carries `payload` bytes in one env value, on one GPU of node n1.
Workload Sized(WorkloadId id, size_t payload) {
  Workload w;
  w.id = id;
  w.state = WorkloadState::kPlaced;
  w.spec.tenant = "acme";
  w.spec.project = "p";
  w.spec.name = absl::StrCat("job-", id);
  w.spec.workload_class = WorkloadClass::kBatch;
  w.spec.run.env["PAYLOAD"] = std::string(payload, 'x');
  w.assignment.cluster = "c1";
  ReplicaAssignment r;
  r.node = "n1";
  r.gpu_uuids = {absl::StrCat("GPU-", id)};
  r.gpu_indices = {0};
  w.assignment.replicas.push_back(r);
  return w;
}

// The ids, in order, of every assignment in `messages`.
std::vector<std::string> AssignedIds(const std::vector<v1::ServerMessage>& messages) {
  std::vector<std::string> ids;
  for (const v1::ServerMessage& m : messages) {
    for (const v1::WorkAssignment& a : m.assign().assignments()) ids.push_back(a.workload_id());
  }
  return ids;
}

std::vector<std::string> IdsOf(const std::vector<Workload>& workloads) {
  std::vector<std::string> ids;
  ids.reserve(workloads.size());
  for (const Workload& w : workloads) ids.push_back(absl::StrCat(w.id));
  return ids;
}

// Found by audit_rpc_fuzzer: a Timestamp past year 9999 overflowed the conversion (UBSan).
TEST(CheckedFromProtoTest, ATimestampOutOfRangeIsInvalidArgumentNamingTheField) {
  google::protobuf::Timestamp t;
  t.set_seconds(std::numeric_limits<int64_t>::max());
  EXPECT_THAT(CheckedFromProto("since", t),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("since")));
  t.set_seconds(0);
  t.set_nanos(-1);
  EXPECT_THAT(CheckedFromProto("until", t), StatusIs(absl::StatusCode::kInvalidArgument));
  t.set_seconds(1'700'000'000);
  t.set_nanos(5);
  EXPECT_THAT(CheckedFromProto("since", t), IsOkAndHolds(FromProto(t)));
  // A valid protobuf Timestamp (year 2570) that a Timestamp cannot hold: found by audit_rpc_fuzzer
  // under UBSan (corpus/audit_rpc/regress-until-year-2570), after the check above was in.
  t.set_seconds(18'944'020'384);
  t.set_nanos(0);
  EXPECT_THAT(CheckedFromProto("until", t),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("until")));
  t.set_seconds(-9'300'000'000);
  EXPECT_THAT(CheckedFromProto("since", t), StatusIs(absl::StatusCode::kInvalidArgument));
  // The last whole second a Timestamp holds, with the most nanos: accepted.
  t.set_seconds(9'223'372'035);
  t.set_nanos(999'999'999);
  EXPECT_THAT(CheckedFromProto("until", t), IsOkAndHolds(FromProto(t)));
}

TEST(AssignMessagesTest, NothingToSendIsNoMessage) {
  EXPECT_THAT(AssignMessages({}, 1 << 20), IsEmpty());
}

TEST(AssignMessagesTest, FewSmallAssignmentsGoInOneMessage) {
  const std::vector<Workload> workloads = {Sized(1, 10), Sized(2, 10), Sized(3, 10)};
  const std::vector<v1::ServerMessage> messages = AssignMessages(workloads, 1 << 20);
  ASSERT_THAT(messages, SizeIs(1));
  EXPECT_TRUE(messages[0].has_assign());
  EXPECT_EQ(AssignedIds(messages), IdsOf(workloads));
  // The whole assignment goes out, spec included.
  EXPECT_EQ(messages[0].assign().assignments(1).spec().run().env().at("PAYLOAD").size(), 10u);
  EXPECT_EQ(messages[0].assign().assignments(1).assignment().cluster(), "c1");
}

// Many assignments of mixed sizes: every one is sent once, in order, in messages of at most
// max_bytes; and the messages are full (a message ends only when the next assignment would not
// fit), so that their number does not grow beyond what the bytes need.
TEST(AssignMessagesTest, ManyAssignmentsGoInFullMessagesOfBoundedSize) {
  constexpr size_t kMax = 64 << 10;
  std::vector<Workload> workloads;
  for (WorkloadId id = 1; id <= 300; ++id) {
    workloads.push_back(Sized(id, static_cast<size_t>(id % 7) * 1500 + 100));
  }
  const std::vector<v1::ServerMessage> messages = AssignMessages(workloads, kMax);
  ASSERT_GT(messages.size(), 1u);
  EXPECT_EQ(AssignedIds(messages), IdsOf(workloads));
  size_t total = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const v1::ServerMessage& m = messages[i];
    ASSERT_TRUE(m.has_assign()) << i;
    ASSERT_GT(m.assign().assignments_size(), 0) << i;
    EXPECT_LE(m.assign().ByteSizeLong(), kMax) << "message " << i;
    total += m.assign().ByteSizeLong();
    if (i + 1 < messages.size()) {
      const size_t next = messages[i + 1].assign().assignments(0).ByteSizeLong();
      EXPECT_GT(m.assign().ByteSizeLong() + next,
                kMax - size_t{16} * (1 + m.assign().assignments_size()))
          << "message " << i << " ended early";
    }
  }
  EXPECT_LE(messages.size(), total / (kMax / 2) + 1);
}

// One assignment larger than the batch size still goes (alone): the per-spec limits bound it,
// not the batching.
TEST(AssignMessagesTest, AnAssignmentLargerThanABatchGoesAlone) {
  constexpr size_t kMax = 4096;
  const std::vector<Workload> workloads = {Sized(1, 100), Sized(2, 10000), Sized(3, 100)};
  const std::vector<v1::ServerMessage> messages = AssignMessages(workloads, kMax);
  ASSERT_THAT(messages, SizeIs(3));
  EXPECT_EQ(AssignedIds(messages), IdsOf(workloads));
  EXPECT_EQ(messages[1].assign().assignments_size(), 1);
  EXPECT_EQ(messages[1].assign().assignments(0).workload_id(), "2");
}

TEST(CancelMessagesTest, IdsGoInBatchesOfAtMostMaxIds) {
  EXPECT_THAT(CancelMessages({}, 3), IsEmpty());

  std::vector<WorkloadId> ids;
  for (WorkloadId id = 1; id <= 7; ++id) ids.push_back(id * 10);
  const std::vector<v1::ServerMessage> messages = CancelMessages(ids, 3);
  ASSERT_THAT(messages, SizeIs(3));
  std::vector<std::string> sent;
  for (const v1::ServerMessage& m : messages) {
    ASSERT_TRUE(m.has_cancel());
    EXPECT_LE(m.cancel().workload_ids_size(), 3);
    sent.insert(sent.end(), m.cancel().workload_ids().begin(), m.cancel().workload_ids().end());
  }
  EXPECT_EQ(messages[0].cancel().workload_ids_size(), 3);
  EXPECT_EQ(messages[2].cancel().workload_ids_size(), 1);
  EXPECT_EQ(sent, (std::vector<std::string>{"10", "20", "30", "40", "50", "60", "70"}));

  ASSERT_THAT(CancelMessages(ids, 7), SizeIs(1));
  EXPECT_THAT(CancelMessages(ids, 1), SizeIs(7));
}

// At the server's batch size, the largest id there is, 10,000 ids a message stay far below a
// receive limit of 4 MiB.
TEST(CancelMessagesTest, ABatchOfTheLargestIdsIsSmall) {
  const std::vector<WorkloadId> ids(25000, std::numeric_limits<WorkloadId>::max());
  const std::vector<v1::ServerMessage> messages = CancelMessages(ids, 10000);
  ASSERT_THAT(messages, SizeIs(3));
  for (const v1::ServerMessage& m : messages) EXPECT_LT(m.ByteSizeLong(), size_t{1} << 20);
}

// ---- Routing ----------------------------------------------------------------------------------

Timestamp At(int64_t unix_seconds) { return Timestamp(std::chrono::seconds(unix_seconds)); }

WorkloadSpec SpecWithPlacement() {
  WorkloadSpec s;
  s.tenant = "acme";
  s.project = "p";
  s.name = "serve";
  s.workload_class = WorkloadClass::kInference;
  s.placement.jurisdictions = {"eu", "de"};
  s.placement.compliance_labels = {"gdpr"};
  s.placement.providers = {"onprem", "aws"};
  s.placement.regions = {"eu-west-1"};
  s.placement.clusters = {"a", "b"};
  s.placement.denied_clusters = {"c"};
  s.placement.max_price_per_gpu_hour_micros = 4'000'000;
  s.placement.spot_tolerated = true;
  s.placement.objective = Objective::kBalanced;
  s.placement.client_region = "eu-west";
  s.placement.max_rtt_micros = 1'500;
  s.placement.min_driver_version = "550.54.15";
  s.placement.min_cuda_version = "12.4";
  return s;
}

ClusterDeclaration FullDeclaration() {
  ClusterDeclaration d;
  d.cluster = "cloud-eu-a100";
  d.provider = "aws";
  d.region = "eu-west-1";
  d.zone = "eu-west-1a";
  d.jurisdiction = "eu";
  d.compliance_labels = std::vector<std::string>{"gdpr", "iso27001"};
  d.default_capacity = CapacityType::kSpot;
  d.prices = {
      PriceEntry{"A100-80GB", "", CapacityType::kOnDemand, 4'100'000, At(1767225600)},
      PriceEntry{"A100-80GB", "3g.40gb", CapacityType::kSpot, 820'000, At(1782864000)},
      PriceEntry{"A100-80GB", "", CapacityType::kCommitted, 0, At(1767225600)},
  };
  d.rtt_micros = {{"eu-west", 4'000}, {"us-east", 78'250}};
  return d;
}

TEST(PlacementConvertTest, EveryRuleSurvivesTheRoundTrip) {
  const WorkloadSpec spec = SpecWithPlacement();
  const v1::WorkloadSpec proto = SpecToProto(spec);
  ASSERT_TRUE(proto.has_placement());
  EXPECT_EQ(proto.placement().objective(), v1::OBJECTIVE_BALANCED);
  EXPECT_EQ(proto.placement().max_price_per_gpu_hour_micros(), 4'000'000);
  EXPECT_EQ(TimeUtil::DurationToMicroseconds(proto.placement().max_rtt()), 1'500);
  EXPECT_THAT(proto.placement().denied_clusters(), ElementsAre("c"));
  absl::StatusOr<WorkloadSpec> back = SpecFromProto(proto);
  ASSERT_OK(back);
  EXPECT_EQ(back->placement, spec.placement);

  // Each objective both ways.
  for (Objective o :
       {Objective::kPack, Objective::kCost, Objective::kLatency, Objective::kBalanced}) {
    WorkloadSpec s = spec;
    s.placement.objective = o;
    absl::StatusOr<WorkloadSpec> round = SpecFromProto(SpecToProto(s));
    ASSERT_OK(round);
    EXPECT_EQ(round->placement.objective, o) << ObjectiveName(o);
  }
}

TEST(PlacementConvertTest, NoRulesIsNoPlacementMessage) {
  WorkloadSpec spec = SpecWithPlacement();
  spec.placement = PlacementConstraints{};
  EXPECT_FALSE(SpecToProto(spec).has_placement());
  // An empty or absent message is no rules, objective pack.
  v1::WorkloadSpec proto = SpecToProto(spec);
  proto.mutable_placement();
  EXPECT_THAT(SpecFromProto(proto),
              IsOkAndHolds(::testing::Field(&WorkloadSpec::placement, PlacementConstraints{})));
}

TEST(PlacementConvertTest, WhatTheDomainCannotHoldNamesTheField) {
  const v1::WorkloadSpec good = SpecToProto(SpecWithPlacement());
  v1::WorkloadSpec p = good;
  p.mutable_placement()->set_objective(static_cast<v1::Objective>(99));
  EXPECT_THAT(SpecFromProto(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                         "spec.placement.objective: unknown value 99"));
  p = good;
  p.mutable_placement()->mutable_max_rtt()->set_seconds(-1);
  EXPECT_THAT(SpecFromProto(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                         "spec.placement.max_rtt: must not be negative"));
  p = good;
  p.mutable_placement()->mutable_max_rtt()->set_nanos(-5);
  EXPECT_THAT(SpecFromProto(p),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("spec.placement.max_rtt.nanos: must be 0..999999999")));
  p = good;
  p.mutable_placement()->mutable_max_rtt()->set_nanos(1'000'000'000);
  EXPECT_THAT(SpecFromProto(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spec.placement.max_rtt")));
  p = good;
  p.mutable_placement()->mutable_max_rtt()->set_nanos(1'500);
  EXPECT_THAT(SpecFromProto(p),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("spec.placement.max_rtt: must be a whole number of "
                                 "microseconds")));
  p = good;
  p.mutable_placement()->mutable_max_rtt()->set_seconds(int64_t{1} << 60);
  EXPECT_THAT(SpecFromProto(p),
              StatusIs(absl::StatusCode::kInvalidArgument, "spec.placement.max_rtt: out of range"));
  // The ranges are the domain's (ValidatePlacement): a long RTT or a negative price convert.
  p = good;
  p.mutable_placement()->mutable_max_rtt()->set_seconds(3600);
  p.mutable_placement()->set_max_price_per_gpu_hour_micros(-1);
  EXPECT_OK(SpecFromProto(p));
}

TEST(DeclarationConvertTest, EveryFieldSurvivesTheRoundTrip) {
  const ClusterDeclaration d = FullDeclaration();
  const v1::ClusterDeclaration proto = DeclarationToProto(d);
  EXPECT_EQ(proto.default_capacity(), v1::CAPACITY_TYPE_SPOT);
  ASSERT_EQ(proto.prices_size(), 3);
  EXPECT_EQ(proto.prices(0).capacity_type(), v1::CAPACITY_TYPE_ON_DEMAND);
  EXPECT_EQ(proto.prices(1).capacity_type(), v1::CAPACITY_TYPE_SPOT);
  EXPECT_EQ(proto.prices(2).capacity_type(), v1::CAPACITY_TYPE_COMMITTED);
  EXPECT_EQ(proto.prices(1).effective_from().seconds(), 1782864000);
  EXPECT_EQ(TimeUtil::DurationToMicroseconds(proto.client_rtts().at("us-east")), 78'250);
  EXPECT_THAT(DeclarationFromProto("declarations[0]", proto), IsOkAndHolds(d));
}

TEST(DeclarationConvertTest, DeclaredNoLabelsDiffersFromNotDeclared) {
  ClusterDeclaration none = FullDeclaration();
  none.compliance_labels = std::vector<std::string>{};
  const v1::ClusterDeclaration declared_none = DeclarationToProto(none);
  EXPECT_TRUE(declared_none.has_compliance_labels());
  EXPECT_THAT(DeclarationFromProto("d", declared_none), IsOkAndHolds(none));

  ClusterDeclaration unset = FullDeclaration();
  unset.compliance_labels.reset();
  const v1::ClusterDeclaration not_declared = DeclarationToProto(unset);
  EXPECT_FALSE(not_declared.has_compliance_labels());
  EXPECT_THAT(DeclarationFromProto("d", not_declared), IsOkAndHolds(unset));
  EXPECT_NE(none, unset);
}

TEST(DeclarationConvertTest, UnspecifiedDefaultCapacityIsOnDemand) {
  v1::ClusterDeclaration p = DeclarationToProto(FullDeclaration());
  p.set_default_capacity(v1::CAPACITY_TYPE_UNSPECIFIED);
  absl::StatusOr<ClusterDeclaration> d = DeclarationFromProto("d", p);
  ASSERT_OK(d);
  EXPECT_EQ(d->default_capacity, CapacityType::kOnDemand);
}

// What the domain cannot represent is refused naming the field: "declarations[1].<field>".
TEST(DeclarationConvertTest, BadInputNamesTheField) {
  const auto request_with = [](const std::function<void(v1::ClusterDeclaration&)>& spoil) {
    v1::ApplyClustersRequest request;
    *request.add_declarations() = DeclarationToProto(FullDeclaration());
    v1::ClusterDeclaration& second = *request.add_declarations();
    second = DeclarationToProto(FullDeclaration());
    second.set_cluster("second");
    spoil(second);
    return DeclarationsFromProto(request);
  };
  EXPECT_THAT(request_with([](v1::ClusterDeclaration& d) {
                d.mutable_prices(0)->set_capacity_type(v1::CAPACITY_TYPE_UNSPECIFIED);
              }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "declarations[1].prices[0].capacity_type: must be set (ON_DEMAND, SPOT or "
                       "COMMITTED)"));
  EXPECT_THAT(request_with([](v1::ClusterDeclaration& d) {
                d.mutable_prices(2)->set_capacity_type(static_cast<v1::CapacityType>(7));
              }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "declarations[1].prices[2].capacity_type: unknown value 7"));
  EXPECT_THAT(request_with([](v1::ClusterDeclaration& d) {
                d.set_default_capacity(static_cast<v1::CapacityType>(-3));
              }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "declarations[1].default_capacity: unknown value -3"));
  EXPECT_THAT(
      request_with([](v1::ClusterDeclaration& d) { d.mutable_prices(1)->clear_effective_from(); }),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "declarations[1].prices[1].effective_from: must be set"));
  EXPECT_THAT(request_with([](v1::ClusterDeclaration& d) {
                d.mutable_prices(1)->mutable_effective_from()->set_seconds(-86400);
              }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("declarations[1].prices[1].effective_from: must be after "
                                 "1970-01-01 and before 2200-01-01")));
  EXPECT_THAT(request_with([](v1::ClusterDeclaration& d) {
                d.mutable_prices(1)->mutable_effective_from()->set_seconds(int64_t{1} << 40);
              }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("declarations[1].prices[1].effective_from: must be after")));
  EXPECT_THAT(request_with([](v1::ClusterDeclaration& d) {
                d.mutable_prices(1)->mutable_effective_from()->set_nanos(-1);
              }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("declarations[1].prices[1].effective_from.nanos: must be "
                                 "0..999999999")));
  EXPECT_THAT(request_with([](v1::ClusterDeclaration& d) {
                (*d.mutable_client_rtts())["eu-west"].set_seconds(-1);
              }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "declarations[1].client_rtts[eu-west]: must not be negative"));
  EXPECT_THAT(request_with([](v1::ClusterDeclaration& d) {
                (*d.mutable_client_rtts())["us-east"].set_nanos(1);
              }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("declarations[1].client_rtts[us-east]: must be a whole number "
                                 "of microseconds")));
  // A good request converts, in order.
  absl::StatusOr<std::vector<ClusterDeclaration>> good =
      request_with([](v1::ClusterDeclaration&) {});
  ASSERT_OK(good);
  ASSERT_THAT(*good, SizeIs(2));
  EXPECT_EQ((*good)[1].cluster, "second");
  // Price lines keep the order they came in (the use case sorts after validating, so that
  // errors name the lines as the caller sent them).
  EXPECT_EQ((*good)[1].prices[1].mig_profile, "3g.40gb");
}

TEST(DeclarationConvertTest, DiffsAndListings) {
  std::vector<DeclarationDiff> diffs(3);
  diffs[0].cluster = "a";
  diffs[0].kind = DeclarationDiff::Kind::kAdded;
  diffs[0].changes = {"jurisdiction: \"\" -> eu"};
  diffs[1].cluster = "b";
  diffs[1].kind = DeclarationDiff::Kind::kChanged;
  diffs[2].cluster = "c";
  const v1::ApplyClustersResponse response = DiffsToProto(diffs, /*dry_run=*/true);
  ASSERT_EQ(response.diffs_size(), 3);
  EXPECT_TRUE(response.dry_run());
  EXPECT_EQ(response.diffs(0).kind(), v1::DECLARATION_CHANGE_ADDED);
  EXPECT_THAT(response.diffs(0).changes(), ElementsAre("jurisdiction: \"\" -> eu"));
  EXPECT_EQ(response.diffs(1).kind(), v1::DECLARATION_CHANGE_CHANGED);
  EXPECT_EQ(response.diffs(2).kind(), v1::DECLARATION_CHANGE_UNCHANGED);
  EXPECT_EQ(response.diffs(2).cluster(), "c");

  const v1::ListDeclarationsResponse listing = DeclarationsToProto({FullDeclaration()});
  ASSERT_EQ(listing.declarations_size(), 1);
  EXPECT_EQ(listing.declarations(0).cluster(), "cloud-eu-a100");
}

TEST(ClusterConvertTest, InfoIsTheReportWithTheDeclarationLaidOverIt) {
  Cluster c;
  c.info.name = "cloud-eu-a100";
  c.info.provider = "aws";
  c.info.region = "eu-west-1";
  c.info.jurisdiction = "us";
  c.info.compliance_labels = {"hipaa"};
  v1::Cluster p =
      ClusterToProto(c, nullptr, /*include_nodes=*/false, [](WorkloadId) { return true; });
  EXPECT_FALSE(p.has_declaration());
  EXPECT_EQ(p.info().jurisdiction(), "us");
  EXPECT_EQ(p.reported_info().jurisdiction(), "us");

  c.declared = FullDeclaration();
  c.declared.provider = "";  // not declared: the agent's stays
  p = ClusterToProto(c, nullptr, /*include_nodes=*/false, [](WorkloadId) { return true; });
  ASSERT_TRUE(p.has_declaration());
  EXPECT_EQ(p.declaration().prices_size(), 3);
  EXPECT_EQ(p.info().provider(), "aws");
  EXPECT_EQ(p.info().jurisdiction(), "eu");
  EXPECT_THAT(p.info().compliance_labels(), ElementsAre("gdpr", "iso27001"));
  EXPECT_EQ(p.reported_info().jurisdiction(), "us");
  EXPECT_THAT(p.reported_info().compliance_labels(), ElementsAre("hipaa"));
}

TEST(EnumConvertTest, EveryCapacityTypeBothWays) {
  for (CapacityType t : {CapacityType::kOnDemand, CapacityType::kSpot, CapacityType::kCommitted}) {
    EXPECT_THAT(CapacityTypeFromProto(CapacityTypeToProto(t), "f", std::nullopt), IsOkAndHolds(t));
  }
  EXPECT_THAT(CapacityTypeFromProto(v1::CAPACITY_TYPE_UNSPECIFIED, "f", CapacityType::kSpot),
              IsOkAndHolds(CapacityType::kSpot));
}

// ---- Explain and what-if: every candidate cluster as the workload meets it ----

ClusterCandidate SampleCandidate() {
  ClusterCandidate c;
  c.cluster = "cloud-eu";
  c.rules.push_back({"jurisdiction", true, "eu"});
  c.rules.push_back({"max RTT", false, "none declared from eu-west"});
  OfferCheck priced;
  priced.model = "H100-80GB";
  priced.capacity = CapacityType::kOnDemand;
  priced.replica_price = 24'000'000;
  priced.rtt_micros = 9'000;
  priced.key = 24'000'000;
  priced.fits_now = true;
  OfferCheck committed;
  committed.model = "H100-80GB";
  committed.capacity = CapacityType::kCommitted;
  committed.replica_price = 0;
  committed.key = 0;
  OfferCheck unpriced;
  unpriced.model = "A100-80GB";
  unpriced.capacity = CapacityType::kSpot;
  unpriced.key = std::numeric_limits<double>::infinity();
  unpriced.refused = "spot not tolerated";
  c.offers = {priced, committed, unpriced};
  c.allowed = true;
  c.chosen = true;
  return c;
}

TEST(RoutingExplanationConvertTest, ACandidateCarriesEveryRuleOfferAndTheChoice) {
  const v1::ClusterCandidate p = CandidateToProto(SampleCandidate());
  EXPECT_EQ(p.cluster(), "cloud-eu");
  EXPECT_TRUE(p.allowed());
  EXPECT_TRUE(p.chosen());
  ASSERT_THAT(p.rules(), SizeIs(2));
  EXPECT_EQ(p.rules(0).rule(), "jurisdiction");
  EXPECT_TRUE(p.rules(0).passed());
  EXPECT_EQ(p.rules(0).detail(), "eu");
  EXPECT_EQ(p.rules(1).rule(), "max RTT");
  EXPECT_FALSE(p.rules(1).passed());
  EXPECT_EQ(p.rules(1).detail(), "none declared from eu-west");
  ASSERT_THAT(p.offers(), SizeIs(3));

  const v1::OfferCheck& priced = p.offers(0);
  EXPECT_EQ(priced.gpu_model(), "H100-80GB");
  EXPECT_EQ(priced.capacity_type(), v1::CAPACITY_TYPE_ON_DEMAND);
  ASSERT_TRUE(priced.has_price_per_hour_micros());
  EXPECT_EQ(priced.price_per_hour_micros(), 24'000'000);
  ASSERT_TRUE(priced.has_rtt());
  EXPECT_EQ(TimeUtil::DurationToMicroseconds(priced.rtt()), 9'000);
  EXPECT_EQ(priced.key(), 24'000'000);
  EXPECT_TRUE(priced.refused().empty());
  EXPECT_TRUE(priced.fits_now());

  // Committed capacity is free, which is not the same as unpriced.
  const v1::OfferCheck& committed = p.offers(1);
  EXPECT_EQ(committed.capacity_type(), v1::CAPACITY_TYPE_COMMITTED);
  ASSERT_TRUE(committed.has_price_per_hour_micros());
  EXPECT_EQ(committed.price_per_hour_micros(), 0);
  EXPECT_FALSE(committed.has_rtt()) << "no RTT declared";
  EXPECT_FALSE(committed.fits_now());

  const v1::OfferCheck& unpriced = p.offers(2);
  EXPECT_EQ(unpriced.gpu_model(), "A100-80GB");
  EXPECT_EQ(unpriced.capacity_type(), v1::CAPACITY_TYPE_SPOT);
  EXPECT_FALSE(unpriced.has_price_per_hour_micros());
  EXPECT_EQ(unpriced.key(), std::numeric_limits<double>::infinity()) << "last";
  EXPECT_EQ(unpriced.refused(), "spot not tolerated");
}

TEST(RoutingExplanationConvertTest, AWhatIfThatFitsCarriesWhereAndWhatItCosts) {
  RoutingExplanation e;
  e.objective = Objective::kCost;
  e.candidates = {SampleCandidate()};
  Assignment a;
  a.cluster = "cloud-eu";
  a.epoch = 3;
  ReplicaAssignment r;
  r.node = "n1";
  r.gpu_uuids = {"GPU-1"};
  r.gpu_indices = {0};
  a.replicas.push_back(r);
  e.decision.assignment = a;
  e.price_per_hour = 24'000'000;
  e.estimated_cost = 36'000'000;
  e.estimated_hours = 1.5;

  const v1::WhatIfResponse p = WhatIfToProto(e);
  ASSERT_TRUE(p.has_assignment());
  EXPECT_EQ(p.assignment().cluster(), "cloud-eu");
  EXPECT_EQ(p.assignment().epoch(), 3u);
  ASSERT_THAT(p.assignment().replicas(), SizeIs(1));
  EXPECT_EQ(p.assignment().replicas(0).node(), "n1");
  EXPECT_TRUE(p.explanation().empty());
  EXPECT_TRUE(p.reason_code().empty());
  EXPECT_FALSE(p.never_fits());
  ASSERT_TRUE(p.has_price_per_hour_micros());
  EXPECT_EQ(p.price_per_hour_micros(), 24'000'000);
  ASSERT_TRUE(p.has_estimated_cost_micros());
  EXPECT_EQ(p.estimated_cost_micros(), 36'000'000);
  EXPECT_EQ(p.estimated_hours(), 1.5);
  EXPECT_EQ(p.objective(), v1::OBJECTIVE_COST);
  ASSERT_THAT(p.candidates(), SizeIs(1));
  EXPECT_EQ(p.candidates(0).cluster(), "cloud-eu");
  EXPECT_TRUE(p.candidates(0).chosen());

  // It fits on capacity with no price: no price and no cost, rather than a free placement.
  e.price_per_hour.reset();
  e.estimated_cost.reset();
  const v1::WhatIfResponse unpriced = WhatIfToProto(e);
  EXPECT_TRUE(unpriced.has_assignment());
  EXPECT_FALSE(unpriced.has_price_per_hour_micros());
  EXPECT_FALSE(unpriced.has_estimated_cost_micros());
}

TEST(RoutingExplanationConvertTest, AWhatIfThatDoesNotFitSaysWhyInWordsAndCode) {
  RoutingExplanation e;
  e.objective = Objective::kLatency;
  e.decision.reason = PendingReason(ReasonCode::kNoClusterAllowed);
  e.decision.reason.Set(figure::kRule, "in jurisdiction de");
  e.decision.reason.Set(figure::kNeeds, "8 GPUs");
  const v1::WhatIfResponse p = WhatIfToProto(e);
  EXPECT_FALSE(p.has_assignment());
  EXPECT_EQ(p.explanation(), RenderReason(e.decision.reason));
  EXPECT_THAT(p.explanation(), HasSubstr("jurisdiction de"));
  EXPECT_EQ(p.reason_code(), "NoClusterAllowed");
  EXPECT_TRUE(p.never_fits());
  EXPECT_FALSE(p.has_price_per_hour_micros());
  EXPECT_FALSE(p.has_estimated_cost_micros());
  EXPECT_EQ(p.estimated_hours(), 1);
  EXPECT_EQ(p.objective(), v1::OBJECTIVE_LATENCY);
  EXPECT_THAT(p.candidates(), IsEmpty());

  // Not loaded yet: waiting will help.
  e.decision.reason = PendingReason(ReasonCode::kNotLoaded);
  const v1::WhatIfResponse not_loaded = WhatIfToProto(e);
  EXPECT_EQ(not_loaded.reason_code(), "NotLoaded");
  EXPECT_FALSE(not_loaded.never_fits());
  EXPECT_FALSE(not_loaded.explanation().empty());
}

TEST(RoutingExplanationConvertTest, ExplainCarriesTheCandidatesWhenTheWorkloadWasRouted) {
  Explanation e;
  e.workload = Sized(7, 0);
  e.workload.state = WorkloadState::kPending;
  e.workload.spec.placement.objective = Objective::kBalanced;
  e.text = "fits now on cloud-eu; the scheduler places it in its next cycle";
  e.fits_now_on = "cloud-eu";
  // Held back by quota, or not pending: no routing, and the spec's objective.
  v1::ExplainResponse p = ExplanationToProto(e);
  EXPECT_EQ(p.objective(), v1::OBJECTIVE_BALANCED);
  EXPECT_THAT(p.candidates(), IsEmpty());
  EXPECT_EQ(p.fits_now_on(), "cloud-eu");

  RoutingExplanation routing;
  routing.objective = Objective::kBalanced;
  ClusterCandidate edge;
  edge.cluster = "edge";
  routing.candidates = {SampleCandidate(), edge};
  e.routing = routing;
  p = ExplanationToProto(e);
  EXPECT_EQ(p.workload().id(), "7");
  EXPECT_EQ(p.objective(), v1::OBJECTIVE_BALANCED);
  ASSERT_THAT(p.candidates(), SizeIs(2));
  EXPECT_EQ(p.candidates(0).cluster(), "cloud-eu");
  EXPECT_THAT(p.candidates(0).offers(), SizeIs(3));
  EXPECT_EQ(p.candidates(1).cluster(), "edge");
  EXPECT_FALSE(p.candidates(1).allowed());
  EXPECT_THAT(p.candidates(1).offers(), IsEmpty());
}

// Found by fuzzing (tests/fuzz/agent_rpc_fuzzer.cc): an agent's status report with a time far
// outside what a Timestamp (nanoseconds since 1970 in an int64) holds overflowed the conversion
// (undefined behaviour; in practice a wrapped, meaningless time stored with the transition).
TEST(AgentReportConvertTest, ATimeInRangeIsKept) {
  v1::WorkloadStatus s;
  s.set_workload_id("42");
  s.set_state(v1::WORKLOAD_STATE_RUNNING);
  s.mutable_time()->set_seconds(1767225600);
  s.mutable_time()->set_nanos(5);
  absl::StatusOr<AgentReport> report = AgentReportFromProto(s);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(report->time.has_value());
  EXPECT_EQ(report->time->time_since_epoch(),
            std::chrono::seconds(1767225600) + std::chrono::nanoseconds(5));
}

TEST(AgentReportConvertTest, ATimeOutOfRangeNamesTheField) {
  const std::vector<std::pair<int64_t, int32_t>> times = {
      {9'223'372'037, 0},                        // past what a Timestamp holds
      {std::numeric_limits<int64_t>::max(), 0},  // far past it
      {-9'223'372'037, 0},                       // before it
      {-1, 0},                                   // before 1970
      {7'258'118'400, 0},                        // 2200-01-01 and later
      {1767225600, -1},                          // unnormalised
      {1767225600, 1'000'000'000},
  };
  for (const auto& [seconds, nanos] : times) {
    v1::WorkloadStatus s;
    s.set_workload_id("42");
    s.set_state(v1::WORKLOAD_STATE_FAILED);
    s.mutable_time()->set_seconds(seconds);
    s.mutable_time()->set_nanos(nanos);
    EXPECT_THAT(AgentReportFromProto(s),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("status.updates.time")))
        << seconds << " s " << nanos << " ns";
  }
}

}  // namespace
}  // namespace gpufed::api
