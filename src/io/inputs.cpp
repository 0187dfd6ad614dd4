// The input list of a run: files, folders, glob patterns and @list files, expanded to FITS
// files, with the tool's own outputs left out and special files (FIFOs, devices) refused.
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "shiftstack/error.hpp"
#include "shiftstack/io/fits.hpp"

namespace shiftstack::io {

namespace {

bool has_fits_suffix(const std::string& name) {
  std::string lower = name;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const char* suffix : {".fits", ".fit", ".fts", ".fz", ".fits.gz", ".fit.gz"}) {
    const std::string s = suffix;
    if (lower.size() > s.size() && lower.compare(lower.size() - s.size(), s.size(), s) == 0) return true;
  }
  return false;
}

// What a path that is not a folder is, when it is not a plain file ("" for a plain file).
std::string special_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) return "";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a plain file";
}

void refuse_special(const std::string& path) {
  const std::string kind = special_kind(path);
  if (!kind.empty()) throw Error(path + ": is " + kind + ", not a FITS file; inputs must be plain files");
}

// The kind of shiftstack output a FITS file is (its primary header's SSOUTPUT), or "". The
// primary header of a results or stamps file carries the run's metadata, so SSOUTPUT may lie
// beyond the first block: the header is read up to END (at most 64 blocks).
std::string output_kind(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "";
  constexpr int kMaxBlocks = 64;
  char block[2880];
  std::string kind;
  for (int b = 0; b < kMaxBlocks; ++b) {
    const ssize_t n = ::pread(fd, block, sizeof block, off_t(b) * off_t(sizeof block));
    if (n != ssize_t(sizeof block) || (b == 0 && std::strncmp(block, "SIMPLE  =", 9) != 0)) break;
    bool end = false;
    for (std::size_t card = 0; card < sizeof block / 80 && !end; ++card) {
      const char* c = block + card * 80;
      if (std::strncmp(c, "END     ", 8) == 0) {
        end = true;
      } else if (std::strncmp(c, "SSOUTPUT= '", 11) == 0) {
        kind.assign(c + 11, 69);
        kind = kind.substr(0, kind.find('\''));
        while (!kind.empty() && kind.back() == ' ') kind.pop_back();
        if (kind.empty()) kind = "output";
        end = true;
      }
    }
    if (end) break;
  }
  ::close(fd);
  return kind;
}

struct Listing {
  std::vector<std::string> files;
  std::vector<std::string> skipped_outputs;
};

// Files found by a folder listing or a pattern: the tool's own outputs are left out (a rerun
// into the input folder must not read its results as exposures), special files refused.
void add_found(std::vector<std::string> found, Listing& out) {
  std::sort(found.begin(), found.end());
  for (auto& path : found) {
    refuse_special(path);
    if (!output_kind(path).empty()) {
      out.skipped_outputs.push_back(path);
      continue;
    }
    out.files.push_back(std::move(path));
  }
}

void expand_one(const std::string& input, Listing& listing, int depth) {
  std::vector<std::string>& out = listing.files;
  namespace fs = std::filesystem;
  if (input.empty()) throw Error("empty input path");
  if (input[0] == '@') {
    if (depth > 4) throw Error(input + ": @list files nest too deeply");
    const std::string list = input.substr(1);
    std::ifstream in(list);
    if (!in) throw Error(list + ": cannot read the input list");
    const fs::path base = fs::path(list).parent_path();
    std::string line;
    while (std::getline(in, line)) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
      std::size_t start = line.find_first_not_of(" \t");
      if (start == std::string::npos || line[start] == '#') continue;
      line = line.substr(start);
      // Relative entries are relative to the list file's folder.
      const fs::path p(line);
      expand_one(p.is_absolute() || line[0] == '@' ? line : (base / p).string(), listing, depth + 1);
    }
    return;
  }
  std::error_code ec;
  if (fs::is_directory(input, ec)) {
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(input, ec)) {
      const std::string name = entry.path().filename().string();
      // Hidden entries are never exposures (and hold the tool's own result sets).
      if (!name.empty() && name[0] != '.' && has_fits_suffix(name) && !entry.is_directory())
        found.push_back(entry.path().string());
    }
    if (ec) throw Error(input + ": cannot list the directory: " + ec.message());
    const std::size_t before = out.size();
    add_found(std::move(found), listing);
    if (out.size() == before)
      throw Error(input + ": directory has no FITS files (*.fits, *.fit, *.fts, *.fz, *.fits.gz)" +
                  (listing.skipped_outputs.empty() ? std::string() : std::string(" other than shiftstack outputs")));
    return;
  }
  if (fs::exists(input, ec)) {
    refuse_special(input);
    if (const std::string kind = output_kind(input); !kind.empty())
      throw Error(input + ": is a shiftstack output (" + kind + "), not an exposure");
    out.push_back(input);
    return;
  }
  if (input.find_first_of("*?[") != std::string::npos) {
    glob_t matches{};
    const int status = ::glob(input.c_str(), 0, nullptr, &matches);
    std::vector<std::string> found;
    if (status == 0)
      for (std::size_t i = 0; i < matches.gl_pathc; ++i)
        if (!fs::is_directory(matches.gl_pathv[i], ec)) found.push_back(matches.gl_pathv[i]);
    globfree(&matches);
    const std::size_t before = out.size();
    add_found(std::move(found), listing);
    if (out.size() == before) throw Error(input + ": pattern matches no files");
    return;
  }
  throw Error(input + ": no such file or directory");
}

}  // namespace

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs, std::vector<std::string>* notes) {
  if (inputs.empty()) throw Error("no input files given");
  Listing listing;
  for (const auto& input : inputs) expand_one(input, listing, 0);
  if (notes && !listing.skipped_outputs.empty())
    notes->push_back("left out " + std::to_string(listing.skipped_outputs.size()) +
                     " shiftstack output file(s) found among the inputs (e.g. " + listing.skipped_outputs.front() + ")");
  std::vector<std::string>& all = listing.files;
  std::vector<std::string> unique;
  std::set<std::string> seen;
  for (const auto& path : all) {
    std::error_code ec;
    const auto key = std::filesystem::weakly_canonical(path, ec).string();
    if (seen.insert(ec ? path : key).second) unique.push_back(path);
  }
  return unique;
}

}  // namespace shiftstack::io
