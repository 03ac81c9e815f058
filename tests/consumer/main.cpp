// Lists the default kernel package through the installed runtime (C++ and C APIs).
#include <cstdio>

#include "aotinfer/aotinfer.h"
#include "aotinfer/package.hpp"

int main() {
  try {
    const auto path = aotinfer::Package::default_path();
    auto pkg = aotinfer::Package::open(path);
    std::printf("default package %s (config says %s)\n", path.c_str(), AOTINFER_PACKAGE_DIR);
    for (const auto* v : pkg.variants()) std::printf("%s\n", v->key.uri().c_str());
    aotinfer_package* c_pkg = nullptr;
    if (aotinfer_package_open(path.c_str(), &c_pkg) != AOTINFER_OK) {
      std::fprintf(stderr, "C API: %s\n", aotinfer_last_error());
      return 1;
    }
    std::printf("%zu variants\n", aotinfer_package_variant_count(c_pkg));
    aotinfer_package_close(c_pkg);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
