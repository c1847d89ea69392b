#ifndef GPUFED_TESTS_SUPPORT_TCP_PROXY_H_
#define GPUFED_TESTS_SUPPORT_TCP_PROXY_H_

// A TCP proxy on 127.0.0.1 that a fault test can partition: a process told to dial the proxy
// reaches the upstream port through it until Partition(), after which nothing crosses in either
// direction (connections stay open and what is sent waits in the kernel's buffers, as in a
// network partition that drops packets) and new connections are accepted but not connected
// through. Heal() lets everything through again, including what waited.

#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace gpufed::testing {

class TcpProxy {
 public:
  // Listens on 127.0.0.1, a port of its own, and forwards to 127.0.0.1:`upstream_port`.
  static absl::StatusOr<std::unique_ptr<TcpProxy>> Start(int upstream_port);
  ~TcpProxy();  // closes every connection
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  [[nodiscard]] int port() const { return port_; }
  void Partition();
  void Heal();

 private:
  struct Pair {
    int client = -1;
    int upstream = -1;  // -1: accepted during a partition, not connected through yet
  };
  TcpProxy(int listen_fd, int port, int upstream_port, int wake_read, int wake_write);
  void Loop();
  void Wake() const;

  const int listen_fd_;
  const int port_;
  const int upstream_port_;
  const int wake_read_;
  const int wake_write_;
  std::thread thread_;

  absl::Mutex mu_;
  bool partitioned_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The loop thread's.
  std::vector<Pair> pairs_;
};

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_SUPPORT_TCP_PROXY_H_
