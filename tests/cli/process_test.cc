// Runs the real gpufedctl binary as a child process against the in-process fake server: what a
// user's shell sees (exit status, stdout, stderr, Ctrl-C).

#include <fcntl.h>
#include <poll.h>
#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX kill
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/fake_gpufed_server.h"

extern char** environ;

namespace gpufed::cli {
namespace {

using ::gpufed::cli::testing::FakeGpufedServer;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A running gpufedctl with its stdout and stderr on pipes.
class Child {
 public:
  explicit Child(const std::vector<std::string>& args) {
    int out_pipe[2];
    int err_pipe[2];
    if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
    posix_spawn_file_actions_addclose(&actions, out_pipe[0]);
    posix_spawn_file_actions_addclose(&actions, err_pipe[0]);
    // The fake server is plaintext.
    std::vector<std::string> full = {GPUFEDCTL_PATH, "--insecure-plaintext"};
    full.insert(full.end(), args.begin(), args.end());
    std::vector<char*> argv;
    argv.reserve(full.size() + 1);
    for (std::string& a : full) argv.push_back(a.data());
    argv.push_back(nullptr);
    // No config file or token from whoever runs the tests.
    std::string home = absl::StrCat("HOME=", ::testing::TempDir());
    std::vector<char*> envp = {home.data(), nullptr};
    if (posix_spawn(&pid_, GPUFEDCTL_PATH, &actions, nullptr, argv.data(), envp.data()) != 0) {
      pid_ = -1;
    }
    posix_spawn_file_actions_destroy(&actions);
    close(out_pipe[1]);
    close(err_pipe[1]);
    out_fd_ = out_pipe[0];
    err_fd_ = err_pipe[0];
    fcntl(out_fd_, F_SETFL, O_NONBLOCK);
    fcntl(err_fd_, F_SETFL, O_NONBLOCK);
  }

  ~Child() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
    if (err_fd_ >= 0) close(err_fd_);
  }

  [[nodiscard]] bool started() const { return pid_ > 0; }

  // Reads what is available from both pipes, waiting up to `wait`.
  void Pump(absl::Duration wait) {
    pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    if (poll(fds, 2, static_cast<int>(absl::ToInt64Milliseconds(wait))) <= 0) return;
    char buf[4096];
    for (auto [fd, text] : {std::pair{out_fd_, &out_}, std::pair{err_fd_, &err_}}) {
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) text->append(buf, static_cast<size_t>(n));
    }
  }

  // Pumps output until `lines` lines arrived on stdout or the deadline passed.
  bool WaitForLines(int lines, absl::Duration limit) {
    const absl::Time deadline = absl::Now() + limit;
    while (std::count(out_.begin(), out_.end(), '\n') < lines) {
      if (absl::Now() > deadline) return false;
      Pump(absl::Milliseconds(50));
    }
    return true;
  }

  // Waits for the process to end; returns its wait status, or -1 after the deadline.
  int Wait(absl::Duration limit) {
    const absl::Time deadline = absl::Now() + limit;
    while (absl::Now() < deadline) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        Pump(absl::ZeroDuration());
        return status;
      }
      Pump(absl::Milliseconds(20));
    }
    return -1;
  }

  void Signal(int sig) { kill(pid_, sig); }
  [[nodiscard]] const std::string& out() const { return out_; }
  [[nodiscard]] const std::string& err() const { return err_; }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string out_;
  std::string err_;
};

TEST(ProcessTest, CtrlCEndsWatchCleanly) {
  std::unique_ptr<FakeGpufedServer> server = FakeGpufedServer::Start();
  ASSERT_NE(server, nullptr);
  for (const char* name : {"a", "b"}) {
    v1::Workload w;
    w.mutable_spec()->set_name(name);
    w.set_state(v1::WORKLOAD_STATE_PENDING);
    server->AddWorkload(w);
  }
  Child child({"--server", server->address(), "watch"});
  ASSERT_TRUE(child.started());
  ASSERT_TRUE(child.WaitForLines(2, absl::Seconds(20))) << child.out() << child.err();
  child.Signal(SIGINT);
  const int status = child.Wait(absl::Seconds(20));
  ASSERT_NE(status, -1) << "gpufedctl did not exit after SIGINT";
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << child.err();
  EXPECT_EQ(child.err(), "");
  EXPECT_THAT(child.out(), HasSubstr("  1  a  PENDING\n"));
}

TEST(ProcessTest, UnreachableServerExitsOneWithTheCode) {
  // Port 1 on loopback: nothing listens, the connection is refused at once.
  Child child({"--server", "127.0.0.1:1", "list"});
  ASSERT_TRUE(child.started());
  const int status = child.Wait(absl::Seconds(60));
  ASSERT_NE(status, -1);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_THAT(child.err(), StartsWith("error: UNAVAILABLE: "));
  EXPECT_EQ(child.out(), "");
}

TEST(ProcessTest, UsageErrorExitsTwo) {
  Child child({"submit", "--replicas", "many"});
  ASSERT_TRUE(child.started());
  const int status = child.Wait(absl::Seconds(20));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_THAT(child.err(), HasSubstr("--replicas"));
}

}  // namespace
}  // namespace gpufed::cli
