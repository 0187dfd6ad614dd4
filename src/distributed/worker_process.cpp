// The rank's worker process: `shiftstack search-many-worker`, spoken to over a socket pair (one
// JSON line per unit each way). A unit that outlives its timeout has its worker killed; a worker
// that dies (a crash, the kernel's OOM killer) is reported as such; both are replaced.
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>

#include "shiftstack/error.hpp"
#include "shiftstack/search_many.hpp"

extern char** environ;

namespace shiftstack::many {

namespace {

// The worker reads and writes its units on this descriptor.
constexpr int kWorkerFd = 3;

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "the worker exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    std::string text = "the worker was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
    if (sig == SIGKILL) text += "; the kernel's out-of-memory killer sends this";
    return text;
  }
  return "the worker stopped (status " + std::to_string(status) + ")";
}

}  // namespace

WorkerProcess::WorkerProcess(std::string executable, std::vector<std::string> environment)
    : executable_(std::move(executable)), environment_(std::move(environment)) {}

WorkerProcess::~WorkerProcess() { stop(false); }

void WorkerProcess::start() {
  int pair[2];
  require(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0,
          std::string("search-many: socketpair failed: ") + std::strerror(errno));
  // The child's end must not already sit at kWorkerFd (dup2 onto itself would keep CLOEXEC).
  if (pair[1] == kWorkerFd) {
    const int moved = ::fcntl(pair[1], F_DUPFD_CLOEXEC, kWorkerFd + 1);
    ::close(pair[1]);
    pair[1] = moved;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pair[1], kWorkerFd);

  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const std::size_t eq = kv.find('=');
    env[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
  }
  for (const std::string& kv : environment_) {
    const std::size_t eq = kv.find('=');
    env[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
  }
  std::vector<std::string> env_text;
  for (const auto& [k, v] : env) env_text.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_text) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string arg0 = executable_, arg1 = "search-many-worker";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};

  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, executable_.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(pair[1]);
  if (rc != 0) {
    ::close(pair[0]);
    throw Error("search-many: cannot start the worker " + executable_ + ": " + std::strerror(rc));
  }
  pid_ = pid;
  to_child_ = from_child_ = pair[0];
  pending_.clear();
  ++starts_;
}

void WorkerProcess::stop(bool kill_it) {
  if (pid_ < 0) return;
  if (kill_it) ::kill(pid_, SIGKILL);
  ::close(to_child_);  // end of input: an idle worker exits
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  to_child_ = from_child_ = -1;
  pending_.clear();
}

Record WorkerProcess::run(const Unit& unit) {
  if (pid_ < 0) start();
  const double started = unix_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  Record failure = {{"unit", unit.name}, {"fingerprint", fingerprint(unit)}, {"pid", pid_},
                    {"started", started},  {"outputs", nlohmann::json::array()}};
  auto finish = [&](const std::string& status, const std::string& error) {
    failure["status"] = status;
    failure["error"] = error;
    failure["finished"] = unix_seconds();
    failure["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return failure;
  };

  const std::string request = unit_to_json(unit).dump() + "\n";
  std::size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(to_child_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int status = 0;
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      ::close(to_child_);
      pid_ = -1;
      return finish("crashed", "could not hand the unit to the worker: " + describe_exit(status));
    }
    sent += std::size_t(n);
  }

  char buffer[65536];
  for (;;) {
    const std::size_t newline = pending_.find('\n');
    if (newline != std::string::npos) {
      const std::string line = pending_.substr(0, newline);
      pending_.erase(0, newline + 1);
      Record r = Record::parse(line, nullptr, false);
      if (r.is_discarded() || !r.is_object()) {
        stop(true);
        return finish("crashed", "the worker sent an unreadable record");
      }
      if (!r.contains("unit")) r["unit"] = unit.name;
      if (!r.contains("fingerprint")) r["fingerprint"] = fingerprint(unit);
      // The worker leaves after a failure; reap it so the next unit gets a fresh one.
      if (r.value("status", "") != "ok") stop(false);
      return r;
    }
    int wait_ms = -1;
    if (unit.timeout > 0) {
      const double left = unit.timeout - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (left <= 0) {
        stop(true);
        char text[128];
        std::snprintf(text, sizeof text, "ran past its timeout of %g s; the worker was killed", unit.timeout);
        return finish("timeout", text);
      }
      wait_ms = int(std::min(left * 1000.0 + 1.0, 3.6e6));
    }
    pollfd p{from_child_, POLLIN, 0};
    const int ready = ::poll(&p, 1, wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) continue;  // the deadline check above decides
    const ssize_t n = ::recv(from_child_, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      ::close(to_child_);
      pid_ = -1;
      to_child_ = from_child_ = -1;
      return finish("crashed", describe_exit(status) + " while running the unit");
    }
    pending_.append(buffer, std::size_t(n));
  }
}

}  // namespace shiftstack::many
