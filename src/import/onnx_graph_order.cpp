#include "import/onnx_graph_order.h"

#include <fmt/format.h>

#include <functional>
#include <queue>
#include <set>

#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

// A dozen lines of a list at most, then how many more.
std::string listed(const std::vector<std::string>& lines) {
  std::string text;
  for (size_t i = 0; i < lines.size() && i < 12; ++i) text += "\n  " + lines[i];
  if (lines.size() > 12) text += fmt::format("\n  ... and {} more", lines.size() - 12);
  return text;
}

}  // namespace

std::vector<std::string> data_inputs(const OnnxModel& model) {
  std::set<std::string> initializers;
  for (const OnnxTensor& t : model.initializers) initializers.insert(t.name);
  std::vector<std::string> names;
  for (const OnnxValueInfo& v : model.inputs)
    if (!initializers.count(v.name)) names.push_back(v.name);
  return names;
}

GraphOrder order_graph(const OnnxModel& model, const std::vector<std::string>& outputs) {
  const std::string& path = model.path;
  GraphOrder order;
  std::set<std::string> given;  // initializers and graph inputs
  for (const OnnxTensor& t : model.initializers)
    if (!given.insert(t.name).second)
      fail("'{}': two initializers are named '{}': the file is damaged; export the model again", path, t.name);
  for (const OnnxValueInfo& v : model.inputs) given.insert(v.name);
  for (size_t i = 0; i < model.nodes.size(); ++i) {
    for (const std::string& out : model.nodes[i].outputs) {
      if (out.empty()) continue;  // an optional output left out
      if (given.count(out))
        fail("'{}': {} writes '{}', which is also an initializer or graph input: the graph is malformed; export the "
             "model again", path, node_label(model.nodes[i]), out);
      const auto [it, fresh] = order.producer.emplace(out, int(i));
      if (!fresh)
        fail("'{}': '{}' is written by two nodes, {} and {}: the graph is malformed; export the model again", path, out,
             node_label(model.nodes[size_t(it->second)]), node_label(model.nodes[i]));
    }
  }

  // The nodes the outputs depend on.
  std::vector<bool> live(model.nodes.size(), false);
  std::vector<int> stack;
  std::vector<std::string> missing;
  for (const std::string& out : outputs) {
    const auto it = order.producer.find(out);
    if (it != order.producer.end()) stack.push_back(it->second);
    else if (!given.count(out))
      fail("'{}': the graph's output '{}' is computed by no node: the file is truncated or damaged; export the model "
           "again", path, out);
  }
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (live[size_t(n)]) continue;
    live[size_t(n)] = true;
    for (const std::string& in : model.nodes[size_t(n)].inputs) {
      if (in.empty()) continue;
      const auto it = order.producer.find(in);
      if (it != order.producer.end()) stack.push_back(it->second);
      else if (!given.count(in))
        missing.push_back(fmt::format("{} reads '{}'", node_label(model.nodes[size_t(n)]), in));
    }
  }
  if (!missing.empty())
    fail("'{}' is incomplete: {} value{} read by its nodes {} provided by no node, initializer or graph input (a "
         "missing initializer: the file was truncated or damaged, or exported without its weights; export it again "
         "with export_params=True):{}",
         path, missing.size(), missing.size() == 1 ? "" : "s", missing.size() == 1 ? "is" : "are", listed(missing));

  // Kahn's order over the live nodes, the earliest in the file first among those ready.
  std::vector<int> waiting(model.nodes.size(), 0);
  std::vector<std::vector<int>> readers(model.nodes.size());
  for (size_t i = 0; i < model.nodes.size(); ++i) {
    if (!live[i]) continue;
    std::set<int> from;  // a node reading one value twice waits for it once
    for (const std::string& in : model.nodes[i].inputs) {
      const auto it = in.empty() ? order.producer.end() : order.producer.find(in);
      if (it != order.producer.end()) from.insert(it->second);
    }
    waiting[i] = int(from.size());
    for (int p : from) readers[size_t(p)].push_back(int(i));
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t i = 0; i < model.nodes.size(); ++i)
    if (live[i] && waiting[i] == 0) ready.push(int(i));
  while (!ready.empty()) {
    const int n = ready.top();
    ready.pop();
    order.nodes.push_back(n);
    for (int r : readers[size_t(n)])
      if (--waiting[size_t(r)] == 0) ready.push(r);
  }
  size_t live_count = 0;
  std::vector<std::string> cycle;
  for (size_t i = 0; i < model.nodes.size(); ++i) {
    live_count += live[i];
    if (live[i] && waiting[i] > 0) cycle.push_back(node_label(model.nodes[i]));
  }
  if (order.nodes.size() != live_count)
    fail("'{}': its graph has a cycle: these {} nodes lie on it or after it, each waiting on another's output, so "
         "none can run first (a damaged or hand-edited file: ONNX graphs are acyclic):{}",
         path, cycle.size(), listed(cycle));
  return order;
}

}  // namespace kiln::onnx_import
