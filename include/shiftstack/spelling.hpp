// "Did you mean": the closest known name to a misspelt one, for config keys and the command line.
#pragma once
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace shiftstack {

// Levenshtein distance (insertions, deletions and substitutions of one character each).
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

// The first of `known` closest to `word` at fewer than `limit` edits, or "".
inline std::string closest_name(const std::string& word, const std::vector<std::string>& known, std::size_t limit) {
  std::string best;
  std::size_t best_distance = limit;
  for (const auto& k : known) {
    const std::size_t d = edit_distance(word, k);
    if (d < best_distance) {
      best_distance = d;
      best = k;
    }
  }
  return best;
}

}  // namespace shiftstack
