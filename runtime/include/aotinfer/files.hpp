// File helpers with the guarantees the tools rely on: a reader that names the file it failed
// on, and writers that never leave a half-written file behind.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace aotinfer {

std::string read_file(const std::filesystem::path& path);  // throws Error(io_error)

// Writes to a temporary file beside `path`, then renames it over `path`.
void write_file_atomic(const std::filesystem::path& path, std::string_view content);

// Writes only when the content differs, so that build tools see unchanged timestamps.
// Returns true when the file was (re)written.
bool write_if_different(const std::filesystem::path& path, std::string_view content);

}  // namespace aotinfer
