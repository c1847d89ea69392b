#include "agent/process_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX kill
#include <stdlib.h>  // NOLINT(modernize-deprecated-headers): POSIX mkdtemp, setenv
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "federation/clock.h"
#include "tests/agent/event_collector.h"
#include "tests/support/status_matchers.h"

namespace gpufed::agent {
namespace {

using ::gpufed::testing::EventCollector;
using ::gpufed::testing::MakeAssignment;
using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() {
    std::string templ =
        (std::filesystem::temp_directory_path() / "gpufed-agent-test-XXXXXX").string();
    path_ = mkdtemp(templ.data()) != nullptr ? templ : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Waits until `path` holds a complete line; returns its content without the newline.
std::optional<std::string> WaitForLine(const std::string& path,
                                       absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::optional<std::string> text = ReadFile(path);
    if (text.has_value() && !text->empty() && text->back() == '\n') {
      return std::string(absl::StripSuffix(*text, "\n"));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return std::nullopt;
}

// True once `pid` is gone or a zombie (whoever reaps orphans in this container may be slow).
bool IsDead(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::optional<std::string> stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.has_value()) return true;
  const size_t paren = stat->rfind(')');
  return paren != std::string::npos && paren + 2 < stat->size() && (*stat)[paren + 2] == 'Z';
}

bool WaitDead(pid_t pid, absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (IsDead(pid)) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return false;
}

pid_t ReadPid(const std::string& path) {
  std::optional<std::string> line = WaitForLine(path);
  int pid = 0;
  if (!line.has_value() || !absl::SimpleAtoi(*line, &pid)) return -1;
  return pid;
}

class ProcessBackendTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(absl::Seconds(10)); }

  void Make(absl::Duration grace) {
    backend_.reset();
    ProcessBackendOptions options;
    options.work_dir = dir_.path() + "/work";
    options.kill_grace = grace;
    auto b = ProcessBackend::Create(options, events_.Callback());
    ASSERT_OK(b);
    backend_ = std::move(*b);
  }

  v1::WorkAssignment Shell(const std::string& id, const std::string& script, int replicas = 1,
                           int gpus = 1) {
    v1::WorkAssignment a = MakeAssignment(id, replicas, gpus);
    a.mutable_spec()->mutable_run()->add_command(script);
    (*a.mutable_spec()->mutable_run()->mutable_env())["OUT"] = dir_.path();
    return a;
  }

  TempDir dir_;
  EventCollector events_;
  std::unique_ptr<ProcessBackend> backend_;
};

TEST_F(ProcessBackendTest, ExitZeroSucceeds) {
  ASSERT_OK(backend_->Start(Shell("ok", "true")));
  EXPECT_EQ(events_.WaitTerminal("ok").state, v1::WORKLOAD_STATE_SUCCEEDED);
  const auto all = events_.EventsOf("ok");
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].state, v1::WORKLOAD_STATE_RUNNING);
  EXPECT_EQ(backend_->Active(), 0u);
}

TEST_F(ProcessBackendTest, NonZeroExitFailsWithTheCode) {
  ASSERT_OK(backend_->Start(Shell("bad", "exit 3")));
  const WorkloadEvent end = events_.WaitTerminal("bad");
  EXPECT_EQ(end.state, v1::WORKLOAD_STATE_FAILED);
  EXPECT_EQ(end.exit_code, 3);
  EXPECT_THAT(end.message, HasSubstr("exited with code 3"));
}

TEST_F(ProcessBackendTest, DeathBySignalIs128PlusSignal) {
  ASSERT_OK(backend_->Start(Shell("sig", "kill -KILL $$")));
  const WorkloadEvent end = events_.WaitTerminal("sig");
  EXPECT_EQ(end.state, v1::WORKLOAD_STATE_FAILED);
  EXPECT_EQ(end.exit_code, 128 + SIGKILL);
}

TEST_F(ProcessBackendTest, MultiElementCommandIsExecDirectly) {
  v1::WorkAssignment a = MakeAssignment("direct");
  for (const char* arg : {"sh", "-c", "exit 5", "ignored-arg0"}) {
    a.mutable_spec()->mutable_run()->add_command(arg);
  }
  ASSERT_OK(backend_->Start(a));
  const WorkloadEvent end = events_.WaitTerminal("direct");
  EXPECT_EQ(end.state, v1::WORKLOAD_STATE_FAILED);
  EXPECT_EQ(end.exit_code, 5);
}

TEST_F(ProcessBackendTest, MissingProgramFailsWithoutRunning) {
  v1::WorkAssignment a = MakeAssignment("missing");
  a.mutable_spec()->mutable_run()->add_command("/nonexistent/program");
  a.mutable_spec()->mutable_run()->add_command("arg");
  ASSERT_OK(backend_->Start(a));
  const WorkloadEvent end = events_.WaitTerminal("missing");
  EXPECT_EQ(end.state, v1::WORKLOAD_STATE_FAILED);
  EXPECT_EQ(end.exit_code, 127);
  EXPECT_THAT(end.message, HasSubstr("/nonexistent/program"));
  EXPECT_EQ(events_.EventsOf("missing").size(), 1u);  // no RUNNING
}

TEST_F(ProcessBackendTest, ReplicasSeeTheirDevicesAndTheEnvironment) {
  ASSERT_EQ(setenv("GPUFED_AGENT_TOKEN", "secret-token", 1), 0);
  ASSERT_EQ(setenv("GPUFED_INHERITED_CHECK", "1", 1), 0);
  ASSERT_EQ(setenv("PLAIN_INHERITED", "yes", 1), 0);
  Make(absl::Seconds(10));  // the base environment is captured at creation
  unsetenv("GPUFED_AGENT_TOKEN");
  unsetenv("GPUFED_INHERITED_CHECK");

  v1::WorkAssignment a = Shell(
      "env",
      "echo \"$CUDA_VISIBLE_DEVICES|$GPUFED_WORKLOAD_ID|$GPUFED_REPLICA_INDEX|"
      "$GPUFED_REPLICA_COUNT|$GPUFED_NODE|$FOO|${GPUFED_AGENT_TOKEN-unset}|"
      "${GPUFED_INHERITED_CHECK-unset}|$PLAIN_INHERITED\" > \"$OUT/replica-$GPUFED_REPLICA_INDEX\"",
      2, 2);
  (*a.mutable_spec()->mutable_run()->mutable_env())["FOO"] = "bar baz";
  // The spec cannot move a replica onto other devices.
  (*a.mutable_spec()->mutable_run()->mutable_env())["CUDA_VISIBLE_DEVICES"] = "7";
  ASSERT_OK(backend_->Start(a));
  ASSERT_EQ(events_.WaitTerminal("env").state, v1::WORKLOAD_STATE_SUCCEEDED);
  EXPECT_EQ(ReadFile(dir_.path() + "/replica-0"), "0,1|env|0|2|node-01|bar baz|unset|unset|yes\n");
  EXPECT_EQ(ReadFile(dir_.path() + "/replica-1"), "2,3|env|1|2|node-01|bar baz|unset|unset|yes\n");
  unsetenv("PLAIN_INHERITED");
}

TEST_F(ProcessBackendTest, ReplicasSeeTheirMigInstanceOrGpuShare) {
  v1::WorkAssignment a = Shell("parts",
                               "echo \"$CUDA_VISIBLE_DEVICES|${GPUFED_MIG_PROFILE-unset}|"
                               "${GPUFED_MIG_START-unset}|${GPUFED_GPU_MILLI-unset}\" > "
                               "\"$OUT/part-$GPUFED_REPLICA_INDEX\"",
                               3, 1);
  v1::ReplicaAssignment& mig = *a.mutable_assignment()->mutable_replicas(0);
  mig.set_mig_profile("3g.40gb");
  mig.set_mig_start(4);
  a.mutable_assignment()->mutable_replicas(1)->set_gpu_milli(250);
  // Replica 2 holds its GPU whole; the spec cannot pretend otherwise.
  (*a.mutable_spec()->mutable_run()->mutable_env())["GPUFED_MIG_PROFILE"] = "7g.80gb";
  (*a.mutable_spec()->mutable_run()->mutable_env())["GPUFED_GPU_MILLI"] = "1";
  ASSERT_OK(backend_->Start(a));
  ASSERT_EQ(events_.WaitTerminal("parts").state, v1::WORKLOAD_STATE_SUCCEEDED);
  // CUDA_VISIBLE_DEVICES stays the GPU index (a real backend would pass the MIG device UUID).
  EXPECT_EQ(ReadFile(dir_.path() + "/part-0"), "0|3g.40gb|4|unset\n");
  EXPECT_EQ(ReadFile(dir_.path() + "/part-1"), "1|unset|unset|250\n");
  EXPECT_EQ(ReadFile(dir_.path() + "/part-2"), "2|unset|unset|unset\n");
}

TEST_F(ProcessBackendTest, OutputGoesToTheWorkloadLog) {
  ASSERT_OK(backend_->Start(Shell("log", "echo to-stdout; echo to-stderr >&2")));
  ASSERT_EQ(events_.WaitTerminal("log").state, v1::WORKLOAD_STATE_SUCCEEDED);
  EXPECT_EQ(backend_->LogPath("log"), dir_.path() + "/work/logs/log.log");
  std::optional<std::string> text = ReadFile(backend_->LogPath("log"));
  ASSERT_TRUE(text.has_value());
  EXPECT_THAT(*text, HasSubstr("to-stdout\n"));
  EXPECT_THAT(*text, HasSubstr("to-stderr\n"));
}

// Logs are kept for the last max_logs ended workloads only, counting what an earlier run left.
TEST_F(ProcessBackendTest, KeepsTheLogsOfTheLastEndedWorkloadsOnly) {
  backend_.reset();
  const std::string logs = dir_.path() + "/work/logs";
  std::filesystem::create_directories(logs);
  std::ofstream(logs + "/earlier.log") << "from an earlier run\n";
  ProcessBackendOptions options;
  options.work_dir = dir_.path() + "/work";
  options.max_logs = 3;
  ASSERT_OK_AND_ASSIGN(backend_, ProcessBackend::Create(options, events_.Callback()));
  for (int i = 0; i < 5; ++i) {
    const std::string id = absl::StrCat("j", i);
    ASSERT_OK(backend_->Start(Shell(id, "echo hi")));
    ASSERT_EQ(events_.WaitTerminal(id).state, v1::WORKLOAD_STATE_SUCCEEDED);
  }
  std::set<std::string> kept;
  for (const auto& entry : std::filesystem::directory_iterator(logs)) {
    kept.insert(entry.path().filename().string());
  }
  EXPECT_EQ(kept, (std::set<std::string>{"j2.log", "j3.log", "j4.log"}));
}

TEST_F(ProcessBackendTest, CancelKillsTheWholeProcessGroup) {
  // The grandchild sleep shares the replica's process group.
  ASSERT_OK(backend_->Start(Shell("cancel", "sleep 1000 & echo $! > \"$OUT/gc.pid\"; wait")));
  const pid_t grandchild = ReadPid(dir_.path() + "/gc.pid");
  ASSERT_GT(grandchild, 0);
  ASSERT_TRUE(events_.Wait([](const auto& e) { return !e.empty(); }));
  ASSERT_FALSE(IsDead(grandchild));
  ASSERT_OK(backend_->Cancel("cancel"));
  const WorkloadEvent end = events_.WaitTerminal("cancel");
  EXPECT_EQ(end.state, v1::WORKLOAD_STATE_CANCELLED);
  EXPECT_TRUE(WaitDead(grandchild)) << "grandchild " << grandchild << " survived the cancel";
  EXPECT_EQ(backend_->Active(), 0u);
}

TEST_F(ProcessBackendTest, CancelEscalatesToSigkillAfterTheGrace) {
  Make(absl::Milliseconds(300));
  // Both the shell and its child ignore SIGTERM (an ignored disposition survives exec).
  ASSERT_OK(backend_->Start(Shell("ignores-term",
                                  "trap '' TERM; sleep 1000 & echo $! > \"$OUT/gc.pid\"; wait; "
                                  "wait")));
  const pid_t grandchild = ReadPid(dir_.path() + "/gc.pid");
  ASSERT_GT(grandchild, 0);
  const absl::Time cancelled_at = absl::Now();
  ASSERT_OK(backend_->Cancel("ignores-term"));
  const WorkloadEvent end = events_.WaitTerminal("ignores-term");
  EXPECT_EQ(end.state, v1::WORKLOAD_STATE_CANCELLED);
  EXPECT_THAT(end.message, HasSubstr("killed after the grace period"));
  EXPECT_GE(end.time - cancelled_at, absl::Milliseconds(300));
  EXPECT_TRUE(WaitDead(grandchild));
}

TEST_F(ProcessBackendTest, AFailingReplicaStopsTheGang) {
  ASSERT_OK(backend_->Start(Shell("gang",
                                  "if [ \"$GPUFED_REPLICA_INDEX\" = 1 ]; then exit 4; fi; "
                                  "echo $$ > \"$OUT/r0.pid\"; exec sleep 1000",
                                  2)));
  const WorkloadEvent end = events_.WaitTerminal("gang");
  EXPECT_EQ(end.state, v1::WORKLOAD_STATE_FAILED);
  EXPECT_EQ(end.exit_code, 4);
  EXPECT_THAT(end.message, HasSubstr("replica 1 exited with code 4"));
  // The terminal event means the whole gang is gone; replica 0 may not even have written its
  // pid before it was stopped.
  std::optional<std::string> r0 = ReadFile(dir_.path() + "/r0.pid");
  int pid = 0;
  if (r0.has_value() && absl::SimpleAtoi(absl::StripSuffix(*r0, "\n"), &pid)) {
    EXPECT_TRUE(IsDead(pid));
  }
}

TEST_F(ProcessBackendTest, LeftoverBackgroundProcessesAreSweptOnSuccess) {
  ASSERT_OK(backend_->Start(Shell("leftover", "sleep 1000 & echo $! > \"$OUT/bg.pid\"; exit 0")));
  ASSERT_EQ(events_.WaitTerminal("leftover").state, v1::WORKLOAD_STATE_SUCCEEDED);
  const pid_t bg = ReadPid(dir_.path() + "/bg.pid");
  ASSERT_GT(bg, 0);
  EXPECT_TRUE(WaitDead(bg));
}

TEST_F(ProcessBackendTest, RejectsWhatItCannotRun) {
  v1::WorkAssignment no_command = MakeAssignment("nocmd");
  absl::Status s = backend_->Start(no_command);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("spec.run.command"));

  s = backend_->Start(Shell("../escape", "true"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("workload_id"));

  v1::WorkAssignment no_replicas = Shell("norep", "true");
  no_replicas.mutable_assignment()->clear_replicas();
  s = backend_->Start(no_replicas);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("assignment.replicas"));

  v1::WorkAssignment bad_env = Shell("badenv", "true");
  (*bad_env.mutable_spec()->mutable_run()->mutable_env())["A=B"] = "x";
  s = backend_->Start(bad_env);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("spec.run.env"));

  ASSERT_OK(backend_->Start(Shell("twice", "sleep 1000")));
  EXPECT_EQ(backend_->Start(Shell("twice", "true")).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_OK(backend_->Cancel("twice"));
  EXPECT_EQ(backend_->Cancel("nobody").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(events_.Events().size() <= 2u);  // only "twice" produced events
}

TEST_F(ProcessBackendTest, ShutdownKillsRunningWorkWithoutReporting) {
  ASSERT_OK(backend_->Start(Shell("long", "sleep 1000 & echo $! > \"$OUT/gc.pid\"; wait")));
  const pid_t grandchild = ReadPid(dir_.path() + "/gc.pid");
  ASSERT_GT(grandchild, 0);
  ASSERT_TRUE(events_.Wait([](const auto& e) { return !e.empty(); }));
  backend_->Shutdown();
  EXPECT_TRUE(WaitDead(grandchild));
  EXPECT_EQ(events_.Events().size(), 1u);  // RUNNING only
  EXPECT_EQ(backend_->Start(Shell("late", "true")).code(), absl::StatusCode::kFailedPrecondition);
}

// Many short jobs, all started before any is reaped; the rate is printed, never asserted.
TEST_F(ProcessBackendTest, ManyShortJobs) {
  constexpr int kJobs = 1000;
  const absl::Time start = absl::Now();
  for (int i = 0; i < kJobs; ++i) {
    v1::WorkAssignment a = MakeAssignment(absl::StrCat("short-", i));
    a.mutable_spec()->mutable_run()->add_command("true");
    ASSERT_OK(backend_->Start(a));
  }
  ASSERT_TRUE(events_.Wait(
      [](const auto& e) {
        size_t ended = 0;
        for (const WorkloadEvent& ev : e) ended += IsTerminal(ev.state) ? 1 : 0;
        return ended >= static_cast<size_t>(kJobs);
      },
      absl::Seconds(120)));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(events_.CountState(v1::WORKLOAD_STATE_SUCCEEDED), static_cast<size_t>(kJobs));
  EXPECT_EQ(events_.CountState(v1::WORKLOAD_STATE_RUNNING), static_cast<size_t>(kJobs));
  EXPECT_EQ(backend_->Active(), 0u);
  std::printf("[ figures  ] process backend: %d x `true` in %s = %.0f jobs/s\n", kJobs,
              absl::FormatDuration(took).c_str(), kJobs / absl::ToDoubleSeconds(took));
}

// Event times are the injected clock's, not the wall clock's.
TEST_F(ProcessBackendTest, EventTimesComeFromTheInjectedClock) {
  FakeClock clock;
  clock.Advance(std::chrono::hours(3));
  backend_.reset();
  ProcessBackendOptions options;
  options.work_dir = dir_.path() + "/work";
  options.clock = &clock;
  auto b = ProcessBackend::Create(options, events_.Callback());
  ASSERT_OK(b);
  backend_ = std::move(*b);

  ASSERT_OK(backend_->Start(Shell("timed", "true")));
  ASSERT_EQ(events_.WaitTerminal("timed").state, v1::WORKLOAD_STATE_SUCCEEDED);
  const auto all = events_.EventsOf("timed");
  ASSERT_EQ(all.size(), 2u);
  for (const WorkloadEvent& e : all) EXPECT_EQ(e.time, AbslNow(clock)) << e.state;
  backend_.reset();  // before the clock goes
}

// A process group of `sleep 1000` that this test owns (as a dead agent's backend would have
// left it); its pid leads the group.
pid_t SpawnSleepGroup() {
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
    _exit(127);
  }
  // In the parent too: the group must exist before the test records it (the child may not have
  // run yet).
  if (pid > 0) setpgid(pid, pid);
  return pid;
}

// An agent killed with -9 leaves its process groups running; the backend that starts next on
// the same work dir kills those it recorded under this boot, and leaves records of another boot
// alone (their ids may now name anything).
TEST_F(ProcessBackendTest, ProcessGroupsAnEarlierAgentLeftAreKilledAtStart) {
  const pid_t orphan = SpawnSleepGroup();
  const pid_t other_boot = SpawnSleepGroup();
  ASSERT_GT(orphan, 0);
  ASSERT_GT(other_boot, 0);
  std::string boot;
  std::getline(std::ifstream("/proc/sys/kernel/random/boot_id"), boot);
  ASSERT_FALSE(boot.empty());
  const std::string running = dir_.path() + "/work/running";
  std::ofstream(running + "/17") << boot << "\n" << orphan << "\n";
  std::ofstream(running + "/18") << "another-boot\n" << other_boot << "\n";

  Make(absl::Seconds(10));
  EXPECT_TRUE(WaitDead(orphan));
  EXPECT_FALSE(IsDead(other_boot));
  EXPECT_FALSE(std::filesystem::exists(running + "/17"));
  kill(-other_boot, SIGKILL);
  kill(orphan, SIGKILL);  // never hang below if the backend missed it
  waitpid(orphan, nullptr, 0);
  waitpid(other_boot, nullptr, 0);
}

// What the backend records while a workload runs, and removes when it ends.
TEST_F(ProcessBackendTest, ARunningWorkloadIsRecordedUntilItEnds) {
  ASSERT_OK(backend_->Start(Shell("rec", "echo $$ > $OUT/rec.pid; exec sleep 1000")));
  const pid_t pid = ReadPid(dir_.path() + "/rec.pid");
  ASSERT_GT(pid, 0);
  const std::optional<std::string> record = ReadFile(dir_.path() + "/work/running/rec");
  ASSERT_TRUE(record.has_value());
  EXPECT_THAT(*record, HasSubstr(absl::StrCat("\n", pid, "\n")));
  ASSERT_OK(backend_->Cancel("rec"));
  EXPECT_EQ(events_.WaitTerminal("rec").state, v1::WORKLOAD_STATE_CANCELLED);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/work/running/rec"));
}

}  // namespace
}  // namespace gpufed::agent
