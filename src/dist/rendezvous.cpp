// The ranks' TCP rendezvous and liveness watch (the protocol: rendezvous.h). Every socket is
// non-blocking and every wait is a poll() with a deadline, so no step can hang past the timeout
// and the watch thread sees finish() within one tick.
#include "dist/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "kiln/error.h"

namespace kiln::dist {
namespace {

using Clock = std::chrono::steady_clock;

enum class FrameType : uint8_t { Hello = 1, Blob = 2, Refuse = 3, Lost = 4, Goodbye = 5 };

constexpr char kMagic[8] = {'k', 'i', 'l', 'n', 'R', 'D', 'V', '1'};
constexpr size_t kHeaderBytes = 5;
constexpr size_t kHelloBytes = sizeof kMagic + 8;
constexpr uint32_t kMaxPayload = 1u << 20;  // a stray peer cannot make us allocate much
constexpr int kWatchTickMs = 100;           // how long finish() may wait for the watch thread
// Sending a Goodbye, Refuse or Lost is a courtesy: a peer that does not take it within this long
// is not waited for.
constexpr auto kCourtesy = std::chrono::seconds(1);

struct Frame {
  FrameType type;
  std::vector<uint8_t> payload;
};

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(uint8_t(v >> shift));
}

uint32_t get_u32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

std::vector<uint8_t> text_bytes(const std::string& text) { return {text.begin(), text.end()}; }

std::string bytes_text(const uint8_t* begin, const uint8_t* end) { return {begin, end}; }

Clock::time_point deadline_after(double seconds) {
  const double capped = std::clamp(seconds, 0.0, 1e7);  // an "infinite" timeout must not overflow
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(capped));
}

int milliseconds_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::clamp<long long>(left, 0, 1 << 30));
}

// poll() that treats a signal's interruption as "nothing happened yet".
int poll_for(pollfd* fds, size_t count, int timeout_ms) {
  const int n = ::poll(fds, nfds_t(count), timeout_ms);
  return n < 0 && errno == EINTR ? 0 : n;
}

std::string peer_host(const sockaddr_storage& addr, socklen_t size) {
  char host[NI_MAXHOST] = {};
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), size, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0)
    return "an unknown address";
  std::string text = host;
  if (text.rfind("::ffff:", 0) == 0) text.erase(0, 7);  // an IPv4 peer on the dual-stack listener
  return text;
}

// Short keepalive probes: a peer whose machine vanishes (no FIN ever comes) is noticed within
// about 90 s instead of the kernel's default two hours.
void tune_connection(int fd) {
  const int on = 1, idle = 30, interval = 10, probes = 6;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

// A listening socket on every interface: IPv6 with IPv4 mapped where the kernel has IPv6, else
// IPv4 alone. -1 with errno when neither could bind.
int bind_listener(int port) {
  const int on = 1, off = 0;
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    sockaddr_in6 any{};
    any.sin6_family = AF_INET6, any.sin6_addr = in6addr_any, any.sin6_port = htons(uint16_t(port));
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof any) == 0 && ::listen(fd, SOMAXCONN) == 0) return fd;
    ::close(fd);
  }
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in any{};
  any.sin_family = AF_INET, any.sin_addr.s_addr = htonl(INADDR_ANY), any.sin_port = htons(uint16_t(port));
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof any) == 0 && ::listen(fd, SOMAXCONN) == 0) return fd;
  const int error = errno;
  ::close(fd);
  errno = error;
  return -1;
}

struct ConnectAttempt {
  int fd = -1;
  std::string error;             // why the attempt failed
  bool unresolvable = false;     // the name does not resolve: retrying will not help
};

// One attempt at every address of host:port, each bounded by the deadline (and a few seconds, so a
// black-holed address does not use up the whole timeout).
ConnectAttempt connect_once(const std::string& host, int port, Clock::time_point deadline) {
  ConnectAttempt attempt;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC, hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) {
    attempt.error = ::gai_strerror(rc);
    attempt.unresolvable = rc != EAI_AGAIN && rc != EAI_SYSTEM;
    return attempt;
  }
  for (const addrinfo* a = found; a != nullptr && attempt.fd < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      attempt.error = std::strerror(errno);
      continue;
    }
    int error = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (error == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int wait_ms = std::min(milliseconds_left(deadline), 5000);
      if (poll_for(&p, 1, wait_ms) <= 0) {
        error = ETIMEDOUT;
      } else {
        socklen_t size = sizeof error;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size);
      }
    }
    if (error == 0) {
      attempt.fd = fd;
    } else {
      attempt.error = std::strerror(error);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  return attempt;
}

}  // namespace

// One TCP connection with its unread bytes. `rank` is the rank at the other end.
struct Rendezvous::Connection {
  int fd = -1;
  int rank = -1;
  std::string host;            // the other end's address, for messages
  std::vector<uint8_t> inbox;  // received bytes not yet taken as frames
  bool ended = false;          // the other end closed (or reset) the connection
  std::string end_reason;
  bool said_goodbye = false;

  explicit Connection(int socket, std::string from = {}) : fd(socket), host(std::move(from)) { tune_connection(fd); }
  ~Connection() { close(); }

  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  // Takes in whatever has arrived, without waiting (and no more than one frame's worth beyond
  // what is held: a stranger that floods the port cannot make it read forever).
  void receive() {
    uint8_t buffer[4096];
    while (fd >= 0 && !ended && inbox.size() <= kHeaderBytes + kMaxPayload) {
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n > 0) {
        inbox.insert(inbox.end(), buffer, buffer + n);
      } else if (n == 0) {
        ended = true, end_reason = "connection closed";
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return;
      } else {
        ended = true, end_reason = errno == ECONNRESET ? "connection reset" : std::strerror(errno);
      }
    }
  }

  // The next complete frame received, if any. A frame too large for the protocol ends the
  // connection: whatever sent it is not a kiln rank.
  std::optional<Frame> next_frame() {
    if (inbox.size() < kHeaderBytes) return std::nullopt;
    const uint32_t length = get_u32(inbox.data() + 1);
    if (length > kMaxPayload) {
      ended = true, end_reason = fmt::format("a malformed frame of {} bytes", length);
      inbox.clear();
      return std::nullopt;
    }
    if (inbox.size() < kHeaderBytes + length) return std::nullopt;
    Frame frame{FrameType(inbox[0]), {inbox.begin() + kHeaderBytes, inbox.begin() + kHeaderBytes + length}};
    inbox.erase(inbox.begin(), inbox.begin() + kHeaderBytes + length);
    return frame;
  }

  // The next frame, waiting for it until the deadline; nullopt when the connection ended first
  // (`ended`) or time ran out.
  std::optional<Frame> await_frame(Clock::time_point deadline) {
    for (;;) {
      if (std::optional<Frame> frame = next_frame()) return frame;
      if (ended || fd < 0) return std::nullopt;
      const int left = milliseconds_left(deadline);
      if (left == 0) return std::nullopt;
      pollfd p{fd, POLLIN, 0};
      poll_for(&p, 1, left);
      receive();
    }
  }

  // Sends one frame whole (partial writes resumed as room frees up); false when the connection
  // failed or the deadline passed.
  bool send(FrameType type, const std::vector<uint8_t>& payload, Clock::time_point deadline) {
    if (fd < 0) return false;
    std::vector<uint8_t> bytes{uint8_t(type)};
    put_u32(bytes, uint32_t(payload.size()));
    bytes.insert(bytes.end(), payload.begin(), payload.end());
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += size_t(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd p{fd, POLLOUT, 0};
        const int left = milliseconds_left(deadline);
        if (left == 0 || poll_for(&p, 1, left) <= 0) return false;
      } else {
        return false;
      }
    }
    return true;
  }

  // The last frame on this connection (Goodbye, Refuse), then the close. What the other end had
  // still sent is read first: closing with unread bytes makes a reset, which could overtake it.
  void send_last(FrameType type, const std::vector<uint8_t>& payload, Clock::time_point deadline) {
    if (fd < 0) return;
    if (!ended) send(type, payload, deadline);
    ::shutdown(fd, SHUT_WR);
    receive();
    close();
  }
};

Rendezvous::Rendezvous(const RankEnv& env, double timeout_seconds) : env_(env), timeout_seconds_(timeout_seconds) {
  if (env_.ranks < 1 || env_.rank < 0 || env_.rank >= env_.ranks)
    fail("internal: a rendezvous for rank {} of {} ranks", env_.rank, env_.ranks);
  if (env_.ranks == 1 || env_.rank != 0) return;
  listener_ = bind_listener(env_.master_port);
  if (listener_ < 0)
    fail("rank 0 cannot listen on TCP port {} (MASTER_PORT) to meet the other {} rank(s): {}; choose another port "
         "(kiln train --master HOST:PORT, or MASTER_PORT) or end the program that holds it",
         env_.master_port, env_.ranks - 1, std::strerror(errno));
}

Rendezvous::~Rendezvous() { finish(); }

std::vector<uint8_t> Rendezvous::share(const std::vector<uint8_t>& blob) {
  if (shared_ || finished_) fail("internal: Rendezvous::share() called twice or after finish()");
  shared_ = true;
  if (env_.ranks == 1) return blob;
  return env_.rank == 0 ? share_as_rank0(blob) : share_as_peer();
}

std::vector<uint8_t> Rendezvous::share_as_rank0(const std::vector<uint8_t>& blob) {
  if (blob.size() > kMaxPayload) fail("internal: a rendezvous blob of {} bytes (at most {})", blob.size(), kMaxPayload);
  const Clock::time_point deadline = deadline_after(timeout_seconds_);
  accept_every_rank(deadline);
  for (const std::unique_ptr<Connection>& c : connections_) {
    if (c && !c->send(FrameType::Blob, blob, deadline))
      refuse_all(fmt::format("rank 0: rank {} (at {}) stopped taking data while rank 0 sent it the group's id; see "
                             "rank {}'s output for why it ended",
                             c->rank, c->host, c->rank));
  }
  return blob;
}

void Rendezvous::accept_every_rank(Clock::time_point deadline) {
  connections_.clear();
  connections_.resize(size_t(env_.ranks));
  int joined = 0;
  while (joined < env_.ranks - 1) {
    const int left = milliseconds_left(deadline);
    if (left == 0) {
      std::vector<int> missing;
      for (int r = 1; r < env_.ranks; ++r)
        if (!connections_[size_t(r)]) missing.push_back(r);
      refuse_all(fmt::format("rank 0: rank(s) {} of {} did not join within {} s at TCP port {}; check that they were "
                             "started, with MASTER_ADDR naming this machine and MASTER_PORT={}, and that the port is "
                             "reachable from their machines (a firewall?)",
                             fmt::join(missing, ", "), env_.ranks, timeout_seconds_, env_.master_port,
                             env_.master_port));
    }
    std::vector<pollfd> fds{{listener_, POLLIN, 0}};
    for (const std::unique_ptr<Connection>& c : pending_) fds.push_back({c->fd, POLLIN, 0});
    if (poll_for(fds.data(), fds.size(), left) <= 0) continue;
    if (fds[0].revents & POLLIN) accept_waiting();
    // receive() does not wait, so every pending connection is simply asked again.
    for (size_t i = 0; i < pending_.size();) {
      Connection& c = *pending_[i];
      c.receive();
      const std::optional<Frame> hello = c.next_frame();
      if (!hello && !c.ended) {
        ++i;
        continue;
      }
      if (hello && hello->type == FrameType::Hello && hello->payload.size() == kHelloBytes &&
          std::equal(std::begin(kMagic), std::end(kMagic), hello->payload.begin())) {
        c.rank = int(get_u32(hello->payload.data() + sizeof kMagic));
        check_hello(c, int(get_u32(hello->payload.data() + sizeof kMagic + 4)));
        connections_[size_t(c.rank)] = std::move(pending_[i]);
        ++joined;
      }
      // Else a stranger (a port scan, a health check) that ended or sent no Hello: dropped, not counted.
      pending_.erase(pending_.begin() + std::ptrdiff_t(i));
    }
  }
  pending_.clear();  // strangers still silent: closed
}

void Rendezvous::accept_waiting() {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t size = sizeof addr;
    const int fd = ::accept4(listener_, reinterpret_cast<sockaddr*>(&addr), &size, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      pending_.push_back(std::make_unique<Connection>(fd, peer_host(addr, size)));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return;
    } else if (errno != EINTR && errno != ECONNABORTED) {
      refuse_all(fmt::format("rank 0: accepting the other ranks at TCP port {} failed: {}", env_.master_port,
                             std::strerror(errno)));
    }
  }
}

// A Hello from a process with another world size, or for a rank already taken, ends the
// rendezvous for everyone: training with a wrong group would fail later and less clearly.
void Rendezvous::check_hello(const Connection& c, int ranks) {
  if (ranks != env_.ranks)
    refuse_all(fmt::format("rank {} (at {}) was started with WORLD_SIZE={} but rank 0 with WORLD_SIZE={}; start every "
                           "rank with the same WORLD_SIZE (with kiln train: the same --gpus count and --nodes on every "
                           "machine)",
                           c.rank, c.host, ranks, env_.ranks));
  if (c.rank < 1 || c.rank >= env_.ranks)
    refuse_all(fmt::format("two processes claim rank {}: rank 0 itself and one at {}; start each process with its own "
                           "RANK, 0 to {}",
                           c.rank, c.host, env_.ranks - 1));
  if (const std::unique_ptr<Connection>& first = connections_[size_t(c.rank)])
    refuse_all(fmt::format("two processes claim rank {}: one at {} and one at {}; start each process with its own "
                           "RANK, 0 to {}",
                           c.rank, first->host, c.host, env_.ranks - 1));
}

void Rendezvous::refuse_all(const std::string& message) {
  const Clock::time_point deadline = Clock::now() + kCourtesy;
  for (std::vector<std::unique_ptr<Connection>>* group : {&connections_, &pending_})
    for (std::unique_ptr<Connection>& c : *group)
      if (c) c->send_last(FrameType::Refuse, text_bytes(message), deadline);
  connections_.clear();
  pending_.clear();
  throw Error(message);
}

std::vector<uint8_t> Rendezvous::share_as_peer() {
  const Clock::time_point deadline = deadline_after(timeout_seconds_);
  const std::string master = fmt::format("{}:{}", env_.master_addr, env_.master_port);
  ConnectAttempt attempt;
  for (;;) {
    attempt = connect_once(env_.master_addr, env_.master_port, deadline);
    if (attempt.fd >= 0) break;
    if (attempt.unresolvable)
      fail("rank {}: MASTER_ADDR '{}' does not resolve ({}); set it to rank 0's machine, a host name or IP address "
           "(kiln train --master HOST:PORT)",
           env_.rank, env_.master_addr, attempt.error);
    if (milliseconds_left(deadline) == 0)
      fail("rank {}: could not reach rank 0 at {} within {} s (last: {}); check that rank 0 runs, that every rank has "
           "the same MASTER_ADDR and MASTER_PORT, and that the port is reachable from this machine (a firewall?)",
           env_.rank, master, timeout_seconds_, attempt.error);
    // Rank 0 may not listen yet: it is starting too.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50, milliseconds_left(deadline))));
  }
  connections_.clear();
  connections_.push_back(std::make_unique<Connection>(attempt.fd, env_.master_addr));
  Connection& rank0 = *connections_[0];
  rank0.rank = 0;

  std::vector<uint8_t> hello(std::begin(kMagic), std::end(kMagic));
  put_u32(hello, uint32_t(env_.rank));
  put_u32(hello, uint32_t(env_.ranks));
  rank0.send(FrameType::Hello, hello, deadline);  // a failure shows as the connection's end below

  // A moment past the deadline: rank 0, started at about the same time, times out at about the
  // same time, and its verdict names the missing ranks where ours could not.
  const std::optional<Frame> reply = rank0.await_frame(deadline + kCourtesy);
  if (reply && reply->type == FrameType::Blob) return reply->payload;
  const std::string why = reply && reply->type == FrameType::Refuse
                              ? bytes_text(reply->payload.data(), reply->payload.data() + reply->payload.size())
                              : "";
  rank0.close();
  if (!why.empty()) fail("rank {}: rank 0 at {} gave up: {}", env_.rank, master, why);
  if (reply)
    fail("rank {}: the program at {} is not kiln's rank 0 (unexpected reply); check MASTER_PORT", env_.rank, master);
  if (rank0.ended)
    fail("rank {}: rank 0 at {} closed the connection ({}) before sending the group's id; see rank 0's output for "
         "why it ended",
         env_.rank, master, rank0.end_reason);
  fail("rank {}: connected to rank 0 at {}, but it did not send the group's id within {} s: another rank has not "
       "joined (rank 0's error names it); check that rank 0 runs and every rank was started",
       env_.rank, master, timeout_seconds_);
}

void Rendezvous::watch(std::function<void(int lost_rank, const std::string& why)> on_lost) {
  if (!shared_ || finished_) fail("internal: Rendezvous::watch() before share() or after finish()");
  if (watcher_.joinable()) fail("internal: Rendezvous::watch() called twice");
  if (env_.ranks == 1) return;
  if (connections_.empty()) fail("internal: Rendezvous::watch() after share() failed");
  stop_watch_ = false;
  watcher_ = std::thread([this, on_lost = std::move(on_lost)] {
    const Loss loss = watch_until_lost();
    if (loss.rank < 0 || !on_lost) return;
    // The last thing this thread does, touching nothing of *this after: on_lost may end the
    // process, or destroy this Rendezvous.
    try {
      on_lost(loss.rank, loss.why);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: error: while reporting that %s: %s\n", loss.why.c_str(), e.what());
    }
  });
}

Rendezvous::Loss Rendezvous::watch_until_lost() {
  Loss loss;
  while (!stop_watch_.load()) {
    const bool over = env_.rank == 0 ? watch_rank0(loss) : watch_peer(loss);
    if (over) break;
  }
  return loss;
}

// Each look starts with what share() may already have taken in (a Lost frame right behind the
// blob, a connection already closed), then waits one tick for more.
bool Rendezvous::watch_rank0(Loss& loss) {
  for (bool waited = false;; waited = true) {
    std::vector<pollfd> fds;
    std::vector<Connection*> watched;
    for (const std::unique_ptr<Connection>& c : connections_) {
      if (!c || c->fd < 0) continue;
      if (peer_lost(*c, loss)) return true;
      if (c->fd >= 0) fds.push_back({c->fd, POLLIN, 0}), watched.push_back(c.get());
    }
    if (watched.empty()) return true;  // every other rank said Goodbye
    if (waited || poll_for(fds.data(), fds.size(), kWatchTickMs) <= 0) return false;
    for (size_t i = 0; i < watched.size(); ++i)
      if (fds[i].revents != 0) watched[i]->receive();
  }
}

// Rank 0: whether the peer at `c` has ended without a Goodbye (then `loss` says so, and the
// other ranks are told). A Goodbye closes the connection: nothing more to watch there.
bool Rendezvous::peer_lost(Connection& c, Loss& loss) {
  while (std::optional<Frame> frame = c.next_frame())
    if (frame->type == FrameType::Goodbye) c.said_goodbye = true;
  if (c.said_goodbye) {
    c.close();
    return false;
  }
  if (!c.ended) return false;
  loss = {c.rank, fmt::format("rank {} ended unexpectedly ({})", c.rank, c.end_reason)};
  c.close();
  // Tell the others first: their own connection to rank 0 is fine, and they would otherwise only
  // learn of it when a collective hangs, naming no one.
  std::vector<uint8_t> lost;
  lost.reserve(4 + loss.why.size());
  put_u32(lost, uint32_t(loss.rank));
  lost.insert(lost.end(), loss.why.begin(), loss.why.end());
  const Clock::time_point deadline = Clock::now() + kCourtesy;
  for (const std::unique_ptr<Connection>& other : connections_)
    if (other && other->fd >= 0) other->send(FrameType::Lost, lost, deadline);
  return true;
}

bool Rendezvous::watch_peer(Loss& loss) {
  Connection& rank0 = *connections_[0];
  for (bool waited = false;; waited = true) {
    if (rank0.fd < 0) return true;
    while (std::optional<Frame> frame = rank0.next_frame()) {
      if (frame->type == FrameType::Goodbye) {
        rank0.said_goodbye = true;
        rank0.close();
        return true;
      }
      if (frame->type == FrameType::Lost && frame->payload.size() >= 4) {
        const uint8_t* p = frame->payload.data();
        loss = {int(get_u32(p)), bytes_text(p + 4, p + frame->payload.size())};
        return true;
      }
    }
    if (rank0.ended) {
      loss = {0, fmt::format("rank 0 ended unexpectedly ({})", rank0.end_reason)};
      rank0.close();
      return true;
    }
    pollfd p{rank0.fd, POLLIN, 0};
    if (waited || poll_for(&p, 1, kWatchTickMs) <= 0) return false;
    rank0.receive();
  }
}

void Rendezvous::finish() { end(true); }

void Rendezvous::abandon() { end(false); }

void Rendezvous::end(bool goodbye) {
  if (finished_) return;
  finished_ = true;
  stop_watch_ = true;
  if (watcher_.joinable()) {
    // From within on_lost the watch thread cannot wait for itself; it touches nothing after.
    if (watcher_.get_id() == std::this_thread::get_id()) watcher_.detach();
    else watcher_.join();
  }
  const Clock::time_point deadline = Clock::now() + kCourtesy;
  if (goodbye)
    for (const std::unique_ptr<Connection>& c : connections_)
      if (c) c->send_last(FrameType::Goodbye, {}, deadline);
  connections_.clear();
  pending_.clear();
  if (listener_ >= 0) ::close(listener_);
  listener_ = -1;
}

}  // namespace kiln::dist
