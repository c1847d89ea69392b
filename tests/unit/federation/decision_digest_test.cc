// The decision digest is the same everywhere: its text and its hash are spelled out here, so a
// change to either (which would silently change every pinned digest) fails.

#include "federation/decision_digest.h"

#include "gtest/gtest.h"
#include "tests/unit/federation/placement_fixtures.h"

namespace gpufed {
namespace {

TEST(DecisionDigestTest, TextOfAnAssignment) {
  PlacementDecision d;
  Assignment a;
  a.cluster = "dgx";
  a.epoch = 3;
  a.replicas.push_back(testing::WholeGpus("n0", {0, 1}));
  a.replicas.push_back(testing::ShareReplica("n1", 2, 250));
  a.replicas.push_back(testing::MigReplica("n1", 3, "3g.40gb", 4));
  Repartition r;
  r.node = "n1";
  r.gpu_uuid = testing::Uuid("n1", 3);
  r.mig_enabled = true;
  r.layout = {{"3g.40gb", 4}, {"1g.10gb", 0}};
  r.reason = "words that do not count";
  a.repartitions.push_back(r);
  d.assignment = a;
  d.reason = PendingReason(ReasonCode::kGpusBusy);
  EXPECT_EQ(DecisionText(d),
            "fit dgx 3 | n0 GPU-n0-0,GPU-n0-1 0 - | n1 GPU-n1-2 250 - | n1 GPU-n1-3 0 3g.40gb@4"
            " | mig n1 GPU-n1-3 on 3g.40gb@4,1g.10gb@0");
}

TEST(DecisionDigestTest, TextWithoutAnAssignment) {
  PlacementDecision wait;
  wait.reason = PendingReason(ReasonCode::kNothingFree);
  EXPECT_EQ(DecisionText(wait), "wait");
  PlacementDecision never;
  never.reason = PendingReason(ReasonCode::kNoClusters);
  EXPECT_EQ(DecisionText(never), "never");
}

TEST(DecisionDigestTest, IsFnv1aOverTheText) {
  DecisionDigest empty;
  EXPECT_EQ(empty.value(), 0xcbf29ce484222325ULL);  // FNV-1a 64 offset basis
  DecisionDigest a;
  a.AddBytes("a");
  EXPECT_EQ(a.value(), 0xaf63dc4c8601ec8cULL);  // published FNV-1a 64 of "a"
  EXPECT_EQ(a.Hex(), "af63dc4c8601ec8c");
  DecisionDigest wait;
  wait.Add(PlacementDecision{});
  DecisionDigest same;
  same.AddBytes("wait\n");
  EXPECT_EQ(wait.value(), same.value());
}

TEST(DecisionDigestTest, ReasonsDoNotCountDecisionsDo) {
  PlacementDecision a;
  a.reason = PendingReason(ReasonCode::kGpusBusy).Set(figure::kFree, 1);
  PlacementDecision b;
  b.reason = PendingReason(ReasonCode::kGpusBusy).Set(figure::kFree, 2);
  DecisionDigest da;
  da.Add(a);
  DecisionDigest db;
  db.Add(b);
  EXPECT_EQ(da.value(), db.value());
  b.reason = PendingReason(ReasonCode::kNoClusters);
  DecisionDigest dc;
  dc.Add(b);
  EXPECT_NE(da.value(), dc.value());
  // Order matters: the same decisions in another order give another digest.
  DecisionDigest ab;
  ab.Add(a);
  ab.Add(b);
  DecisionDigest ba;
  ba.Add(b);
  ba.Add(a);
  EXPECT_NE(ab.value(), ba.value());
}

}  // namespace
}  // namespace gpufed
