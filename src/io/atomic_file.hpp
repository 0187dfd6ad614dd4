// Files replaced atomically and flushed to disk (no cfitsio here: the pipeline uses these too).
#pragma once
#include <string>

namespace shiftstack::io::detail {

// Atomic replacement: write to a temporary sibling, then rename over the target. commit_file
// flushes the temporary to disk (fsync) before the rename and the folder after it, so a crash
// leaves the old file or the new one, never an empty or partial one.
std::string temporary_sibling(const std::string& path);
void commit_file(const std::string& temporary, const std::string& path);
void write_text_atomic(const std::string& path, const std::string& content);
// fsync of a file or folder by path; Error naming it on failure.
void sync_path(const std::string& path);
// Text for errno `code` ("No space left on device").
std::string system_error_text(int code);

}  // namespace shiftstack::io::detail
