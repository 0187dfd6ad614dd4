// A one-line progress indicator on stderr, shown only when stderr is a terminal, so logs and
// pipes never receive carriage returns.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <string>

namespace shiftstack::cli {

class Progress {
 public:
  Progress() : enabled_(isatty(STDERR_FILENO) == 1) {}
  ~Progress() { clear(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Replaces the current line with `text`.
  void show(const std::string& text) {
    if (!enabled_) return;
    std::fprintf(stderr, "\r\033[K%s", text.c_str());
    std::fflush(stderr);
    shown_ = true;
  }
  // Erases the line (call before printing results).
  void clear() {
    if (!enabled_ || !shown_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    shown_ = false;
  }

 private:
  bool enabled_;
  bool shown_ = false;
};

}  // namespace shiftstack::cli
