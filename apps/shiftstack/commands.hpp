// The CLI's subcommands; main.cpp wires them into one CLI::App. Each add_* registers its
// subcommand, options and callback; callbacks throw shiftstack::Error for bad input.
#pragma once
#include <CLI/CLI.hpp>

namespace shiftstack::cli {

void add_demo_command(CLI::App& app);      // demo.cpp
void add_bench_command(CLI::App& app);     // bench.cpp
void add_validate_command(CLI::App& app);  // validate.cpp
#ifdef SHIFTSTACK_HAVE_IO
void add_search_commands(CLI::App& app);   // search.cpp: search, dump-config
#endif
#ifdef SHIFTSTACK_HAVE_MANY
void add_search_many_commands(CLI::App& app);  // search_many.cpp: search-many (+ its worker)
#endif

}  // namespace shiftstack::cli
