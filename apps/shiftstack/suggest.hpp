// "Did you mean" for the command line: the first argument that names no subcommand or option,
// with the closest known name (CLI11 only says that an argument was not expected).
#pragma once
#include <CLI/CLI.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace shiftstack::cli {

inline std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The closest of `known` to `word` within a few edits (scaled with the length), or "".
inline std::string closest(const std::string& word, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (const auto& k : known) {
    const std::size_t d = edit_distance(word, k);
    if (d < best_distance) {
      best_distance = d;
      best = k;
    }
  }
  return best;
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
