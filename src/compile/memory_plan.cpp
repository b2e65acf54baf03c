#include "kiln/memory_plan.h"
#include "kiln/program.h"

#include <algorithm>

#include "kiln/error.h"

namespace kiln {
namespace {

size_t align_up(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

int root_of(const Program& p, int id) {
  while (p.tensors[id].alias_of >= 0) id = p.tensors[id].alias_of;
  return id;
}

size_t offset_in_root(const Program& p, int id) {
  size_t off = 0;
  while (p.tensors[id].alias_of >= 0) {
    off += p.tensors[id].alias_offset;
    id = p.tensors[id].alias_of;
  }
  return off;
}

bool is_persistent(TensorRole role) { return role != TensorRole::Activation; }

// The role each storage root plays in the step: its own, unless it is an activation that a view
// with a persistent role reads, when it is that view's. The trainer reads Program::logits after
// the step, and the logits may be a view: a model whose head ends in a 1x1 convolution and a
// flatten (timm's resnetv2 and others, use_conv heads) has the flatten's view of the
// convolution's output as its logits. Planned by the root's own role, that output was an
// activation whose bytes the backward pass reused, so the logits read after run_backward held
// the loss gradient's (and others') values.
std::vector<TensorRole> storage_roles(const Program& p) {
  std::vector<TensorRole> role(p.tensors.size());
  for (size_t i = 0; i < p.tensors.size(); ++i) role[i] = p.tensors[i].role;
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    if (p.tensors[i].alias_of < 0 || !is_persistent(p.tensors[i].role)) continue;
    const int root = root_of(p, int(i));
    if (!is_persistent(role[size_t(root)])) role[size_t(root)] = p.tensors[i].role;
  }
  return role;
}

std::vector<Lifetime> lifetimes(const Program& p, const std::vector<TensorRole>& storage_role) {
  std::vector<Lifetime> life(p.tensors.size());
  int position = 0;
  auto touch = [&](int id) {
    if (id < 0) return;
    Lifetime& l = life[root_of(p, id)];
    if (l.first < 0) l.first = position;
    l.first = std::min(l.first, position);
    l.last = std::max(l.last, position);
  };
  // An op may leave side-stream work running through the next op of its list
  // (Op::side_work_outlives, placed on the GPU only), so its tensors stay live there too.
  for (const auto* list : {&p.forward, &p.backward, &p.update, &p.inference}) {
    const Op* previous = nullptr;
    for (const Op& op : *list) {
      if (previous && previous->side_work_outlives) {
        for (int id : previous->in) touch(id);
        for (int id : previous->out) touch(id);
      }
      for (int id : op.in) touch(id);
      for (int id : op.out) touch(id);
      previous = &op;
      ++position;
    }
  }
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    if (is_persistent(storage_role[i]) && p.tensors[i].alias_of < 0) {
      life[i].persistent = true;
      life[i].first = 0;
      life[i].last = std::max(position - 1, 0);
    }
  }
  return life;
}

bool overlap(const Lifetime& a, const Lifetime& b) { return a.first <= b.last && b.first <= a.last; }

}  // namespace

MemoryPlan plan_memory(const Program& p) {
  MemoryPlan plan;
  const size_t n = p.tensors.size();
  plan.offset.assign(n, 0);
  const std::vector<TensorRole> storage_role = storage_roles(p);
  plan.lifetime = lifetimes(p, storage_role);

  // Persistent storage, one contiguous block per role in this order.
  size_t cursor = 0;
  const std::pair<TensorRole, size_t*> groups[] = {
      {TensorRole::Input, &plan.io_bytes},       {TensorRole::Label, &plan.io_bytes},
      {TensorRole::Output, &plan.io_bytes},      {TensorRole::Param, &plan.param_bytes},
      {TensorRole::Grad, &plan.grad_bytes},      {TensorRole::OptState, &plan.opt_state_bytes},
      {TensorRole::Buffer, &plan.buffer_bytes},  {TensorRole::ComputeParam, &plan.param_bytes},
      {TensorRole::ComputeGrad, &plan.grad_bytes}, {TensorRole::OutputGrad, &plan.io_bytes}};
  for (const auto& [role, total] : groups) {
    for (size_t i = 0; i < n; ++i) {
      const TensorSpec& t = p.tensors[i];
      if (storage_role[i] != role || t.alias_of >= 0) continue;
      plan.offset[i] = cursor;
      const size_t size = align_up(t.bytes());
      cursor += size;
      *total += size;
    }
  }
  plan.persistent_bytes = cursor;

  // Activations: largest first, each at the lowest offset that no lifetime-overlapping
  // tensor already occupies.
  std::vector<int> order;
  for (size_t i = 0; i < n; ++i)
    if (!plan.lifetime[i].persistent && p.tensors[i].alias_of < 0 && plan.lifetime[i].first >= 0)
      order.push_back(int(i));
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return p.tensors[a].bytes() > p.tensors[b].bytes(); });
  struct Placed {
    size_t begin, end;
    Lifetime life;
  };
  std::vector<Placed> placed;
  size_t pool_end = 0;
  for (int id : order) {
    const size_t size = align_up(p.tensors[id].bytes());
    plan.activation_sum_bytes += size;
    std::vector<std::pair<size_t, size_t>> busy;
    for (const Placed& q : placed)
      if (overlap(q.life, plan.lifetime[id])) busy.push_back({q.begin, q.end});
    std::sort(busy.begin(), busy.end());
    size_t candidate = 0;
    for (const auto& [b, e] : busy) {
      if (candidate + size <= b) break;
      candidate = std::max(candidate, e);
    }
    placed.push_back({candidate, candidate + size, plan.lifetime[id]});
    plan.offset[id] = cursor + candidate;
    pool_end = std::max(pool_end, candidate + size);
  }
  plan.activation_bytes = pool_end;
  plan.arena_bytes = cursor + pool_end;

  // Views resolve to their root's place.
  for (size_t i = 0; i < n; ++i) {
    if (p.tensors[i].alias_of < 0) continue;
    const int root = root_of(p, int(i));
    plan.offset[i] = plan.offset[root] + offset_in_root(p, int(i));
    plan.lifetime[i] = plan.lifetime[root];
  }
  return plan;
}

void verify_memory_plan(const Program& p, const MemoryPlan& plan) {
  if (plan.offset.size() != p.tensors.size() || plan.lifetime.size() != p.tensors.size())
    fail("memory plan: it covers {} of the program's {} tensors; plan it again (plan_memory)", plan.offset.size(),
         p.tensors.size());
  // What the caller reads or writes outside the step (a view's storage included) keeps its bytes
  // through the whole step.
  for (size_t i = 0; i < p.tensors.size(); ++i)
    if (is_persistent(p.tensors[i].role) && !plan.lifetime[i].persistent)
      fail("memory plan: '{}' is read or written outside the step, but its storage '{}' is reused within it",
           p.tensors[i].name, p.tensors[size_t(root_of(p, int(i)))].name);
  std::vector<int> roots;
  for (size_t i = 0; i < p.tensors.size(); ++i)
    if (p.tensors[i].alias_of < 0 && plan.lifetime[i].first >= 0) roots.push_back(int(i));
  for (size_t a = 0; a < roots.size(); ++a) {
    const int i = roots[a];
    const size_t bi = plan.offset[i], ei = bi + p.tensors[i].bytes();
    if (bi % kAlignment) fail("memory plan: tensor '{}' at offset {} is not {}-byte aligned", p.tensors[i].name, bi, kAlignment);
    if (ei > plan.arena_bytes) fail("memory plan: tensor '{}' ends past the arena", p.tensors[i].name);
    for (size_t b = a + 1; b < roots.size(); ++b) {
      const int j = roots[b];
      const size_t bj = plan.offset[j], ej = bj + p.tensors[j].bytes();
      if (bi < ej && bj < ei && overlap(plan.lifetime[i], plan.lifetime[j]))
        fail("memory plan: live tensors '{}' and '{}' share bytes", p.tensors[i].name, p.tensors[j].name);
    }
  }
}

}  // namespace kiln
