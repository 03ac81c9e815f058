#include "aotinfer/files.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "aotinfer/error.hpp"

namespace aotinfer {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::io_error, "cannot read " + path.string() + ": " + std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw Error(ErrorCode::io_error, "error while reading " + path.string());
  return std::move(s).str();
}

void write_file_atomic(const fs::path& path, std::string_view content) {
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  // The pid keeps concurrent writers (parallel build steps) from sharing a temporary.
  fs::path tmp = path;
  tmp += ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(content.data(), std::streamsize(content.size()));
    out.flush();
    if (!out) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      throw Error(ErrorCode::io_error, "cannot write " + path.string() + ": " + std::strerror(errno));
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error(ErrorCode::io_error, "cannot replace " + path.string() + ": " + ec.message());
  }
}

bool write_if_different(const fs::path& path, std::string_view content) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec) && fs::file_size(path, ec) == content.size() && read_file(path) == content)
    return false;
  write_file_atomic(path, content);
  return true;
}

}  // namespace aotinfer
