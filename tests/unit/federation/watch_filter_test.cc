// Watch's domain half (federation/watch_filter.h and ControlPlane::WatchSnapshot): which events a
// caller gets and when its stream ends. The filter alone, then with the use cases on the
// in-memory stores and a fake clock, the way the Watch reactor drives them: subscribe, read the
// snapshot, pass everything through one filter. No PostgreSQL, no gRPC, no sleeps.

#include "federation/watch_filter.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "federation/agent_registry.h"
#include "federation/clock.h"
#include "federation/control_plane.h"
#include "federation/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/memory_store.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/plane_test_base.h"

namespace gpufed {
namespace {

using ::gpufed::testing::Admin;
using ::gpufed::testing::AgentOf;
using ::gpufed::testing::StatusIs;
using ::gpufed::testing::User;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr WatchVerdict kSkip{.deliver = false, .end = false};
constexpr WatchVerdict kDeliver{.deliver = true, .end = false};
constexpr WatchVerdict kDeliverAndEnd{.deliver = true, .end = true};

// Workload `id` of `tenant` at `version`, now in `state`.
WorkloadEvent Event(WorkloadId id, const std::string& tenant, uint64_t version,
                    WorkloadState state) {
  WorkloadEvent e;
  e.workload.id = id;
  e.workload.spec.tenant = tenant;
  e.workload.version = version;
  e.workload.state = state;
  e.to = state;
  return e;
}

// ---- The filter alone ----------------------------------------------------------------------

TEST(WatchFilterTest, AWatchOfEverythingGetsWhatTheCallerMayReadAndNeverEnds) {
  WatchFilter user(User("acme"), 0);
  EXPECT_EQ(user.Offer(Event(1, "acme", 1, WorkloadState::kPending)), kDeliver);
  EXPECT_EQ(user.Offer(Event(2, "other", 1, WorkloadState::kPending)), kSkip);
  EXPECT_EQ(user.Offer(Event(1, "acme", 2, WorkloadState::kSucceeded)), kDeliver);
  EXPECT_EQ(user.Offer(Event(3, "acme", 1, WorkloadState::kPending)), kDeliver);

  WatchFilter admin(Admin(), 0);
  EXPECT_EQ(admin.Offer(Event(2, "other", 1, WorkloadState::kPending)), kDeliver);

  WatchFilter agent(AgentOf("c1"), 0);
  EXPECT_EQ(agent.Offer(Event(1, "acme", 1, WorkloadState::kPending)), kSkip);
}

TEST(WatchFilterTest, AWatchOfOneWorkloadGetsOnlyThatOne) {
  WatchFilter filter(User("acme"), 7);
  EXPECT_EQ(filter.workload(), 7);
  EXPECT_EQ(filter.Offer(Event(8, "acme", 1, WorkloadState::kPending)), kSkip);
  EXPECT_EQ(filter.Offer(Event(7, "acme", 1, WorkloadState::kPending)), kDeliver);
}

TEST(WatchFilterTest, AnotherTenantsWorkloadIsNeverDelivered) {
  WatchFilter filter(User("acme"), 7);
  EXPECT_EQ(filter.Offer(Event(7, "other", 1, WorkloadState::kPending)), kSkip);
  EXPECT_EQ(filter.Offer(Event(7, "other", 2, WorkloadState::kCancelled)), kSkip);
}

TEST(WatchFilterTest, OverlappingCopiesNeverRepeatOrGoBack) {
  WatchFilter filter(User("acme"), 7);
  EXPECT_EQ(filter.Offer(Event(7, "acme", 2, WorkloadState::kPlaced)), kDeliver);  // snapshot
  EXPECT_EQ(filter.Offer(Event(7, "acme", 1, WorkloadState::kPending)), kSkip);    // older
  EXPECT_EQ(filter.Offer(Event(7, "acme", 2, WorkloadState::kPlaced)), kSkip);     // repeat
  EXPECT_EQ(filter.Offer(Event(7, "acme", 3, WorkloadState::kRunning)), kDeliver);
}

TEST(WatchFilterTest, TheStreamEndsWithTheWorkloadAndNothingFollows) {
  WatchFilter filter(User("acme"), 7);
  EXPECT_EQ(filter.Offer(Event(7, "acme", 3, WorkloadState::kRunning)), kDeliver);
  EXPECT_EQ(filter.Offer(Event(7, "acme", 4, WorkloadState::kFailed)), kDeliverAndEnd);
  EXPECT_EQ(filter.Offer(Event(7, "acme", 5, WorkloadState::kPending)), kSkip);
}

// A resumed Watch of one workload: nothing at or below the version the caller has; a terminal
// state it has already seen ends the stream at once, delivering nothing.
TEST(WatchFilterTest, AResumedWatchOfOneWorkloadSkipsWhatTheCallerHas) {
  WatchFilter filter(User("acme"), 7, /*after_version=*/3);
  EXPECT_EQ(filter.Offer(Event(7, "acme", 3, WorkloadState::kRunning)), kSkip);  // snapshot
  EXPECT_EQ(filter.Offer(Event(7, "acme", 2, WorkloadState::kPlaced)), kSkip);
  EXPECT_EQ(filter.Offer(Event(7, "acme", 4, WorkloadState::kSucceeded)), kDeliverAndEnd);

  WatchFilter seen_the_end(User("acme"), 7, /*after_version=*/4);
  EXPECT_EQ(seen_the_end.Offer(Event(7, "acme", 4, WorkloadState::kSucceeded)),
            (WatchVerdict{.deliver = false, .end = true}));
  EXPECT_EQ(seen_the_end.Offer(Event(7, "acme", 5, WorkloadState::kPending)), kSkip);
}

// A resumed Watch of every workload: the catch-up delivers what the caller may read, each
// workload's version once; a live event written after it is superseded when the catch-up sent
// that version or a newer one.
TEST(WatchFilterTest, TheCatchUpOfEveryWorkloadSupersedesOlderLiveEvents) {
  WatchFilter filter(User("acme"), 0);
  EXPECT_EQ(filter.OfferResync(Event(1, "acme", 3, WorkloadState::kRunning).workload), kDeliver);
  EXPECT_EQ(filter.OfferResync(Event(2, "other", 1, WorkloadState::kPending).workload), kSkip);
  EXPECT_EQ(filter.OfferResync(Event(1, "acme", 3, WorkloadState::kRunning).workload), kSkip);
  EXPECT_TRUE(filter.Superseded(1, 2));
  EXPECT_TRUE(filter.Superseded(1, 3));
  EXPECT_FALSE(filter.Superseded(1, 4));
  EXPECT_FALSE(filter.Superseded(5, 1)) << "not in the catch-up";

  WatchFilter one(User("acme"), 1);
  EXPECT_EQ(one.OfferResync(Event(1, "acme", 3, WorkloadState::kRunning).workload), kSkip);
}

TEST(WatchFilterTest, TheResumePointReadsBackTheOverlap) {
  const Timestamp t = Timestamp{} + std::chrono::hours(1000);
  EXPECT_EQ(WatchResumePoint(t), (ChangeCursor{.time = t - kWatchResumeOverlap, .id = 0}));
}

// ---- With the use cases --------------------------------------------------------------------

// The use cases publish into events_ (PlaneTestBase's RecordingSink); a test hands what was
// published to a filter the way the reactor's subscription does.
class WatchUseCaseTest : public testing::PlaneTestBase {
 protected:
  WatchUseCaseTest() : plane_(Ports()) {}

  WorkloadId Submit(const std::string& tenant) {
    WorkloadSpec spec;
    spec.tenant = tenant;
    spec.project = "p";
    spec.name = "job";
    absl::StatusOr<SubmitResult> out = absl::InternalError("callback not run");
    plane_.Submit(User(tenant), spec, absl::InfiniteFuture(),
                  [&](absl::StatusOr<SubmitResult> r) { out = std::move(r); });
    EXPECT_OK(out);
    return out.ok() ? out->workload.id : 0;
  }

  // A Watch as the reactor runs it: `subscribed` is where the subscription starts in what was
  // published; the snapshot (if any) goes first, then everything published since. Returns the
  // states delivered; `ended` says whether the stream ended.
  std::vector<WorkloadState> Deliver(WatchFilter& filter, size_t subscribed,
                                     const std::optional<WorkloadEvent>& snapshot, bool* ended) {
    std::vector<WorkloadState> out;
    *ended = false;
    auto offer = [&](const WorkloadEvent& e) {
      if (*ended) return;
      WatchVerdict v = filter.Offer(e);
      if (v.deliver) out.push_back(e.workload.state);
      *ended = v.end;
    };
    if (snapshot) offer(*snapshot);
    for (size_t i = subscribed; i < events_.events.size(); ++i) offer(events_.events[i]);
    return out;
  }

  ControlPlane plane_;
};

TEST_F(WatchUseCaseTest, OneWorkloadFromItsStateNowToItsEnd) {
  const WorkloadId id = Submit("acme");
  WatchFilter filter(User("acme"), id);
  const size_t subscribed = events_.events.size();
  ASSERT_OK_AND_ASSIGN(WorkloadEvent first, plane_.WatchSnapshot(User("acme"), id));
  EXPECT_EQ(first.workload.state, WorkloadState::kPending);
  EXPECT_EQ(first.from, WorkloadState::kPending);
  EXPECT_EQ(first.to, WorkloadState::kPending);

  Submit("acme");  // another workload: not this Watch's
  ASSERT_OK(plane_.Cancel(User("acme"), id, "done with it"));
  bool ended = false;
  EXPECT_THAT(Deliver(filter, subscribed, first, &ended),
              ElementsAre(WorkloadState::kPending, WorkloadState::kCancelled));
  EXPECT_TRUE(ended);
}

// The workload changed after the subscription but before the snapshot was read: the caller
// sees the change once, not twice, and the stream ends.
TEST_F(WatchUseCaseTest, AChangeBetweenSubscribingAndReadingIsDeliveredOnce) {
  const WorkloadId id = Submit("acme");
  WatchFilter filter(User("acme"), id);
  const size_t subscribed = events_.events.size();
  ASSERT_OK(plane_.Cancel(User("acme"), id, ""));
  ASSERT_OK_AND_ASSIGN(WorkloadEvent first, plane_.WatchSnapshot(User("acme"), id));
  EXPECT_EQ(first.workload.state, WorkloadState::kCancelled);
  bool ended = false;
  EXPECT_THAT(Deliver(filter, subscribed, first, &ended), ElementsAre(WorkloadState::kCancelled));
  EXPECT_TRUE(ended);
}

TEST_F(WatchUseCaseTest, AnotherTenantsWorkloadCannotBeWatched) {
  const WorkloadId id = Submit("other");
  EXPECT_THAT(plane_.WatchSnapshot(User("acme"), id), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(plane_.WatchSnapshot(User("acme"), id + 100), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(WatchUseCaseTest, AWatchOfEverythingSeesOnlyTheCallersTenant) {
  WatchFilter filter(User("acme"), 0);
  const size_t subscribed = events_.events.size();
  const WorkloadId mine = Submit("acme");
  Submit("other");
  ASSERT_OK(plane_.Cancel(User("acme"), mine, ""));
  bool ended = false;
  EXPECT_THAT(Deliver(filter, subscribed, std::nullopt, &ended),
              ElementsAre(WorkloadState::kPending, WorkloadState::kCancelled));
  EXPECT_FALSE(ended);

  WatchFilter agent(AgentOf("c1"), 0);
  EXPECT_THAT(Deliver(agent, subscribed, std::nullopt, &ended), IsEmpty());
}

}  // namespace
}  // namespace gpufed
