// The GPU health probe (agent/gpu_health.h) against sample probe output
// (tests/agent/testdata/gpu-health, README there): which GPUs fail and why, which XIDs count,
// a node the probe did not reach, the probe command's bounds, and the monitor's verdicts.

#include "agent/gpu_health.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpufed::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Key;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

// A guard against a hang, not a speed check.
constexpr std::chrono::milliseconds kProbeTimeout{30000};

std::string SamplePath(const std::string& name) {
  return absl::StrCat(GPUFED_SOURCE_DIR, "/tests/agent/testdata/gpu-health/", name);
}

std::string Sample(const std::string& name) {
  std::ifstream in(SamplePath(name));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Uuid(int i) { return absl::StrCat("GPU-0c5a1f7e-45d2-4b7a-9e61-3f8d2c1b0a0", i); }

// dgx-01: the 8 GPUs of the samples. dgx-02: 8 more the samples never list.
v1::Inventory TwoNodes() {
  v1::Inventory inv;
  for (const char* name : {"dgx-01", "dgx-02"}) {
    v1::Node* node = inv.add_nodes();
    node->set_name(name);
    for (int i = 0; i < 8; ++i) {
      v1::Gpu* gpu = node->add_gpus();
      gpu->set_index(static_cast<uint32_t>(i));
      gpu->set_uuid(std::string(name) == "dgx-01" ? Uuid(i) : absl::StrCat("GPU-other-", i));
      gpu->set_model("H100-80GB");
      gpu->set_healthy(true);
    }
  }
  return inv;
}

absl::flat_hash_map<std::string, std::string> Failed(const std::string& sample) {
  absl::StatusOr<GpuProbe> probe = ParseGpuProbe(Sample(sample));
  EXPECT_TRUE(probe.ok()) << probe.status();
  if (!probe.ok()) return {};
  return FailedGpus(*probe, TwoNodes());
}

TEST(GpuHealthTest, PciBusIdsOfNvidiaSmiAndOfTheDriverMatch) {
  EXPECT_EQ(NormalizePciBus("00000000:3B:00.0"), "0000:3b:00");
  EXPECT_EQ(NormalizePciBus("0000:3b:00"), "0000:3b:00");
  EXPECT_EQ(NormalizePciBus("3b:00.0"), "0000:3b:00");
}

TEST(GpuHealthTest, AllWellFailsNothingAndAnApplicationXidIsNoFailure) {
  absl::StatusOr<GpuProbe> probe = ParseGpuProbe(Sample("healthy.txt"));
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ(probe->gpus.size(), 8u);
  ASSERT_EQ(probe->xids.size(), 1u);
  EXPECT_EQ(probe->xids[0].xid, 13);
  EXPECT_EQ(probe->xids[0].pci_bus, "0000:3b:00");
  EXPECT_THAT(FailedGpus(*probe, TwoNodes()), IsEmpty());
}

// nvidia-smi no longer lists a GPU that fell off the bus (its Xid 79 names a bus no listed GPU
// has); the node's other GPUs are fine; the other node, not reached by this probe, is not judged.
TEST(GpuHealthTest, AGpuMissingFromTheListFellOffTheBus) {
  EXPECT_THAT(Failed("fallen-off-bus.txt"),
              UnorderedElementsAre(Pair(Uuid(3), HasSubstr("not listed"))));
}

TEST(GpuHealthTest, ErrorValuesPendingRemapsAndUncorrectedEccFailTheirGpu) {
  EXPECT_THAT(Failed("requires-reset.txt"),
              UnorderedElementsAre(Pair(Uuid(5), HasSubstr("[GPU requires reset]")),
                                   Pair(Uuid(6), "remapped_rows.pending: Yes"),
                                   Pair(Uuid(7), "ecc.errors.uncorrected.volatile.total: 2")));
}

TEST(GpuHealthTest, AnXidThatCallsForAResetFailsTheGpuOnItsBus) {
  EXPECT_THAT(Failed("xid-48.txt"), UnorderedElementsAre(Pair(Uuid(4), HasSubstr("Xid 48"))));
}

TEST(GpuHealthTest, XidsFromNvidiasCatalog) {
  for (int xid : {46, 48, 62, 64, 74, 79, 95, 119, 120, 144, 150, 158}) {
    EXPECT_TRUE(XidCallsForDrain(xid)) << xid;
  }
  // Application errors, a contained error (restart the application), informational ones.
  for (int xid : {13, 31, 43, 45, 68, 94, 63, 92, 154}) {
    EXPECT_FALSE(XidCallsForDrain(xid)) << xid;
  }
}

TEST(GpuHealthTest, OutputWithoutAUuidHeaderIsRefused) {
  EXPECT_EQ(ParseGpuProbe("").status().code(), absl::StatusCode::kInvalidArgument);
  // nvidia-smi with noheader: the columns cannot be known.
  EXPECT_EQ(ParseGpuProbe("GPU-1, 00000000:18:00.0, 0\n").status().code(),
            absl::StatusCode::kInvalidArgument);
  // The header with units, as without nounits.
  absl::StatusOr<GpuProbe> probe =
      ParseGpuProbe("index, uuid, memory.total [MiB]\n0, GPU-a, 81559 MiB\n");
  ASSERT_TRUE(probe.ok()) << probe.status();
  ASSERT_EQ(probe->gpus.size(), 1u);
  EXPECT_EQ(probe->gpus[0].uuid, "GPU-a");
  EXPECT_EQ(probe->gpus[0].problem, "");
}

TEST(GpuHealthTest, TheProbeCommandIsBoundedInTimeAndOutput) {
  absl::StatusOr<std::string> out = RunProbeCommand("printf 'a\\nb\\n'; exit 3", kProbeTimeout);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "a\nb\n") << "the exit status does not matter";
  EXPECT_EQ(RunProbeCommand("sleep 30", std::chrono::milliseconds(200)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(RunProbeCommand("yes", kProbeTimeout, 4096).status().code(),
            absl::StatusCode::kResourceExhausted);
  // Its output closed, still running.
  EXPECT_EQ(
      RunProbeCommand("echo x; exec >&-; sleep 30", std::chrono::milliseconds(200)).status().code(),
      absl::StatusCode::kDeadlineExceeded);
}

// A verdict stays until Reset: the next probe that shows the GPU well does not bring it back.
TEST(GpuHealthTest, TheMonitorReportsNewFailuresOnceAndKeepsThemUntilReset) {
  const std::string state = ::testing::TempDir() + "/gpu-health-probe.txt";
  auto write = [&](const std::string& text) { std::ofstream(state, std::ios::trunc) << text; };
  auto use = [&](const std::string& sample) { write(Sample(sample)); };
  std::vector<v1::Inventory> reports;
  GpuHealthMonitor::Options options;
  options.command = "cat '" + state + "'";
  options.timeout = kProbeTimeout;
  GpuHealthMonitor monitor(options, TwoNodes(),
                           [&](v1::Inventory inv) { reports.push_back(std::move(inv)); });
  auto unhealthy = [](const v1::Inventory& inv) {
    std::vector<std::string> out;
    for (const v1::Node& n : inv.nodes()) {
      for (const v1::Gpu& g : n.gpus()) {
        if (!g.healthy()) out.push_back(g.uuid());
      }
    }
    return out;
  };

  use("healthy.txt");
  auto fresh = monitor.ProbeOnce();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_THAT(*fresh, IsEmpty());
  EXPECT_THAT(reports, IsEmpty()) << "nothing changed, nothing reported";

  use("fallen-off-bus.txt");
  fresh = monitor.ProbeOnce();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_THAT(*fresh, ElementsAre(Key(Uuid(3))));
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_THAT(unhealthy(reports[0]), ElementsAre(Uuid(3)));

  use("xid-48.txt");  // GPU 3 listed again, GPU 4 fails
  fresh = monitor.ProbeOnce();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_THAT(*fresh, ElementsAre(Key(Uuid(4))));
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_THAT(unhealthy(reports[1]), UnorderedElementsAre(Uuid(3), Uuid(4)));

  use("healthy.txt");
  fresh = monitor.ProbeOnce();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_THAT(*fresh, IsEmpty());
  EXPECT_EQ(reports.size(), 2u);

  // A probe that fails changes nothing.
  write("nvidia-smi: command not found\n");
  EXPECT_EQ(monitor.ProbeOnce().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reports.size(), 2u);

  monitor.Reset(TwoNodes());  // the operator re-read the topology (SIGHUP)
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_THAT(unhealthy(reports[2]), IsEmpty());
}

}  // namespace
}  // namespace gpufed::agent
