// The `shiftstack` command: one CLI::App with a subcommand per task (commands.hpp).
#include <iostream>

#include "commands.hpp"
#include "shiftstack/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"shiftstack: shift-and-stack searches for faint moving objects in image stacks",
               "shiftstack"};
  app.set_version_flag("--version", std::string("shiftstack ") + SHIFTSTACK_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // --help / --version work after a subcommand's options too

  shiftstack::cli::add_demo_command(app);
  shiftstack::cli::add_bench_command(app);
  shiftstack::cli::add_validate_command(app);
#ifdef SHIFTSTACK_HAVE_IO
  shiftstack::cli::add_search_commands(app);
#endif
#ifdef SHIFTSTACK_HAVE_MANY
  shiftstack::cli::add_search_many_commands(app);
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors (bad option values included) name the option; exit code 0 for --help;
    // CLI::RuntimeError(n) is a command's own exit status n (search-many: 2 = some units failed).
    return app.exit(e);
  } catch (const shiftstack::Error& e) {
    std::cerr << "shiftstack: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "shiftstack: unexpected failure: " << e.what() << "\n";
    return 3;
  }
  return 0;
}
