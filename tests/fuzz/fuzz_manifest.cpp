// Fuzz target: the manifest reader (runtime/src/core/manifest.cpp) and Package::open and the
// package queries (runtime/src/loading/package.cpp), none of which touch the CUDA driver.
//
// Input: the text of manifest.json, optionally followed by a NUL byte and the bytes of one
// kernel file (a manifest is JSON text, which never holds a raw NUL). The target writes both
// into its own temporary package directory (manifest.json and kernels/a.fatbin, replaced for
// every input), then opens it. Package::open must either throw aotinfer::Error (not_found or
// corrupt_package) or give a package whose queries behave: every variant is found by its own
// key and URI (or refused as ambiguous when the manifest lists a URI twice), filters return
// only matching variants, verify() reports per file, check_device_arch agrees with the archs and
// PTX, every variant fits the recorded families (when there are any), and the manifest survives
// dump() and load() unchanged.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <typeinfo>

#include <nlohmann/json.hpp>

#include "aotinfer/arch.hpp"
#include "aotinfer/error.hpp"
#include "aotinfer/manifest.hpp"
#include "aotinfer/package.hpp"
#include "fuzz/fuzz_input.hpp"

using namespace aotinfer;
using fuzz::finding;
namespace fs = std::filesystem;

namespace {

fs::path dir;  // this process's package directory

void remove_dir() {
  std::error_code ignored;
  if (!dir.empty()) fs::remove_all(dir, ignored);
}

void write(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) finding("cannot write " + path.string());
}

// The manifest names files relative to the package; a name that leaves it (absolute, "..") would
// make verify() read whatever it names (a device, a FIFO, another tree), which this target must
// not do to the machine it runs on. Such manifests are opened and queried, not verified.
bool inside_package(const std::string& file) {
  const fs::path p = fs::path(file).lexically_normal();
  if (file.empty() || p.is_absolute() || p.empty()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

bool code_is(const Error& e, ErrorCode a, ErrorCode b) { return e.code() == a || e.code() == b; }

// Manifest::load refuses a variant its recorded family does not allow; what it let through fits.
void check_family(const Manifest& m, const ManifestVariant& v) {
  if (m.families.empty()) return;
  const ManifestFamily* f = m.family(v.key.family);
  if (!f || f->axes.size() != v.key.axes.size()) finding(v.key.uri() + ": not the axes of a recorded family");
  for (std::size_t i = 0; i < v.key.axes.size(); ++i) {
    const auto& allowed = f->axes[i].allowed;
    if (f->axes[i].name != v.key.axes[i].name || std::find(allowed.begin(), allowed.end(), v.key.axes[i].value) == allowed.end())
      finding(v.key.uri() + ": axis " + v.key.axes[i].name + " does not fit its recorded family");
  }
}

void query(const Package& pkg) {
  const Manifest& m = pkg.manifest();
  if (pkg.variants().size() != m.variants.size()) finding("variants() does not list every variant");
  bool all_inside = true;
  for (const auto& v : m.variants) {
    // Found by its key, by its URI and by its family; a URI listed twice is ambiguous.
    std::size_t same_uri = 0;
    for (const auto& w : m.variants) same_uri += w.key == v.key;
    try {
      const ManifestVariant& found = pkg.find(v.key);
      if (found.key != v.key) finding(v.key.uri() + ": find() returned " + found.key.uri());
      if (same_uri > 1) finding(v.key.uri() + ": listed " + std::to_string(same_uri) + " times, yet find() picked one");
      if (&pkg.find(v.key.uri()) != &found) finding(v.key.uri() + ": find(uri) and find(key) differ");
    } catch (const Error& e) {
      if (!(same_uri > 1 && e.code() == ErrorCode::invalid_argument))
        finding(v.key.uri() + ": find() of a listed variant threw: " + e.what());
    }
    for (const auto* w : pkg.variants(v.key.family, v.key.axes))
      if (w->key.family != v.key.family) finding("variants(family, axes) returned another family");
    // A key without axes names the family: found when the family has one variant, else ambiguous.
    try {
      pkg.find(VariantKey{v.key.family, {}});
    } catch (const Error& e) {
      if (e.code() != ErrorCode::invalid_argument) finding("find(family) of a listed family threw: " + std::string(e.what()));
    }
    // Device archs: SASS when an arch of the variant runs on the device, else PTX when one of its
    // PTX archs compiles for it, else refused.
    for (const auto& [major, minor] : {std::pair{7, 5}, std::pair{8, 0}, std::pair{9, 0}, std::pair{12, 1}}) {
      bool sass = false, ptx = false;
      for (const auto& a : v.archs)
        if (auto arch = Arch::parse(a); arch && arch->runs_on(major, minor)) sass = true;
      for (const auto& a : v.ptx)
        if (auto arch = Arch::parse_ptx(a); arch && arch->ptx_runs_on(major, minor)) ptx = true;
      try {
        const DeviceCode code = check_device_arch(v, major, minor);
        if (code != (sass ? DeviceCode::sass : DeviceCode::ptx) || !(sass || ptx))
          finding(v.key.uri() + ": check_device_arch chose other code than the archs and PTX allow");
      } catch (const Error& e) {
        if (sass || ptx || e.code() != ErrorCode::unsupported_arch)
          finding(v.key.uri() + ": check_device_arch refused wrongly: " + e.what());
      }
    }
    check_family(m, v);
    all_inside = all_inside && inside_package(v.file);
  }
  // A key no package holds: not_found, with a message naming it.
  try {
    pkg.find(VariantKey{"no_such_family", {{"head_dim", "7"}}});
    finding("find() returned a variant of a family the package does not hold");
  } catch (const Error& e) {
    if (e.code() != ErrorCode::not_found) finding(std::string("find(missing) threw ") + e.what());
  }
  if (all_inside) {
    const auto problems = pkg.verify();
    if (problems.size() > m.variants.size()) finding("verify() reports more problems than variants");
  }

  // dump() then load() gives the same manifest.
  const fs::path copy = dir / "roundtrip.json";
  write(copy, m.dump());
  try {
    if (Manifest::load(copy) != m) finding("a manifest changed through dump() and load()");
  } catch (const Error& e) {
    finding(std::string("a loaded manifest's dump() does not load: ") + e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dir = fs::temp_directory_path() / ("aotinfer-fuzz-manifest-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir / "kernels", ec);
  if (ec) finding("cannot create " + dir.string() + ": " + ec.message());
  std::atexit(remove_dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = input.find('\0');
  write(dir / "manifest.json", input.substr(0, nul));
  const fs::path kernel = dir / "kernels" / "a.fatbin";
  if (nul != std::string_view::npos) {
    write(kernel, input.substr(nul + 1));
  } else {
    std::error_code ignored;
    fs::remove(kernel, ignored);
  }
  std::optional<Package> pkg;
  try {
    pkg = Package::open(dir);
  } catch (const Error& e) {
    if (fuzz::verbose()) std::fprintf(stderr, "Package::open: %s\n", e.what());
    if (!code_is(e, ErrorCode::corrupt_package, ErrorCode::not_found))
      finding(std::string("Package::open threw error code ") + std::to_string(int(e.code())) + ": " + e.what());
    return 0;
  } catch (const std::exception& e) {
    finding(std::string("Package::open threw ") + typeid(e).name() + ", not aotinfer::Error: " + e.what());
  }
  try {
    query(*pkg);
  } catch (const std::exception& e) {
    finding(std::string("a query of an opened package threw ") + typeid(e).name() + ": " + e.what());
  }
  return 0;
}
