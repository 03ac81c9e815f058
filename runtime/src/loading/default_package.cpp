// Where the default kernel package lives, relative to the runtime library itself, so that an
// installed runtime (or a wheel) finds its kernels with no configuration.
#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "aotinfer/package.hpp"

namespace aotinfer {

namespace fs = std::filesystem;

namespace {

// An object with internal linkage: its address lies in whatever binary holds this code (the
// shared library, or the executable when linked statically), never in a PLT stub.
const char anchor = 0;

fs::path this_library_dir() {
  Dl_info info{};
  if (::dladdr(&anchor, &info) == 0 || !info.dli_fname) return {};
  std::error_code ec;
  fs::path lib = fs::canonical(info.dli_fname, ec);
  return ec ? fs::path() : lib.parent_path();
}

}  // namespace

fs::path Package::default_path() {
  if (const char* env = std::getenv("AOTINFER_PACKAGE"); env && *env) return env;
  std::vector<fs::path> candidates;
  if (fs::path dir = this_library_dir(); !dir.empty()) {
    candidates.push_back((dir / AOTINFER_DEFAULT_PACKAGE_RELATIVE).lexically_normal());
    candidates.push_back(dir / "package");
  }
  std::string looked;
  for (const auto& c : candidates) {
    if (fs::exists(c / "manifest.json")) return c;
    looked += (looked.empty() ? "" : ", ") + c.string();
  }
  throw Error(ErrorCode::not_found, "no default kernel package: AOTINFER_PACKAGE is not set and none is installed beside the "
                                    "runtime library (looked in " + (looked.empty() ? std::string("nothing") : looked) +
                                    "); pass a package folder explicitly or set AOTINFER_PACKAGE");
}

}  // namespace aotinfer
