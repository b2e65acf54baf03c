#include "ir/op_streams.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "kiln/error.h"

namespace kiln {
namespace {

using Span = std::pair<size_t, size_t>;  // [begin, end) in the arena

struct Access {
  std::vector<Span> reads, writes;
};

std::vector<Span> spans(const Program& p, const std::vector<int>& ids) {
  std::vector<Span> out;
  for (int id : ids) {
    if (id < 0) continue;  // an absent optional tensor
    const size_t bytes = p.tensors[size_t(id)].bytes(), at = p.memory.offset[size_t(id)];
    if (bytes > 0) out.push_back({at, at + bytes});
  }
  return out;
}

bool overlap(const std::vector<Span>& a, const std::vector<Span>& b) {
  for (const Span& x : a)
    for (const Span& y : b)
      if (x.first < y.second && y.first < x.second) return true;
  return false;
}

// Whether a later op must wait for an earlier one: they share bytes and one of them writes them.
bool depends(const Access& earlier, const Access& later) {
  return overlap(earlier.writes, later.reads) || overlap(earlier.writes, later.writes) ||
         overlap(earlier.reads, later.writes);
}

std::vector<Access> accesses(const Program& p, const std::vector<Op>& ops) {
  std::vector<Access> out;
  out.reserve(ops.size());
  for (const Op& op : ops) out.push_back({spans(p, op.in), spans(p, op.out)});
  return out;
}

// A set of earlier ops for each op of a list, one bit per op.
class OpSets {
 public:
  explicit OpSets(size_t n) : words_((n + 63) / 64), bits_(n * words_, 0) {}
  bool has(size_t i, size_t j) const { return (bits_[i * words_ + j / 64] >> (j % 64)) & 1u; }
  // Adds op j and every op in j's set to i's.
  void add_with_set(size_t i, size_t j) {
    bits_[i * words_ + j / 64] |= uint64_t{1} << (j % 64);
    for (size_t w = 0; w < words_; ++w) bits_[i * words_ + w] |= bits_[j * words_ + w];
  }

 private:
  size_t words_;
  std::vector<uint64_t> bits_;
};

void assign(const Program& p, std::vector<Op>& ops, bool branch) {
  for (Op& op : ops) op.stream = 0, op.wait_back = 0, op.signals = false;
  if (!branch) return;
  const std::vector<Access> access = accesses(p, ops);
  const size_t n = ops.size();
  OpSets ancestors(n);  // the ops each op depends on, directly or through others
  int last[2] = {-1, -1};       // the last op placed on each stream
  int waited[2] = {-1, -1};     // the latest op of the other stream each stream has waited for
  for (size_t i = 0; i < n; ++i) {
    std::vector<int> direct;
    for (size_t j = 0; j < i; ++j)
      if (depends(access[j], access[i])) ancestors.add_with_set(i, j), direct.push_back(int(j));
    auto follows = [&](int s) { return last[s] < 0 || ancestors.has(i, size_t(last[s])); };
    const int s = follows(0) ? 0 : follows(1) ? 1 : 0;
    Op& op = ops[i];
    op.stream = s;
    // Ops on one stream run in order, so waiting for the latest op depended on on the other
    // stream covers every earlier one there; a wait this stream already made covers it too.
    int wait = -1;
    for (int j : direct)
      if (ops[size_t(j)].stream != s) wait = std::max(wait, j);
    if (wait > waited[s]) {
      op.wait_back = int(i) - wait;
      ops[size_t(wait)].signals = true;
      waited[s] = wait;
    }
    last[s] = int(i);
  }
}

}  // namespace

void assign_op_streams(Program& program, bool branch) {
  for (std::vector<Op>* ops : {&program.refresh_copies, &program.forward, &program.backward, &program.update,
                               &program.inference}) {
    assign(program, *ops, branch);
    // A self-check where there is anything to check: on one stream every list runs in order.
    if (!branch) continue;
    if (const std::string pair = unordered_op_pair(program, *ops); !pair.empty())
      fail("internal: the ops' streams do not keep their order: {}", pair);
  }
}

std::string unordered_op_pair(const Program& program, const std::vector<Op>& ops) {
  const std::vector<Access> access = accesses(program, ops);
  const size_t n = ops.size();
  OpSets before(n);  // the ops the GPU finishes before each op starts
  int last[2] = {-1, -1};
  for (size_t i = 0; i < n; ++i) {
    const Op& op = ops[i];
    if (op.stream < 0 || op.stream > 1) return fmt::format("op {} ({}) is on stream {}", i, op_kind_name(op.kind), op.stream);
    if (last[op.stream] >= 0) before.add_with_set(i, size_t(last[op.stream]));
    if (op.wait_back > 0) {
      if (op.wait_back > int(i)) return fmt::format("op {} waits for an op before its list", i);
      const size_t w = i - size_t(op.wait_back);
      if (!ops[w].signals) return fmt::format("op {} waits for op {}, which records no end", i, w);
      before.add_with_set(i, w);
    }
    last[op.stream] = int(i);
    for (size_t j = 0; j < i; ++j)
      if (depends(access[j], access[i]) && !before.has(i, j))
        return fmt::format("op {} ({}, stream {}) may run before op {} ({}, stream {}), whose bytes it shares", i,
                           op_kind_name(op.kind), op.stream, j, op_kind_name(ops[j].kind), ops[j].stream);
  }
  return "";
}

int branch_stream_ops(const std::vector<Op>& ops) {
  int count = 0;
  for (const Op& op : ops) count += op.stream == 1;
  return count;
}

}  // namespace kiln
