// Resuming a Watch (docs/interfaces.md, "Resuming a Watch") through the real server and real
// gRPC channels: a watcher ended for falling behind resumes without missing a change; a resumed
// Watch of one workload does not repeat what the caller has; bad resume fields are
// INVALID_ARGUMENT naming the field.

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "federation/watch_filter.h"
#include "gpufed/v1/cluster_service.grpc.pb.h"
#include "gpufed/v1/workload_service.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "server/server.h"
#include "tests/service/in_process_server.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"

namespace gpufed {
namespace {

class WatchResumeTest : public ::testing::Test {
 protected:
  // What the server runs with; a fixture below changes it.
  [[nodiscard]] virtual server::ServerConfig Config() const { return {}; }

  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(testing::InProcessServer started,
                         testing::StartInProcessServer(dir_.path(), Config()));
    server_ = std::move(started.server);
    address_ = started.address;
    admin_ = started.admin_token;
    dsn_ = started.dsn;
    auto user = testing::BootstrapTenant(address_, started.admin_token, "acme", "research");
    ASSERT_OK(user);
    user_ = *user;
    workloads_ = v1::WorkloadService::NewStub(testing::Connect(address_));
  }

  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  void Authorize(grpc::ClientContext* ctx) {
    ctx->AddMetadata("authorization", "Bearer " + user_);
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  }

  v1::Workload Submit(const std::string& name, size_t pad = 0) {
    v1::SubmitRequest req;
    v1::WorkloadSpec* s = req.mutable_spec();
    s->set_tenant("acme");
    s->set_project("research");
    s->set_name(name);
    s->set_replicas(1);
    s->mutable_per_replica()->set_gpus(1);
    s->set_workload_class(v1::WORKLOAD_CLASS_BATCH);
    if (pad > 0) (*s->mutable_run()->mutable_env())["PAD"] = std::string(pad, 'x');
    v1::SubmitResponse resp;
    grpc::ClientContext ctx;
    Authorize(&ctx);
    EXPECT_OK(workloads_->Submit(&ctx, req, &resp));
    return resp.workload();
  }

  v1::Workload Cancel(const std::string& id) {
    v1::CancelRequest req;
    req.set_id(id);
    v1::Workload w;
    grpc::ClientContext ctx;
    Authorize(&ctx);
    EXPECT_OK(workloads_->Cancel(&ctx, req, &w));
    return w;
  }

  v1::Workload Get(const std::string& id) {
    v1::GetWorkloadRequest req;
    req.set_id(id);
    v1::Workload w;
    grpc::ClientContext ctx;
    Authorize(&ctx);
    EXPECT_OK(workloads_->Get(&ctx, req, &w));
    return w;
  }

  // Every event of a Watch that ends by itself (within 20 s), and how it ended.
  grpc::Status WatchToTheEnd(const v1::WatchRequest& request, std::vector<v1::WorkloadEvent>* out) {
    grpc::ClientContext ctx;
    Authorize(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    auto reader = workloads_->Watch(&ctx, request);
    v1::WorkloadEvent e;
    while (reader->Read(&e)) out->push_back(e);
    return reader->Finish();
  }

  testing::TempDir dir_{"gpufed-watch-resume"};
  std::unique_ptr<server::Server> server_;
  std::string address_, user_, admin_, dsn_;
  std::unique_ptr<v1::WorkloadService::Stub> workloads_;
};

// A watcher of every workload that stops reading is ended RESOURCE_EXHAUSTED; it resumes from
// the last event it got and, before the live events, is sent the current state of every
// workload that changed meanwhile (those it never got, and those changed while it was away),
// each version at most once, and nothing that last changed before its resume point.
TEST_F(WatchResumeTest, AWatcherEndedForFallingBehindResumesWithoutMissingAChange) {
  // Changed long enough before the resume point (its overlap) to be no part of the catch-up,
  // and terminal, so that nothing touches them again.
  std::set<std::string> old;
  for (int i = 0; i < 3; ++i) old.insert(Cancel(Submit("old-" + std::to_string(i)).id()).id());
  std::this_thread::sleep_for(kWatchResumeOverlap + std::chrono::seconds(1));

  // A client whose transport takes no more than it reads (as in
  // ServiceTest.AWatcherThatNeverReadsIsEndedAndGetsNothingFromAfterTheDrop).
  auto slow = v1::WorkloadService::NewStub(testing::ConnectSlowReader(address_));
  grpc::ClientContext ctx;
  Authorize(&ctx);
  auto reader = slow->Watch(&ctx, v1::WatchRequest());
  // The server subscribes a stream a moment after it opens: submit until the first event comes.
  std::map<std::string, uint64_t> seen;  // newest version received of each workload
  std::set<std::string> ours;            // every workload submitted from here on
  v1::WorkloadEvent e;
  {
    std::atomic<bool> got{false};
    std::thread poker([&] {
      for (int i = 0; !got.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (!got.load()) ours.insert(Submit("first-" + std::to_string(i)).id());
      }
    });
    ASSERT_TRUE(reader->Read(&e));
    got = true;
    poker.join();
  }
  v1::WorkloadEvent last = e;
  seen[e.workload().id()] = e.workload().version();
  ASSERT_TRUE(e.has_resume_after()) << "a Watch of every workload tells where to resume";

  // Far more than the per-stream bound plus gRPC's window, unread.
  std::vector<std::string> flood;
  for (int i = 0; i < 1500; ++i) {
    flood.push_back(Submit("big-" + std::to_string(i), 2000).id());
    ours.insert(flood.back());
  }
  while (reader->Read(&e)) {
    EXPECT_FALSE(e.resync());
    seen[e.workload().id()] = std::max(seen[e.workload().id()], e.workload().version());
    last = e;
  }
  ASSERT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_LT(seen.size(), 1500u) << "the flood was not dropped: the test proves nothing";

  // While it is away: some change, some are new.
  for (int i = 0; i < 1500; i += 100) Cancel(flood[i]);
  for (int i = 0; i < 3; ++i) ours.insert(Submit("meanwhile-" + std::to_string(i)).id());

  // Resume, reading; a workload submitted after the resumed stream is open marks "caught up".
  grpc::ClientContext again_ctx;
  Authorize(&again_ctx);
  v1::WatchRequest resume;
  *resume.mutable_resume_after() = last.resume_after();
  auto again = workloads_->Watch(&again_ctx, resume);
  std::set<std::pair<std::string, uint64_t>> resumed;
  bool live = false;
  std::string marker;
  auto take = [&](const v1::WorkloadEvent& e) {
    const std::string& id = e.workload().id();
    EXPECT_TRUE(resumed.emplace(id, e.workload().version()).second)
        << "workload " << id << " version " << e.workload().version() << " sent twice";
    EXPECT_EQ(old.count(id), 0u) << "workload " << id << " last changed before the resume point";
    if (e.resync()) {
      EXPECT_FALSE(live) << "the catch-up comes before the live events";
      EXPECT_EQ(e.from_state(), e.to_state());
    } else {
      live = true;
    }
    seen[id] = std::max(seen[id], e.workload().version());
  };
  // Its first event means it is subscribed (the catch-up is read after): a workload submitted
  // now comes after everything changed before it, live or as the catch-up's last.
  ASSERT_TRUE(again->Read(&e));
  EXPECT_TRUE(e.resync());
  take(e);
  marker = Submit("marker").id();
  while (seen.count(marker) == 0 && again->Read(&e)) take(e);
  EXPECT_EQ(seen.count(marker), 1u);
  again_ctx.TryCancel();
  again->Finish();

  // Every workload submitted since the first event is known at its current version.
  for (const std::string& id : ours) {
    const v1::Workload now = Get(id);
    ASSERT_EQ(seen.count(id), 1u) << "workload " << id << " (" << now.spec().name()
                                  << ") never seen";
    EXPECT_EQ(seen[id], now.version())
        << "workload " << id << " (" << now.spec().name() << ") seen at an older version than "
        << v1::WorkloadState_Name(now.state());
  }
}

// A resumed Watch of one workload sends no first event for a version the caller already has;
// one that already saw the workload's end ends at once.
TEST_F(WatchResumeTest, AWatchOfOneWorkloadResumedAtItsVersionGetsNoSnapshot) {
  const v1::Workload ended = Cancel(Submit("ended").id());
  v1::WatchRequest request;
  request.set_workload_id(ended.id());
  request.set_after_version(ended.version());
  std::vector<v1::WorkloadEvent> events;
  EXPECT_OK(WatchToTheEnd(request, &events));
  EXPECT_TRUE(events.empty()) << events.size() << " events, the first at version "
                              << events.front().workload().version();

  // One version behind: the end, once.
  request.set_after_version(ended.version() - 1);
  events.clear();
  EXPECT_OK(WatchToTheEnd(request, &events));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].workload().state(), v1::WORKLOAD_STATE_CANCELLED);

  // Still running: only what comes after the version it has.
  const v1::Workload pending = Get(Submit("pending").id());
  request.set_workload_id(pending.id());
  request.set_after_version(pending.version());
  grpc::ClientContext ctx;
  Authorize(&ctx);
  auto reader = workloads_->Watch(&ctx, request);
  // The stream is subscribed before its snapshot is read: a cancel once it is open is seen.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Cancel(pending.id());
  v1::WorkloadEvent e;
  std::vector<v1::WorkloadEvent> got;
  while (reader->Read(&e)) got.push_back(e);
  EXPECT_OK(reader->Finish());
  ASSERT_FALSE(got.empty());
  for (const v1::WorkloadEvent& g : got) EXPECT_GT(g.workload().version(), pending.version());
  EXPECT_EQ(got.back().workload().state(), v1::WORKLOAD_STATE_CANCELLED);
}

// One executor thread, so that a test can make a catch-up's next page wait for it.
class WatchResumeOneExecutorThreadTest : public WatchResumeTest {
 protected:
  [[nodiscard]] server::ServerConfig Config() const override {
    server::ServerConfig config;
    config.executor_threads = 1;
    return config;
  }
};

// A resumed watcher whose stream overflows while the read of its catch-up's next page waits for
// the executor is ended RESOURCE_EXHAUSTED once that read runs. (It was left open and silent for
// good: the read saw the catch-up cancelled by the drop and returned without ending the stream.
// Found by `gpufed-bench e2e --clients 64`, whose watcher resumed, then hung.)
TEST_F(WatchResumeOneExecutorThreadTest, AStreamDroppedWhileItsNextPageWaitsStillEnds) {
  // More than one page (64 workloads) to catch up on, each large, so that a page's writes wait
  // for the reader. (Quickly: from the first Submit on, the caller is known without asking the
  // store for 10 s, and the Submits below must not need the executor.)
  const v1::Workload first = Submit("catch-up-0", 16000);
  for (int i = 1; i < 70; ++i) Submit("catch-up-" + std::to_string(i), 16000);

  // A client whose transport takes no more than it reads: the test says when the page is
  // written.
  auto slow = v1::WorkloadService::NewStub(testing::ConnectSlowReader(address_));
  grpc::ClientContext ctx;
  Authorize(&ctx);
  v1::WatchRequest resume;
  *resume.mutable_resume_after() = first.create_time();
  auto reader = slow->Watch(&ctx, resume);
  v1::WorkloadEvent e;
  ASSERT_TRUE(reader->Read(&e));
  ASSERT_TRUE(e.resync());

  // The executor's only thread held by a ListClusters that waits for a lock the test holds.
  pqxx::connection locker(dsn_);
  pqxx::work lock(locker);
  lock.exec("LOCK TABLE clusters IN ACCESS EXCLUSIVE MODE");
  auto clusters = v1::ClusterService::NewStub(testing::Connect(address_));
  grpc::Status busy_status;
  std::thread busy([&] {
    grpc::ClientContext busy_ctx;
    busy_ctx.AddMetadata("authorization", "Bearer " + admin_);
    busy_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::ListClustersResponse response;
    busy_status = clusters->ListClusters(&busy_ctx, v1::ListClustersRequest(), &response);
  });
  auto release = absl::MakeCleanup([&] {
    lock.abort();
    busy.join();
  });
  bool waiting = false;
  for (int i = 0; i < 500 && !waiting; ++i) {
    waiting = lock.exec1(
                      "SELECT count(*) FROM pg_locks "
                      "WHERE relation = 'clusters'::regclass AND NOT granted")[0]
                  .as<int64_t>() > 0;
    if (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(waiting) << "the ListClusters never reached the lock: the test proves nothing";

  // The rest of the first page: once it is written the stream asks for the next one, whose read
  // waits behind the ListClusters.
  for (int i = 1; i < 64; ++i) {
    ASSERT_TRUE(reader->Read(&e));
    ASSERT_TRUE(e.resync());
  }
  // Live events far beyond the stream's bound (128 KiB) meanwhile: they are dropped.
  for (int i = 0; i < 20; ++i) Submit("big-" + std::to_string(i), 16000);
  std::move(release).Invoke();
  EXPECT_OK(busy_status);

  // What was written before the drop, then the end: not silence until the deadline.
  while (reader->Read(&e)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(WatchResumeTest, BadResumeFieldsAreInvalidArgumentNamingTheField) {
  const std::string id = Submit("w").id();
  auto expect_invalid = [&](const v1::WatchRequest& request, const std::string& field) {
    std::vector<v1::WorkloadEvent> events;
    grpc::Status status = WatchToTheEnd(request, &events);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << field << ": " << status.error_message();
    EXPECT_EQ(status.error_message().rfind(field + ":", 0), 0u) << status.error_message();
    EXPECT_TRUE(events.empty());
  };
  v1::WatchRequest r;
  r.set_after_version(3);  // a Watch of every workload resumes with resume_after
  expect_invalid(r, "after_version");

  r = v1::WatchRequest();
  r.set_workload_id(id);
  r.mutable_resume_after()->set_seconds(1);  // a Watch of one workload resumes with after_version
  expect_invalid(r, "resume_after");

  r = v1::WatchRequest();
  r.mutable_resume_after()->set_seconds(1);
  r.mutable_resume_after()->set_nanos(-1);
  expect_invalid(r, "resume_after");
  r.mutable_resume_after()->set_nanos(1000000000);
  expect_invalid(r, "resume_after");
  r.mutable_resume_after()->set_nanos(0);
  r.mutable_resume_after()->set_seconds(-1);
  expect_invalid(r, "resume_after");
  r.mutable_resume_after()->set_seconds(253402300799);  // 9999-12-31: past what a time holds
  expect_invalid(r, "resume_after");

  r = v1::WatchRequest();
  r.set_workload_id("01");
  r.set_after_version(1);
  expect_invalid(r, "workload_id");
}

}  // namespace
}  // namespace gpufed
