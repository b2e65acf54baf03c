// The kiln command line: main() around the app of tools/cli/kiln_app.h, which holds the
// subcommands (plan, train, bench, data-bench, eval, pack) in tools/cli/.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "cli/kiln_app.h"
#include "kiln/error.h"
#include "kiln/threads.h"

int main(int argc, char** argv) {
  // Into a file or a pipe stdio would buffer whole blocks: a log stays empty for minutes and a
  // killed run loses it all. One line at a time instead (fmt::print writes through stdio); a
  // terminal is line-buffered already.
  if (isatty(fileno(stdout)) == 0) std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int threads = 1;
  try {
    threads = kiln::threads();  // KILN_THREADS or the cores available, shown by --help
  } catch (const kiln::Error& e) {
    fmt::print(stderr, "kiln: error: {}\n", e.what());
    return 2;
  }
  kiln::cli::KilnApp kiln(threads);
  try {
    kiln.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return kiln.app.exit(e);
  }
  return kiln.run();
}
