#include "aotinfer/aotinfer.h"

#include <string>
#include <vector>

#include "aotinfer/merge_state.hpp"
#include "aotinfer/package.hpp"

struct aotinfer_package {
  aotinfer::Package package;
  std::vector<std::string> uris;
};

namespace {

// The C statuses are the C++ error codes.
static_assert(int(aotinfer::ErrorCode::io_error) == AOTINFER_IO_ERROR);
static_assert(int(aotinfer::ErrorCode::invalid_argument) == AOTINFER_INVALID_ARGUMENT);

thread_local std::string last_error;

// Runs `body`, turning exceptions into a status and the thread's last error.
template <typename Body>
aotinfer_status guarded(Body&& body) {
  try {
    body();
    last_error.clear();
    return AOTINFER_OK;
  } catch (const aotinfer::Error& e) {
    last_error = e.what();
    return aotinfer_status(int(e.code()));
  } catch (const std::exception& e) {
    last_error = e.what();
    return AOTINFER_INTERNAL_ERROR;
  }
}

aotinfer_status null_argument(const char* what) {
  last_error = std::string(what) + " must not be NULL";
  return AOTINFER_INVALID_ARGUMENT;
}

}  // namespace

extern "C" {

const char* aotinfer_last_error(void) { return last_error.c_str(); }

aotinfer_status aotinfer_package_open(const char* dir, aotinfer_package** out) {
  if (!dir) return null_argument("dir");
  if (!out) return null_argument("out");
  *out = nullptr;
  return guarded([&] {
    auto package = aotinfer::Package::open(dir);
    std::vector<std::string> uris;
    for (const auto& v : package.manifest().variants) uris.push_back(v.key.uri());
    *out = new aotinfer_package{std::move(package), std::move(uris)};
  });
}

void aotinfer_package_close(aotinfer_package* package) { delete package; }

size_t aotinfer_package_variant_count(const aotinfer_package* package) { return package ? package->uris.size() : 0; }

const char* aotinfer_package_variant_uri(const aotinfer_package* package, size_t i) {
  return package && i < package->uris.size() ? package->uris[i].c_str() : nullptr;
}

aotinfer_status aotinfer_package_find(const aotinfer_package* package, const char* uri) {
  if (!package) return null_argument("package");
  if (!uri) return null_argument("uri");
  return guarded([&] { package->package.find(uri); });
}

aotinfer_status aotinfer_launch(const aotinfer_package* package, const char* uri, const char* entry,
                                const uint32_t grid[3], const void* params, size_t params_size, void* stream) {
  if (!package) return null_argument("package");
  if (!uri || !entry || !grid || !params) return null_argument("uri, entry, grid and params");
  return guarded([&] {
    package->package.kernel(uri, entry).launch(aotinfer::Grid{grid[0], grid[1], grid[2]}, params, params_size,
                                               static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_merge_state(const aotinfer_package* package, const char* dtype, int head_dim,
                                     const aotinfer_merge_state_params* params, void* stream) {
  if (!package) return null_argument("package");
  if (!dtype || !params) return null_argument("dtype and params");
  return guarded([&] {
    auto type = aotinfer::parse_dtype(dtype);
    if (!type) throw aotinfer::Error(aotinfer::ErrorCode::invalid_argument, std::string("unknown dtype '") + dtype + "'");
    aotinfer::MergeState(package->package, *type, head_dim).run(*params, static_cast<aotinfer::Stream>(stream));
  });
}

}  // extern "C"
