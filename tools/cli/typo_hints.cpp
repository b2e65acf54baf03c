#include "cli/typo_hints.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace kiln::cli {
namespace {

// Edit distance with adjacent transpositions counted as one edit ("trian" is 1 from "train").
size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t w = b.size() + 1;  // one flat table: a row per character of a
  std::vector<size_t> d((a.size() + 1) * w);
  auto at = [&](size_t i, size_t j) -> size_t& { return d[i * w + j]; };
  for (size_t i = 0; i <= a.size(); ++i) at(i, 0) = i;
  for (size_t j = 0; j <= b.size(); ++j) at(0, j) = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      at(i, j) = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        at(i, j) = std::min(at(i, j), at(i - 2, j - 2) + 1);
    }
  return at(a.size(), b.size());
}

// The candidate nearest to `word`, if it is close enough to be a likely typo; else empty.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& c : candidates) {
    // The distance is at least the difference in length: a word far longer than every option name
    // (a pasted path, a stray argument) is dismissed without filling its table.
    const size_t length_gap = word.size() > c.size() ? word.size() - c.size() : c.size() - word.size();
    if (length_gap >= best_distance) continue;
    const size_t d = edit_distance(word, c);
    if (d < best_distance) best = c, best_distance = d;
  }
  return best;
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  return names;
}

// Each name of each of `app`'s own options: "--version", "-h", "--help".
std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> known;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& name : opt->get_lnames()) known.push_back("--" + name);
    for (const std::string& name : opt->get_snames()) known.push_back("-" + name);
  }
  return known;
}

// The option a mistyped `flag` most likely meant. A one-letter "-V" is too short for an edit
// distance (every one-letter option is one edit away): it is the option whose short name, or
// else whose long name's first letter, is that letter in either case (-V: --version).
std::string nearest_option(const std::string& flag, const std::vector<std::string>& known) {
  if (flag.size() != 2 || flag[0] != '-' || flag[1] == '-') return nearest(flag, known);
  const auto lower = [](char c) { return char(std::tolower(static_cast<unsigned char>(c))); };
  for (const std::string& k : known)
    if (k.size() == 2 && lower(k[1]) == lower(flag[1])) return k;
  for (const std::string& k : known)
    if (k.size() > 2 && k[1] == '-' && lower(k[2]) == lower(flag[1])) return k;
  return "";
}

}  // namespace

void check_subcommand(const CLI::App& app, int argc, const char* const* argv) {
  const std::vector<std::string> names = subcommand_names(app);
  const std::string list = fmt::format("{}", fmt::join(names, ", "));
  if (argc < 2)
    throw CLI::RequiredError(fmt::format("a subcommand is required: {} (kiln <subcommand> --help)", list),
                             CLI::ExitCodes::RequiredError);
  const std::string word = argv[1];
  if (!word.empty() && word[0] == '-') {  // kiln's own options (--help, --version) come before a subcommand
    const std::vector<std::string> known = option_names(app);
    const std::string flag = word.substr(0, word.find('='));
    if (std::find(known.begin(), known.end(), flag) != known.end()) return;
    const std::string guess = nearest_option(flag, known);
    throw CLI::ExtrasError(fmt::format("unknown option '{}'{}; kiln takes {} or a subcommand: {} (kiln <subcommand> "
                                       "--help)", flag,
                                       guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess),
                                       fmt::join(known, ", "), list),
                           CLI::ExitCodes::ExtrasError);
  }
  if (word.empty() || std::find(names.begin(), names.end(), word) != names.end()) return;
  const std::string guess = nearest(word, names);
  throw CLI::ExtrasError(fmt::format("unknown subcommand '{}'{}; the subcommands are {}", word,
                                     guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess), list),
                         CLI::ExitCodes::ExtrasError);
}

std::string unknown_options_message(const CLI::App& sub, const std::vector<std::string>& extras) {
  std::vector<std::string> known;
  for (const CLI::Option* opt : sub.get_options())
    for (const std::string& name : opt->get_lnames()) known.push_back("--" + name);
  std::string out;
  for (const std::string& word : extras) {
    if (word.rfind("--", 0) != 0) continue;
    const std::string flag = word.substr(0, word.find('='));
    const std::string guess = nearest(flag, known);
    out += fmt::format("{}unknown option '{}'{}", out.empty() ? "" : "; ", flag,
                       guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess));
  }
  if (out.empty()) return {};
  return fmt::format("{}; kiln {} --help lists the options", out, sub.get_name());
}

}  // namespace kiln::cli
