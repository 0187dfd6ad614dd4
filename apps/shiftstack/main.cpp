// The `shiftstack` command: one CLI::App with a subcommand per task (commands.hpp).
#include <iostream>

#include "commands.hpp"
#include "shiftstack/error.hpp"
#include "suggest.hpp"

namespace {
// Printed under every --help (the README has the same table).
const char* exit_codes_text =
    "Exit codes: 0 success; 1 bad input or a failed run (the message says why); 3 unexpected internal failure;\n"
    "usage errors (from the command-line parser): 104 a value of the wrong type, 105 a value not accepted\n"
    "(e.g. a file that does not exist), 106 a required argument missing, 107/108 options that need or exclude\n"
    "others, 109 an argument not expected (unknown command or option), 113 an option not found,\n"
    "114 the wrong number of values for an option.";
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shiftstack: shift-and-stack searches for faint moving objects in image stacks",
               "shiftstack"};
  app.set_version_flag("--version", std::string("shiftstack ") + SHIFTSTACK_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // --help / --version work after a subcommand's options too
  app.footer(exit_codes_text);

  shiftstack::cli::add_demo_command(app);
  shiftstack::cli::add_bench_command(app);
  shiftstack::cli::add_validate_command(app);
#ifdef SHIFTSTACK_HAVE_IO
  shiftstack::cli::add_search_commands(app);
#endif
#ifdef SHIFTSTACK_HAVE_MANY
  shiftstack::cli::add_search_many_commands(app);
#endif

  // Subcommands inherit the exit codes as their footer; those that set a footer of their own get
  // the exit codes after it.
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    if (sub->get_footer().find(exit_codes_text) == std::string::npos)
      sub->footer(sub->get_footer() + "\n\n" + exit_codes_text);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors (bad option values included) name the option; exit code 0 for --help;
    // CLI::RuntimeError(n) is a command's own exit status n (search-many: 2 = some units failed).
    // An unknown command or option gets the closest known name.
    if (e.get_exit_code() != 0) {
      const std::string hint = shiftstack::cli::unknown_argument_hint(app, argc, argv);
      if (!hint.empty()) {
        std::cerr << "shiftstack: error: " << hint << "\nRun with --help for more information.\n";
        return e.get_exit_code();
      }
    }
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
