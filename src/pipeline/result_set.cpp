// The result set's commit (result_set.hpp has the layout and why it is atomic).
#include "pipeline/result_set.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <mutex>
#include <set>

#include "io/atomic_file.hpp"
#include "shiftstack/error.hpp"

namespace shiftstack::io::detail {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string unique_id() {
  static std::atomic<unsigned> counter{0};
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  char text[64];
  std::snprintf(text, sizeof text, "%d-%llx-%u", int(::getpid()),
                (unsigned long long)std::chrono::duration_cast<std::chrono::nanoseconds>(now).count(), counter++);
  return text;
}

std::string errno_text() { return system_error_text(errno); }

// ".<name>.<tag>-<unique id>": a hidden sibling for a step in progress. (Appended piece by piece:
// GCC 12 warns falsely about "." + std::string.)
std::string hidden_sibling(const std::string& name, const char* tag) {
  std::string out(".");
  out += name;
  out += tag;
  out += unique_id();
  return out;
}

// lstat: the entry itself, not what a link points to.
bool entry_exists(const fs::path& p, struct stat* st = nullptr) {
  struct stat s {};
  const bool ok = ::lstat(p.c_str(), &s) == 0;
  if (ok && st) *st = s;
  return ok;
}

std::string read_link(const fs::path& p) {
  char target[4096];
  const ssize_t n = ::readlink(p.c_str(), target, sizeof target - 1);
  if (n < 0) return "";
  return std::string(target, std::size_t(n));
}

// Points `link` at `target` with one rename, whatever `link` was before.
void replace_with_link(const std::string& target, const fs::path& link) {
  const fs::path temporary = link.parent_path() / hidden_sibling(link.filename().string(), ".link-");
  if (::symlink(target.c_str(), temporary.c_str()) != 0)
    throw Error(link.string() + ": cannot create a symbolic link: " + errno_text());
  if (::rename(temporary.c_str(), link.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(temporary.c_str());
    throw Error(link.string() + ": cannot replace it with a symbolic link: " + why);
  }
}

// A second name for the file `from` resolves to (hard link; a copy where links are refused).
void adopt(const fs::path& from, const fs::path& to) {
  const fs::path temporary = to.parent_path() / hidden_sibling(to.filename().string(), ".adopt-");
  if (::linkat(AT_FDCWD, from.c_str(), AT_FDCWD, temporary.c_str(), AT_SYMLINK_FOLLOW) != 0) {
    std::error_code ec;
    fs::copy_file(from, temporary, ec);
    if (ec) throw Error(from.string() + ": cannot keep it with its result set: " + ec.message());
    sync_path(temporary.string());
  }
  if (::rename(temporary.c_str(), to.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(temporary.c_str());
    throw Error(to.string() + ": cannot move into place: " + why);
  }
}

void remove_quietly(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
}

}  // namespace

ResultSetLayout result_set_layout(const OutputPaths& paths, const std::vector<std::string>& extra) {
  ResultSetLayout layout;
  std::vector<fs::path> given;
  for (const std::string* p : {&paths.ecsv, &paths.fits, &paths.stamps, &paths.summary, &paths.unclustered})
    if (!p->empty()) given.emplace_back(*p);
  for (const std::string& p : extra) given.emplace_back(p);
  require(!given.empty(), "no output files to write");
  auto folder_of = [](const fs::path& p) { return p.parent_path().empty() ? fs::path(".") : p.parent_path(); };
  layout.folder = folder_of(given.front());
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(layout.folder, ec);
  for (const fs::path& p : given) {
    const fs::path other = fs::weakly_canonical(folder_of(p), ec);
    require(other == canonical, "the result files must share one folder: " + given.front().string() + " and " +
                                    p.string() + " do not");
    layout.names.push_back(p.filename().string());
  }
  std::string stem;
  if (!paths.ecsv.empty()) {
    stem = fs::path(paths.ecsv).filename().string();
    if (ends_with(stem, ".ecsv")) stem.resize(stem.size() - 5);
  } else {
    stem = given.front().filename().string();
    for (const char* suffix : {".summary.json", ".stamps.fits", ".fits"})
      if (ends_with(stem, suffix)) {
        stem.resize(stem.size() - std::string(suffix).size());
        break;
      }
  }
  require(!stem.empty() && stem != "." && stem != "..", "output name '" + given.front().string() + "' has no file name");
  layout.stem = stem;
  std::set<std::string> family(layout.names.begin(), layout.names.end());
  for (const char* suffix : {".ecsv", ".fits", ".stamps.fits", ".summary.json", ".unclustered.ecsv"})
    family.insert(stem + suffix);
  // Names an earlier set had that this one may not (separate column files): our links into it.
  std::error_code listing;
  for (const auto& entry : fs::directory_iterator(layout.folder, listing)) {
    const std::string name = entry.path().filename().string();
    if (read_link(entry.path()) == "." + stem + ".set/" + name) family.insert(name);
  }
  layout.family.assign(family.begin(), family.end());
  return layout;
}

void lock_result_set(const ResultSetLayout& layout) {
  static std::mutex mutex;
  static std::map<std::string, int> held;  // lock files this process holds, for its lifetime
  std::lock_guard<std::mutex> guard(mutex);
  std::error_code ec;
  const std::string key = fs::weakly_canonical(layout.lock_file(), ec).string();
  if (held.count(key)) return;
  const int fd = ::open(layout.lock_file().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(layout.lock_file().string() + ": cannot create the result set's lock: " + errno_text());
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int code = errno;
    ::close(fd);
    if (code == EWOULDBLOCK)
      throw Error("another shiftstack run is writing the result set '" + layout.stem + "' in " +
                  layout.folder.string() + " (it holds " + layout.lock_file().string() +
                  "); wait for it to finish or choose another -o");
    throw Error(layout.lock_file().string() + ": cannot lock: " + system_error_text(code));
  }
  held[key] = fd;
}

std::vector<std::string> prepare_result_set(const ResultSetLayout& layout) {
  std::vector<std::string> notes;
  std::error_code ec;
  if (!fs::exists(layout.folder, ec)) throw Error("the output folder " + layout.folder.string() + " does not exist");
  if (!fs::is_directory(layout.folder, ec)) throw Error("the output folder " + layout.folder.string() + " is not a folder");
  // A real write, not access(2): read-only mounts, ACLs and quotas all show here.
  const fs::path probe = layout.folder / ("." + layout.stem + ".probe-" + unique_id());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot write in the output folder " + layout.folder.string() + ": " + errno_text());
  const bool wrote = ::write(fd, "x", 1) == 1;
  const std::string why = errno_text();
  ::close(fd);
  ::unlink(probe.c_str());
  if (!wrote) throw Error("cannot write in the output folder " + layout.folder.string() + ": " + why);
  for (const std::string& name : layout.names) {
    struct stat st {};
    if (::stat((layout.folder / name).c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      throw Error((layout.folder / name).string() + " is a folder; the result file cannot replace it");
  }
  lock_result_set(layout);

  // What interrupted runs left: run folders other than the current set, temporaries, probes.
  const std::string current = read_link(layout.current_link());
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(layout.folder, ec)) {
    const std::string name = entry.path().filename().string();
    bool stale = name.rfind(layout.run_prefix(), 0) == 0 && name != current;
    for (const std::string& family : layout.family)
      stale = stale || name.rfind("." + family + ".tmp-", 0) == 0 || name.rfind("." + family + ".link-", 0) == 0;
    stale = stale || name.rfind("." + layout.current_link().filename().string() + ".link-", 0) == 0 ||
            name.rfind("." + layout.stem + ".probe-", 0) == 0 || name.rfind("." + layout.stem + ".linkprobe-", 0) == 0;
    if (stale) {
      remove_quietly(entry.path());
      ++removed;
    }
  }
  if (removed)
    notes.push_back("removed " + std::to_string(removed) + " leftover(s) of an interrupted run of '" + layout.stem +
                    "' in " + layout.folder.string());
  return notes;
}

ResultSetWriter::ResultSetWriter(ResultSetLayout layout) : layout_(std::move(layout)) {
  notes_ = prepare_result_set(layout_);
  const fs::path probe = layout_.folder / ("." + layout_.stem + ".linkprobe-" + unique_id());
  links_ = ::symlink("probe", probe.c_str()) == 0;
  ::unlink(probe.c_str());
  if (!links_)
    notes_.push_back("the output folder " + layout_.folder.string() +
                     " has no symbolic links: the result files are replaced one by one (summary last), "
                     "not as one set");
  staging_ = layout_.folder / (layout_.run_prefix() + unique_id());
  if (::mkdir(staging_.c_str(), 0755) != 0)
    throw Error(staging_.string() + ": cannot create the result set's folder: " + errno_text());
}

ResultSetWriter::~ResultSetWriter() {
  if (!committed_) remove_quietly(staging_);
}

std::string ResultSetWriter::staged(const std::string& final_path) const {
  return (staging_ / fs::path(final_path).filename()).string();
}

void ResultSetWriter::commit() {
  const fs::path& folder = layout_.folder;
  for (const std::string& name : layout_.names)
    require(entry_exists(staging_ / name), "result set: " + name + " was not written");
  sync_path(staging_.string());

  if (!links_) {
    // One file at a time, the summary (the last name) last.
    for (const std::string& name : layout_.names)
      if (::rename((staging_ / name).c_str(), (folder / name).c_str()) != 0)
        throw Error((folder / name).string() + ": cannot move the finished file into place: " + errno_text());
    sync_path(folder.string());
    committed_ = true;
    remove_quietly(staging_);
    return;
  }

  // 1. Files under the family's names that are not our links (an older layout, or put there by
  //    hand) join the current set first, so that every name keeps showing the same content.
  std::string current = read_link(layout_.current_link());
  if (!current.empty() && !fs::is_directory(folder / current)) current.clear();
  std::vector<std::string> foreign;
  for (const std::string& name : layout_.family) {
    struct stat st {};
    const fs::path path = folder / name;
    if (!entry_exists(path, &st)) continue;
    const bool ours = S_ISLNK(st.st_mode) && read_link(path) == "." + layout_.stem + ".set/" + name;
    struct stat target {};
    if (!ours && ::stat(path.c_str(), &target) == 0 && S_ISREG(target.st_mode)) foreign.push_back(name);
  }
  if (!foreign.empty()) {
    fs::path holder = current.empty() ? folder / (layout_.run_prefix() + "adopted-" + unique_id()) : folder / current;
    if (current.empty() && ::mkdir(holder.c_str(), 0755) != 0)
      throw Error(holder.string() + ": cannot create: " + errno_text());
    for (const std::string& name : foreign) adopt(folder / name, holder / name);
    sync_path(holder.string());
    if (current.empty()) {
      current = holder.filename().string();
      replace_with_link(current, layout_.current_link());
    }
    sync_path(folder.string());
    for (const std::string& name : foreign) replace_with_link("." + layout_.stem + ".set/" + name, folder / name);
  }

  // 2. Every name of the new set is a link through .S.set (dangling until the swap when the
  //    current set lacks that file).
  for (const std::string& name : layout_.names) {
    const fs::path path = folder / name;
    const std::string target = "." + layout_.stem + ".set/" + name;
    if (!(entry_exists(path) && read_link(path) == target)) replace_with_link(target, path);
  }
  sync_path(folder.string());

  // 3. The swap: one rename makes the whole new set current.
  replace_with_link(staging_.filename().string(), layout_.current_link());
  sync_path(folder.string());
  committed_ = true;

  // 4. Tidying; a kill here leaves only what the next run removes.
  if (!current.empty() && current != staging_.filename().string()) remove_quietly(folder / current);
  const std::set<std::string> kept(layout_.names.begin(), layout_.names.end());
  for (const std::string& name : layout_.family)
    if (!kept.count(name) && read_link(folder / name) == "." + layout_.stem + ".set/" + name)
      ::unlink((folder / name).c_str());
  sync_path(folder.string());
}

}  // namespace shiftstack::io::detail
