// WatchHub (api/watch_hub.h): publishers never run the fan-out, events reach every subscriber in
// the order published, write turns go round-robin over owners, and a backlog past its bound is
// dropped with every subscriber told. Fake subscribers; nothing else running.

#include "api/watch_hub.h"

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpufed::api {
namespace {

using ::testing::ElementsAre;

// A guard against a hang, not a speed check: every wait here is met in microseconds.
constexpr absl::Duration kHang = absl::Seconds(30);

WorkloadEvent Event(WorkloadId id) {
  WorkloadEvent e;
  e.workload.id = id;
  e.workload.version = 1;
  e.workload.spec.tenant = "acme";
  e.workload.spec.name = "w";
  e.from = WorkloadState::kUnspecified;
  e.to = WorkloadState::kPending;
  return e;
}

// Records what the hub hands it. Optionally blocks in its first OnEvent until released, and asks
// for a turn with every event.
class FakeSubscriber : public WatchHub::Subscriber {
 public:
  explicit FakeSubscriber(std::string name, bool wants_turns = false,
                          absl::Notification* hold_first = nullptr)
      : name_(std::move(name)), wants_turns_(wants_turns), hold_first_(hold_first) {}

  bool OnEvent(const WorkloadEvent& e, const WatchHub::Message& message, size_t bytes) override {
    if (hold_first_ != nullptr && !held_) {
      held_ = true;
      {
        absl::MutexLock lock(&mu_);
        holding_ = true;
      }
      hold_first_->WaitForNotification();
    }
    absl::MutexLock lock(&mu_);
    thread_ = std::this_thread::get_id();
    log_.emplace_back(absl::StrCat("event ", e.workload.id));
    EXPECT_EQ(message->workload().id(), std::to_string(e.workload.id));
    EXPECT_EQ(bytes, message->ByteSizeLong());
    return wants_turns_;
  }
  void OnLost() override {
    absl::MutexLock lock(&mu_);
    log_.emplace_back("lost");
  }
  void OnTurn() override {}
  void OnRevoked() override {
    absl::MutexLock lock(&mu_);
    log_.emplace_back("revoked");
  }

  // Waits until `n` entries are logged; the log then.
  std::vector<std::string> AwaitLog(size_t n) {
    absl::MutexLock lock(&mu_);
    wanted_ = n;
    mu_.AwaitWithTimeout(absl::Condition(this, &FakeSubscriber::HasWantedLocked), kHang);
    return log_;
  }
  void AwaitHolding() {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&holding_), kHang);
  }
  std::thread::id thread() {
    absl::MutexLock lock(&mu_);
    return thread_;
  }
  [[nodiscard]] const std::string& name() const { return name_; }

 private:
  [[nodiscard]] bool HasWantedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return log_.size() >= wanted_;
  }

  const std::string name_;
  const bool wants_turns_;
  absl::Notification* const hold_first_;
  bool held_ = false;  // only the dispatcher thread touches it
  absl::Mutex mu_;
  bool holding_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
  size_t wanted_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread::id thread_ ABSL_GUARDED_BY(mu_);
};

TEST(WatchHubTest, EventsReachEverySubscriberInOrderAndNeverOnThePublishersThread) {
  WatchHub hub;
  auto a = std::make_shared<FakeSubscriber>("a");
  auto b = std::make_shared<FakeSubscriber>("b");
  ASSERT_TRUE(hub.Subscribe("alice", a).ok());
  ASSERT_TRUE(hub.Subscribe("bob", b).ok());
  hub.Publish({Event(1), Event(2)});
  hub.Publish(Event(3));
  EXPECT_THAT(a->AwaitLog(3), ElementsAre("event 1", "event 2", "event 3"));
  EXPECT_THAT(b->AwaitLog(3), ElementsAre("event 1", "event 2", "event 3"));
  // The cost of the fan-out is the hub's, not the caller's whose change it was.
  EXPECT_NE(a->thread(), std::this_thread::get_id());
}

TEST(WatchHubTest, AnUnsubscribedStreamGetsNothingMoreAndFreesItsOwnersPlace) {
  WatchHub hub(/*max_per_owner=*/1);
  auto first = std::make_shared<FakeSubscriber>("first");
  absl::StatusOr<uint64_t> handle = hub.Subscribe("alice", first);
  ASSERT_TRUE(handle.ok());
  EXPECT_EQ(hub.Subscribe("alice", std::make_shared<FakeSubscriber>("x")).status().code(),
            absl::StatusCode::kResourceExhausted);
  hub.Publish(Event(1));
  EXPECT_THAT(first->AwaitLog(1), ElementsAre("event 1"));
  hub.Unsubscribe(*handle);
  auto second = std::make_shared<FakeSubscriber>("second");
  ASSERT_TRUE(hub.Subscribe("alice", second).ok());
  hub.Publish(Event(2));
  EXPECT_THAT(second->AwaitLog(1), ElementsAre("event 2"));
  EXPECT_THAT(first->AwaitLog(1), ElementsAre("event 1"));
}

// One caller with ten streams that all want to write and another with one: the one gets a turn
// in the first round, not after the ten.
TEST(WatchHubTest, ARevokedCredentialsStreamsAreToldAndNoOneElses) {
  WatchHub hub;
  auto revoked_a = std::make_shared<FakeSubscriber>("a");
  auto revoked_b = std::make_shared<FakeSubscriber>("b");
  auto other = std::make_shared<FakeSubscriber>("other");
  auto anonymous = std::make_shared<FakeSubscriber>("anonymous");
  ASSERT_TRUE(hub.Subscribe("alice", revoked_a, /*token_id=*/7).ok());
  ASSERT_TRUE(hub.Subscribe("alice", revoked_b, /*token_id=*/7).ok());
  ASSERT_TRUE(hub.Subscribe("alice", other, /*token_id=*/8).ok());
  ASSERT_TRUE(hub.Subscribe("bob", anonymous).ok());
  hub.EndCredential(7);
  hub.EndCredential(0);  // no token: nothing to end
  hub.Publish(Event(1));
  EXPECT_THAT(revoked_a->AwaitLog(2), ElementsAre("revoked", "event 1"));
  EXPECT_THAT(revoked_b->AwaitLog(2), ElementsAre("revoked", "event 1"));
  EXPECT_THAT(other->AwaitLog(1), ElementsAre("event 1"));
  EXPECT_THAT(anonymous->AwaitLog(1), ElementsAre("event 1"));
}

TEST(WatchHubTest, WriteTurnsGoRoundRobinOverOwners) {
  WatchHub hub;
  absl::Mutex mu;
  std::vector<std::string> order;
  // Records the order of turns across subscribers.
  class Turner : public FakeSubscriber {
   public:
    Turner(std::string name, absl::Mutex* mu, std::vector<std::string>* order)
        : FakeSubscriber(std::move(name), /*wants_turns=*/true), mu_(mu), order_(order) {}
    void OnTurn() override {
      absl::MutexLock lock(mu_);
      order_->push_back(name());
    }

   private:
    absl::Mutex* mu_;
    std::vector<std::string>* order_;
  };
  for (int i = 0; i < 10; ++i) {
    auto s = std::make_shared<Turner>(absl::StrCat("flood-", i), &mu, &order);
    ASSERT_TRUE(hub.Subscribe("flooder", s).ok());
  }
  auto one = std::make_shared<Turner>("one", &mu, &order);
  ASSERT_TRUE(hub.Subscribe("observer", one).ok());
  hub.Publish(Event(1));
  absl::MutexLock lock(&mu);
  mu.AwaitWithTimeout(absl::Condition(
                          +[](std::vector<std::string>* o) { return o->size() >= 11; }, &order),
                      kHang);
  ASSERT_EQ(order.size(), 11u);
  const auto at = std::find(order.begin(), order.end(), "one") - order.begin();
  EXPECT_LT(at, 2) << "one turn per owner per round: the observer waited behind the flooder";
}

// The dispatcher is held up (a subscriber blocked) while more than the bound is published: what
// waited is dropped, every subscriber is told before anything published after the drop, and the
// publishers never waited.
TEST(WatchHubTest, ABacklogPastItsBoundIsDroppedAndEverySubscriberIsTold) {
  absl::Notification release;
  WatchHub hub(/*max_per_owner=*/64, /*max_backlog=*/10);
  auto slow = std::make_shared<FakeSubscriber>("slow", false, &release);
  ASSERT_TRUE(hub.Subscribe("alice", slow).ok());
  hub.Publish(Event(0));
  slow->AwaitHolding();
  for (int i = 1; i <= 10; ++i) hub.Publish(Event(i));
  EXPECT_EQ(hub.backlog(), 10u);
  hub.Publish(Event(11));  // past the bound
  EXPECT_EQ(hub.backlog(), 0u);
  hub.Publish(Event(12));
  release.Notify();
  EXPECT_THAT(slow->AwaitLog(3), ElementsAre("event 0", "lost", "event 12"));
}

}  // namespace
}  // namespace gpufed::api
