// Whole-file writes that never leave a half-written target behind: a reader (or a crash) sees
// either the old file or the new one. Used for memory snapshots, checkpoints and reports.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace headroom {

// Writes `bytes` to a new temporary file in the directory of `path`, fsyncs it, renames it over
// `path` and fsyncs the directory so the rename itself survives a crash. The new file gets the
// usual 0666 & ~umask permissions (not those of a file it replaces). On failure the temporary
// file is removed, `path` keeps its old contents, and a headroom::Error names `path` and the
// system's reason.
void write_file_atomically(const std::string& path, std::string_view bytes);

// Makes a rename or a new entry in `dir` durable. File systems that cannot fsync a directory
// (EINVAL, EROFS) are let be, as write_file_atomically does; other failures are an Error naming
// `dir` (`what` says whose directory it is).
void fsync_directory(const std::string& dir, const std::string& what = "directory");

// A whole directory written as write_file_atomically writes a file: `write_files` fills a fresh
// temporary directory next to `path` (.NAME.tmp-PID; each file written atomically), which is
// fsynced and renamed to `path`. A directory already at `path` is renamed away (.NAME.old-PID)
// first and deleted after, so a crash leaves the old directory or the new one under `path`, and
// at worst a leftover beside it. On error the temporary directory is removed and `path` is as
// it was.
void write_directory_atomically(const std::string& path,
                                const std::function<void(const std::string& dir)>& write_files);

// Appends `line` to the file at `path` (made if missing). A failed write (a full disk) is an
// Error naming the path, and the file is cut back to its old end so that it holds no torn line.
void append_line(const std::string& path, const std::string& line);

}  // namespace headroom
