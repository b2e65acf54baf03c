#pragma once
// The ranks' meeting point over TCP, before NCCL exists: rank 0 hands every rank a blob (NCCL's
// unique id), and the connections then stay open so that a rank which dies is noticed by the
// others at once (its socket closes) instead of leaving them waiting in a collective forever.
//
// Wire protocol (one TCP connection between rank 0 and each other rank), a sequence of frames:
//   frame   := type:u8  length:u32 big-endian  payload[length]      (payload at most 1 MiB)
//   Hello   1  peer -> 0   "kilnRDV1" rank:u32 ranks:u32   who connects (its RANK and WORLD_SIZE)
//   Blob    2  0 -> peer   the shared bytes                 once every rank has said Hello
//   Refuse  3  0 -> peer   text                             rank 0 gives up (the peer throws the text)
//   Lost    4  0 -> peer   rank:u32 text                    a rank ended unexpectedly
//   Goodbye 5  both ways   (empty)                          a planned end: not a lost rank
// A connection that ends without Goodbye means the process at the other end has gone. A
// connection whose first frame is not a Hello with the magic (a port scanner, a health check) is
// dropped and does not count.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kiln/data_parallel.h"

namespace kiln::dist {

class Rendezvous {
 public:
  // Rank 0 listens on env.master_port at once (every interface, SO_REUSEADDR), so a port already
  // taken fails here; the other ranks connect in share(). timeout_seconds counts from share().
  // ranks == 1: no sockets at all.
  Rendezvous(const RankEnv& env, double timeout_seconds);
  ~Rendezvous();  // finish()
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  // Rank 0 accepts the other ranks - 1 ranks and passes the blob (e.g. NCCL's 128-byte unique
  // id); every other rank connects to master_addr:master_port (retrying until the timeout: rank 0
  // may not listen yet) and passes {}. Returns rank 0's blob on every rank. A kiln::Error names
  // the ranks that did not come (rank 0; the others are told the same), a world size that differs
  // or a rank claimed twice, or on another rank the address it could not reach.
  std::vector<uint8_t> share(const std::vector<uint8_t>& blob);

  // After share(): the liveness watch, on a background thread. When a connection ends without a
  // Goodbye, on_lost(rank, why) is called once, on that thread; rank 0 first relays it to the
  // remaining ranks, so that every rank names the rank that died (not rank 0). The watch ends
  // there, or when every connection has said Goodbye, or at finish().
  void watch(std::function<void(int lost_rank, const std::string& why)> on_lost);

  // A planned end: stops the watch, says Goodbye on every connection and closes it, so the peers
  // do not report this rank lost. Idempotent. Like share() and watch(), called by the thread that
  // owns this object (or from within on_lost).
  void finish();
  // An unplanned end (this rank failed): stops the watch and closes the connections without
  // Goodbye, so the peers report this rank lost and stop instead of waiting in a collective.
  void abandon();

 private:
  struct Connection;
  struct Loss {
    int rank = -1;
    std::string why;
  };

  std::vector<uint8_t> share_as_rank0(const std::vector<uint8_t>& blob);
  std::vector<uint8_t> share_as_peer();
  void accept_every_rank(std::chrono::steady_clock::time_point deadline);
  void accept_waiting();
  void check_hello(const Connection& c, int ranks);
  [[noreturn]] void refuse_all(const std::string& message);
  void end(bool goodbye);
  Loss watch_until_lost();
  bool watch_rank0(Loss& loss);
  bool peer_lost(Connection& c, Loss& loss);
  bool watch_peer(Loss& loss);

  RankEnv env_;
  double timeout_seconds_;
  int listener_ = -1;
  // Rank 0: one per rank, [0] unused; another rank: [0], its connection to rank 0.
  std::vector<std::unique_ptr<Connection>> connections_;
  std::vector<std::unique_ptr<Connection>> pending_;  // rank 0: accepted, no Hello yet
  bool shared_ = false;
  bool finished_ = false;
  std::atomic<bool> stop_watch_{false};
  std::thread watcher_;
};

}  // namespace kiln::dist
