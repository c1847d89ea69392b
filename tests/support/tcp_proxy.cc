#include "tests/support/tcp_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace gpufed::testing {
namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

int ConnectUpstream(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const sockaddr_in addr = Loopback(port);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Moves what `from` has to `to`; false when either side is done.
bool Forward(int from, int to) {
  char buf[64 << 10];
  const ssize_t n = ::read(from, buf, sizeof(buf));
  if (n <= 0) return n < 0 && (errno == EAGAIN || errno == EINTR);
  for (ssize_t sent = 0; sent < n;) {
    const ssize_t w = ::write(to, buf + sent, static_cast<size_t>(n - sent));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    sent += w;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start(int upstream_port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("proxy: socket");
  sockaddr_in addr = Loopback(0);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 64) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return absl::InternalError("proxy: cannot listen on 127.0.0.1");
  }
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(fd);
    return absl::InternalError("proxy: pipe");
  }
  std::unique_ptr<TcpProxy> proxy(
      new TcpProxy(fd, ntohs(addr.sin_port), upstream_port, wake[0], wake[1]));
  proxy->thread_ = std::thread([p = proxy.get()] { p->Loop(); });
  return proxy;
}

TcpProxy::TcpProxy(int listen_fd, int port, int upstream_port, int wake_read, int wake_write)
    : listen_fd_(listen_fd),
      port_(port),
      upstream_port_(upstream_port),
      wake_read_(wake_read),
      wake_write_(wake_write) {}

TcpProxy::~TcpProxy() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  Wake();
  thread_.join();
  for (const Pair& p : pairs_) {
    ::close(p.client);
    if (p.upstream >= 0) ::close(p.upstream);
  }
  ::close(listen_fd_);
  ::close(wake_read_);
  ::close(wake_write_);
}

void TcpProxy::Partition() {
  absl::MutexLock lock(&mu_);
  partitioned_ = true;
}

void TcpProxy::Heal() {
  {
    absl::MutexLock lock(&mu_);
    partitioned_ = false;
  }
  Wake();
}

void TcpProxy::Wake() const {
  const char c = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_write_, &c, 1);
}

void TcpProxy::Loop() {
  for (;;) {
    bool partitioned;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      partitioned = partitioned_;
    }
    if (!partitioned) {
      for (Pair& p : pairs_) {
        if (p.upstream < 0) p.upstream = ConnectUpstream(upstream_port_);
      }
    }
    std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    if (!partitioned) {
      for (const Pair& p : pairs_) {
        fds.push_back({p.client, POLLIN, 0});
        fds.push_back({p.upstream, POLLIN, 0});
      }
    }
    // A short timeout: Partition() takes effect within it without a wake-up.
    if (::poll(fds.data(), fds.size(), 20) < 0 && errno != EINTR) return;
    if ((fds[1].revents & POLLIN) != 0) {
      char buf[64];
      while (::read(wake_read_, buf, sizeof(buf)) > 0) {
      }
    }
    if ((fds[0].revents & POLLIN) != 0) {
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client >= 0)
        pairs_.push_back({client, partitioned ? -1 : ConnectUpstream(upstream_port_)});
    }
    if (partitioned) continue;
    std::vector<Pair> alive;
    for (size_t i = 0; i < pairs_.size(); ++i) {
      const Pair& p = pairs_[i];
      bool ok = p.upstream >= 0;
      if (ok && i * 2 + 3 < fds.size()) {
        const pollfd& c = fds[2 + i * 2];
        const pollfd& u = fds[3 + i * 2];
        if ((c.revents & (POLLIN | POLLHUP | POLLERR)) != 0) ok = Forward(p.client, p.upstream);
        if (ok && (u.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
          ok = Forward(p.upstream, p.client);
        }
      }
      if (ok) {
        alive.push_back(p);
      } else {
        ::close(p.client);
        if (p.upstream >= 0) ::close(p.upstream);
      }
    }
    pairs_ = std::move(alive);
  }
}

}  // namespace gpufed::testing
