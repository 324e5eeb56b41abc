// Whole-file writes that never leave a half-written target behind: a reader (or a crash) sees
// either the old file or the new one. Used for memory snapshots, checkpoints and reports.
#pragma once

#include <string>
#include <string_view>

namespace headroom {

// Writes `bytes` to a new temporary file in the directory of `path`, fsyncs it, renames it over
// `path` and fsyncs the directory so the rename itself survives a crash. The new file gets the
// usual 0666 & ~umask permissions (not those of a file it replaces). On failure the temporary
// file is removed, `path` keeps its old contents, and a headroom::Error names `path` and the
// system's reason.
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace headroom
