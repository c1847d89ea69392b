// The agent protocol's batching (api/convert.h AssignMessages, CancelMessages): no message to an
// agent grows with the work its cluster holds. Nothing running; the service test
// (tests/service/hostile_input_test.cc) checks the same through a real stream.

#include "api/convert.h"

#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpufed::api {
namespace {

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

}  // namespace
}  // namespace gpufed::api
