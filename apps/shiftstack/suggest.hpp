// "Did you mean" for the command line: the first argument that names no subcommand or option,
// with the closest known name (CLI11 only says that an argument was not expected).
#pragma once
#include <CLI/CLI.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "shiftstack/spelling.hpp"

namespace shiftstack::cli {

// The closest of `known` to `word` within a few edits (scaled with the length), or "".
inline std::string closest(const std::string& word, const std::vector<std::string>& known) {
  return closest_name(word, known, std::max<std::size_t>(2, word.size() / 3) + 1);
}

inline std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& l : o->get_lnames()) names.push_back("--" + l);
    for (const auto& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

// A message naming the first unknown subcommand or option with a suggestion, or "" when every
// argument is known (then CLI11's own message is the better one).
inline std::string unknown_argument_hint(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> commands;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) commands.push_back(sub->get_name());
  const std::vector<std::string> top_options = option_names(app);
  CLI::App* command = nullptr;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() > 1 && arg[0] == '-') {
      const std::string name = arg.substr(0, arg.find('='));
      if (name.size() > 2 && name[1] != '-' && name.size() != 2) continue;  // -abc: short flags or a negative value
      std::vector<std::string> known = top_options;
      if (command) {
        const auto more = option_names(*command);
        known.insert(known.end(), more.begin(), more.end());
      }
      if (std::find(known.begin(), known.end(), name) != known.end()) continue;
      // A negative number is an option's value, not an option.
      if (name.size() > 1 && (std::isdigit(static_cast<unsigned char>(name[1])) || name[1] == '.')) continue;
      const std::string best = closest(name, known);
      return "unknown option '" + name + "'" + (command ? " for '" + command->get_name() + "'" : std::string()) +
             (best.empty() ? "" : " (did you mean '" + best + "'?)");
    }
    if (!command) {
      if (std::find(commands.begin(), commands.end(), arg) != commands.end()) {
        command = app.get_subcommand(arg);
        continue;
      }
      const std::string best = closest(arg, commands);
      std::string list;
      for (const auto& c : commands) list += (list.empty() ? "" : ", ") + c;
      return "unknown command '" + arg + "'" + (best.empty() ? "" : " (did you mean '" + best + "'?)") + "; commands: " + list;
    }
  }
  return "";
}

}  // namespace shiftstack::cli
