// The launcher's parts: the checks of its options, starting one process per GPU (fork + exec,
// the child's side restricted to async-signal-safe calls) and supervising them until all end.
#include "dist/launch_ranks.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <optional>
#include <set>
#include <string_view>

#include "kiln/error.h"

extern char** environ;

namespace kiln::dist {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMostGpus = 1024;  // a count above this is a typo, not a machine

std::string_view trimmed(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

// Digits only (no sign, no spaces), within int.
std::optional<int> whole_number(std::string_view text) {
  int value = 0;
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

constexpr const char* kGpusExample = "give a count (--gpus 2: GPUs 0 and 1) or ordinals (--gpus 0,2)";

int gpu_ordinal(std::string_view item, const std::string& text) {
  if (item.empty()) fail("--gpus '{}' has an empty entry; {}", text, kGpusExample);
  if (item[0] == '-')
    fail("--gpus '{}': GPU '{}' is negative; CUDA ordinals count from 0; {}", text, item, kGpusExample);
  const std::optional<int> ordinal = whole_number(item);
  if (!ordinal) fail("--gpus '{}': '{}' is not a GPU ordinal; {}", text, item, kGpusExample);
  return *ordinal;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    default: return nullptr;
  }
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  const char* name = signal_name(sig);
  return name ? fmt::format("signal {}", name) : fmt::format("signal {}", sig);
}

int exit_code_of(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// ---- The signals the launcher takes while its ranks run ----

// What a handler writes to the launcher's pipe (the self-pipe trick: a handler may do nothing but
// async-signal-safe calls such as write(); a write this small is atomic).
struct SignalRecord {
  int sig;
  pid_t sender;  // for SIGCHLD, the rank that ended
};

std::atomic<int> wake_pipe_write{-1};

void record_signal(int sig, siginfo_t* info, void*) {
  const int saved = errno;
  const SignalRecord record{sig, info ? info->si_pid : 0};
  [[maybe_unused]] const ssize_t ignored = ::write(wake_pipe_write.load(), &record, sizeof record);
  errno = saved;
}

// SIGINT and SIGTERM (to pass on; one ignored when the launcher started, as `nohup` leaves it,
// stays ignored) and SIGCHLD (a rank ended: wake at once), for one launch; the old actions come
// back at the end. SIGCHLD's sender tells which rank ended first when several end together: a
// pending SIGCHLD keeps the first sender, and the others are found by waitpid() after it.
class LauncherSignals {
 public:
  LauncherSignals() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
      fail("kiln's launcher cannot create a pipe: {}; too many open files?", std::strerror(errno));
    read_ = fds[0], write_ = fds[1];
    int expected = -1;
    if (!wake_pipe_write.compare_exchange_strong(expected, write_)) {
      ::close(read_), ::close(write_);
      fail("internal: two launches of ranks at once in one process");
    }
    sigemptyset(&set_);
    for (size_t i = 0; i < std::size(kSignals); ++i) {
      struct sigaction action {};
      action.sa_sigaction = record_signal;
      action.sa_flags = SA_SIGINFO | SA_RESTART | (kSignals[i] == SIGCHLD ? SA_NOCLDSTOP : 0);
      sigemptyset(&action.sa_mask);
      ::sigaction(kSignals[i], nullptr, &old_[i]);
      if (kSignals[i] != SIGCHLD && old_[i].sa_handler == SIG_IGN) continue;
      ::sigaction(kSignals[i], &action, nullptr);
      installed_[i] = true;
      sigaddset(&set_, kSignals[i]);
    }
  }
  ~LauncherSignals() {
    for (size_t i = 0; i < std::size(kSignals); ++i)
      if (installed_[i]) ::sigaction(kSignals[i], &old_[i], nullptr);
    wake_pipe_write = -1;
    ::close(read_), ::close(write_);
  }
  LauncherSignals(const LauncherSignals&) = delete;
  LauncherSignals& operator=(const LauncherSignals&) = delete;

  int wake_fd() const { return read_; }
  // The signals whose handlers this installed: blocked around fork(), reset in the child.
  const sigset_t& handled() const { return set_; }

  // The signals received since the last call, in order. (Every read takes whole records: each
  // write is one, and the buffer holds a whole number of them.)
  std::vector<SignalRecord> take() {
    std::vector<SignalRecord> received;
    SignalRecord records[64];
    ssize_t n;
    while ((n = ::read(read_, records, sizeof records)) > 0)
      received.insert(received.end(), records, records + size_t(n) / sizeof(SignalRecord));
    return received;
  }

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGCHLD};
  int read_ = -1, write_ = -1;
  struct sigaction old_[3] {};
  bool installed_[3] = {};
  sigset_t set_;
};

// ---- Starting a rank ----

struct RankProcess {
  int rank = 0, local_rank = 0, gpu = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Clock::time_point ended;
  bool stopped = false;  // sent SIGTERM by the launcher after another rank failed
  bool killed = false;   // sent SIGKILL after the grace
};

// Signals the rank's whole process group: a shell or wrapper rank takes its children along.
void signal_rank(const RankProcess& r, int sig) {
  if (r.running) ::kill(-r.pid, sig);
}

// The launcher's environment with the rank's variables set (replacing any there).
std::vector<std::string> rank_environment(const LaunchSpec& spec, int local_rank, int port) {
  const int local_ranks = int(spec.gpus.size());
  const std::vector<std::pair<std::string, std::string>> set = {
      {"RANK", std::to_string(spec.node_rank * local_ranks + local_rank)},
      {"WORLD_SIZE", std::to_string(spec.nodes * local_ranks)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(local_ranks)},
      {"MASTER_ADDR", spec.master_addr},
      {"MASTER_PORT", std::to_string(port)},
      {"KILN_RANK_DEVICE", std::to_string(spec.gpus[size_t(local_rank)])},
  };
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry = *e;
    const std::string_view name = entry.substr(0, entry.find('='));
    if (std::none_of(set.begin(), set.end(), [&](const auto& v) { return v.first == name; }))
      env.emplace_back(entry);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  // NVLink multicast (NVLS) reserves GPU memory and fabric state that other users' jobs on a shared
  // machine can trip over; a user who wants it sets the variable.
  if (std::getenv("NCCL_NVLS_ENABLE") == nullptr) env.emplace_back("NCCL_NVLS_ENABLE=0");
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Forks and execs one rank; the errno of a failed exec comes back through a close-on-exec pipe
// (end of file there means the exec succeeded). -1 and `exec_error` set when it could not start.
pid_t start_rank(std::vector<std::string> command, std::vector<std::string> environment,
                 const LauncherSignals& signals, int& exec_error) {
  std::vector<char*> argv = c_strings(command), envp = c_strings(environment);
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    exec_error = errno;
    return -1;
  }
  const pid_t launcher = ::getpid();
  // The handlers must not run in the child before it resets them (they write to the launcher's pipe).
  sigset_t old_mask;
  ::pthread_sigmask(SIG_BLOCK, &signals.handled(), &old_mask);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(report[0]);
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != launcher) ::_exit(128 + SIGTERM);  // the launcher died before prctl
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig)
      if (sigismember(&signals.handled(), sig) == 1) ::sigaction(sig, &default_action, nullptr);
    ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    ::execvpe(argv[0], argv.data(), envp.data());
    const int error = errno;
    [[maybe_unused]] const ssize_t ignored = ::write(report[1], &error, sizeof error);
    ::_exit(127);
  }
  const int fork_error = errno;
  if (pid > 0) ::setpgid(pid, pid);  // also here: the group must exist before the first kill(-pid)
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  ::close(report[1]);
  if (pid < 0) {
    ::close(report[0]);
    exec_error = fork_error;
    return -1;
  }
  int error = 0;
  ssize_t n;
  while ((n = ::read(report[0], &error, sizeof error)) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  if (n == ssize_t(sizeof error)) {
    ::waitpid(pid, nullptr, 0);
    exec_error = error;
    return -1;
  }
  return pid;
}

// ---- Supervising the ranks ----

class Supervisor {
 public:
  Supervisor(std::vector<RankProcess>& ranks, LauncherSignals& signals, double grace_seconds)
      : ranks_(ranks), signals_(signals), grace_(grace_seconds) {}

  // Until every rank has ended.
  void wait_all() {
    for (;;) {
      for (const SignalRecord& s : signals_.take()) {
        if (s.sig == SIGCHLD) {
          for (RankProcess& r : ranks_)
            if (r.pid == s.sender) reap(r);
        } else {
          if (forwarded_ == 0) forwarded_ = s.sig;
          for (const RankProcess& r : ranks_) signal_rank(r, s.sig);
        }
      }
      for (RankProcess& r : ranks_) reap(r);  // those whose SIGCHLD merged into another's
      if (std::none_of(ranks_.begin(), ranks_.end(), [](const RankProcess& r) { return r.running; })) return;
      int wait_ms = 100;  // a safety net: SIGCHLD normally wakes the loop
      if (kill_at_) {
        if (Clock::now() >= *kill_at_) {
          for (RankProcess& r : ranks_)
            if (r.running) signal_rank(r, SIGKILL), r.killed = true;
          kill_at_.reset();
        } else {
          wait_ms = std::clamp(int(std::chrono::duration_cast<std::chrono::milliseconds>(*kill_at_ - Clock::now())
                                       .count()) + 1, 1, wait_ms);
        }
      }
      pollfd p{signals_.wake_fd(), POLLIN, 0};
      ::poll(&p, 1, wait_ms);
    }
  }

  // Stops every rank still running: SIGTERM, SIGKILL after the grace (a failed start).
  void stop_all() {
    for (RankProcess& r : ranks_)
      if (r.running) signal_rank(r, SIGTERM), r.stopped = true;
    kill_at_ = Clock::now() + grace();
    wait_all();
  }

  LaunchResult result() const {
    if (first_failure_) return {exit_code_of(first_failure_->status), failure_report()};
    if (forwarded_ != 0) return forwarded_report();
    return {0, fmt::format("all {} rank(s) exited 0", ranks_.size())};
  }

 private:
  Clock::duration grace() const {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_));
  }

  // Takes the rank's status if it has ended; the first to fail stops the others.
  void reap(RankProcess& r) {
    if (!r.running) return;
    int status = 0;
    const pid_t done = ::waitpid(r.pid, &status, WNOHANG);
    if (done == 0 || (done < 0 && errno == EINTR)) return;
    // done < 0 (ECHILD): another part of this process reaped it; counted as a failure.
    r.running = false, r.status = done > 0 ? status : 255 << 8, r.ended = Clock::now();
    const bool failed = !WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0;
    // After a stop signal the ranks end as they choose: their exits fail nothing.
    if (failed && !first_failure_ && forwarded_ == 0) {
      first_failure_ = &r;
      for (RankProcess& other : ranks_)
        if (other.running) signal_rank(other, SIGTERM), other.stopped = true;
      kill_at_ = r.ended + grace();
    }
  }

  std::string failure_report() const {
    const RankProcess& first = *first_failure_;
    std::string text = fmt::format("rank {} (GPU {}) failed first: {}", first.rank, first.gpu,
                                   describe_status(first.status));
    std::vector<std::string> others;
    double slowest = 0;
    for (const RankProcess& r : ranks_) {
      if (!r.stopped) continue;
      slowest = std::max(slowest, seconds_between(first.ended, r.ended));
      others.push_back(fmt::format("rank {} {}{}", r.rank, describe_status(r.status),
                                   r.killed ? fmt::format(" after the {} s grace", grace_) : ""));
    }
    if (others.empty()) return text + "; no other rank of this machine was still running";
    return text + fmt::format("; the launcher sent SIGTERM to the other rank(s), which ended within {:.2f} s: {}",
                              slowest, fmt::join(others, ", "));
  }

  LaunchResult forwarded_report() const {
    int code = 0;
    Clock::time_point earliest = Clock::time_point::max();
    std::vector<std::string> ends;
    for (const RankProcess& r : ranks_) {
      ends.push_back(fmt::format("rank {} {}", r.rank, describe_status(r.status)));
      if (exit_code_of(r.status) != 0 && r.ended < earliest) code = exit_code_of(r.status), earliest = r.ended;
    }
    return {code, fmt::format("{} was passed on to every rank; they ended: {}", signal_name(forwarded_),
                              fmt::join(ends, ", "))};
  }

  std::vector<RankProcess>& ranks_;
  LauncherSignals& signals_;
  double grace_;
  const RankProcess* first_failure_ = nullptr;
  std::optional<Clock::time_point> kill_at_;
  int forwarded_ = 0;  // the first stop signal passed on to the ranks
};

}  // namespace

std::vector<int> parse_gpu_list(const std::string& text) {
  const std::string_view list = trimmed(text);
  if (list.empty()) fail("--gpus is empty; {}", kGpusExample);
  std::vector<int> gpus;
  if (list.find(',') == std::string_view::npos) {
    const int count = gpu_ordinal(list, text);
    if (count == 0)
      fail("--gpus '{}' asks for no GPU: a single number is a count; {}, or leave out --gpus to train on one GPU",
           text, kGpusExample);
    if (count > kMostGpus) fail("--gpus '{}' asks for more GPUs than a machine has (at most {}); {}", text, kMostGpus,
                                kGpusExample);
    for (int i = 0; i < count; ++i) gpus.push_back(i);
    return gpus;
  }
  std::set<int> seen;
  for (size_t begin = 0; begin <= list.size();) {
    const size_t comma = std::min(list.find(',', begin), list.size());
    const int ordinal = gpu_ordinal(trimmed(list.substr(begin, comma - begin)), text);
    if (!seen.insert(ordinal).second)
      fail("--gpus '{}' names GPU {} twice; list each GPU once, e.g. --gpus 0,1", text, ordinal);
    gpus.push_back(ordinal);
    begin = comma + 1;
  }
  return gpus;
}

std::pair<std::string, int> parse_master(const std::string& text) {
  constexpr const char* example = "e.g. --master 10.0.0.1:29500 (rank 0's machine and a free port there)";
  const std::string_view master = trimmed(text);
  if (master.empty()) fail("--master is empty; give HOST:PORT, {}", example);
  std::string_view host, port;
  if (master.front() == '[') {  // [IPv6]:PORT
    const size_t close = master.find(']');
    if (close == std::string_view::npos || close + 1 >= master.size() || master[close + 1] != ':')
      fail("--master '{}' is not [IPv6-ADDRESS]:PORT; {}", text, example);
    host = master.substr(1, close - 1), port = master.substr(close + 2);
  } else {
    const size_t colon = master.rfind(':');
    if (colon == std::string_view::npos) fail("--master '{}' has no port; give HOST:PORT, {}", text, example);
    host = master.substr(0, colon), port = master.substr(colon + 1);
    if (host.find(':') != std::string_view::npos)
      fail("--master '{}': write an IPv6 address in brackets, e.g. --master [fd00::1]:29500", text);
  }
  if (host.empty()) fail("--master '{}' names no host; give HOST:PORT, {}", text, example);
  const std::optional<int> number = whole_number(port);
  if (!number || *number < 1 || *number > 65535)
    fail("--master '{}': the port '{}' is not a TCP port (1 to 65535); {}", text, port, example);
  return {std::string(host), *number};
}

int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("cannot create a socket to find a free TCP port: {}", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET, addr.sin_addr.s_addr = htonl(INADDR_ANY), addr.sin_port = 0;
  socklen_t size = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &size) != 0) {
    const int error = errno;
    ::close(fd);
    fail("cannot find a free TCP port for the ranks to meet at: {}; give one with --master 127.0.0.1:PORT",
         std::strerror(error));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

void check_launch_spec(const LaunchSpec& spec) {
  if (spec.gpus.empty()) fail("--gpus names no GPU; {}", kGpusExample);
  std::set<int> seen;
  for (const int gpu : spec.gpus) {
    if (gpu < 0) fail("--gpus: GPU {} is negative; CUDA ordinals count from 0; {}", gpu, kGpusExample);
    if (!seen.insert(gpu).second) fail("--gpus names GPU {} twice; list each GPU once, e.g. --gpus 0,1", gpu);
  }
  if (spec.command.empty() || spec.command[0].empty())
    fail("internal: the ranks' command is empty, so there is nothing to run on each GPU");
  if (spec.nodes < 1) fail("--nodes {} counts no machine; use e.g. --nodes 2, or leave it out for one", spec.nodes);
  if (spec.node_rank < 0 || spec.node_rank >= spec.nodes)
    fail("--node-rank {} is outside 0 to {} (--nodes {}); give this machine's place among the machines, from 0 (the "
         "machine of --master)",
         spec.node_rank, spec.nodes - 1, spec.nodes);
  if (spec.master_port < 0 || spec.master_port > 65535)
    fail("--master port {} is not a TCP port (1 to 65535); e.g. --master 10.0.0.1:29500", spec.master_port);
  if (spec.master_addr.empty()) fail("--master names no host; e.g. --master 10.0.0.1:29500");
  if (spec.nodes > 1 && spec.master_port == 0)
    fail("--nodes {} needs --master HOST:PORT, rank 0's machine (--node-rank 0) and a free port there, the same on "
         "every machine; e.g. --master 10.0.0.1:29500",
         spec.nodes);
  if (!(spec.grace_seconds >= 0)) fail("internal: a grace of {} s to stop the ranks", spec.grace_seconds);
}

LaunchResult launch_ranks(const LaunchSpec& spec) {
  check_launch_spec(spec);
  const int port = spec.master_port != 0 ? spec.master_port : free_tcp_port();
  LauncherSignals signals;  // before the first fork: a Ctrl-C from now on reaches every rank
  std::vector<RankProcess> ranks(spec.gpus.size());
  Supervisor supervisor(ranks, signals, spec.grace_seconds);
  for (size_t i = 0; i < ranks.size(); ++i) {
    RankProcess& r = ranks[i];
    r.local_rank = int(i), r.gpu = spec.gpus[i];
    r.rank = spec.node_rank * int(ranks.size()) + int(i);
    int error = 0;
    r.pid = start_rank(spec.command, rank_environment(spec, int(i), port), signals, error);
    if (r.pid < 0) {
      supervisor.stop_all();
      fail("rank {} (GPU {}): cannot run '{}': {}; check that the program exists and is executable", r.rank, r.gpu,
           spec.command[0], std::strerror(error));
    }
    r.running = true;
  }
  supervisor.wait_all();
  return supervisor.result();
}

}  // namespace kiln::dist
