#include "aotinfer/package.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "aotinfer/arch.hpp"
#include "aotinfer/files.hpp"
#include "aotinfer/json.hpp"
#include "aotinfer/log.hpp"
#include "aotinfer/sha256.hpp"
#include "loading/driver.hpp"

namespace aotinfer {

namespace fs = std::filesystem;
using detail::check;
using detail::driver;

struct Package::State {
  fs::path dir;
  Manifest manifest;

  std::mutex mutex;  // guards the caches below
  std::map<std::pair<CUcontext, std::string>, CUmodule> modules;          // (context, uri)
  std::map<std::tuple<CUcontext, std::string, std::string>, Kernel> kernels;  // (context, uri, entry)
  std::set<std::string> checked;  // uris whose file matched the manifest once, before any driver call
  std::set<std::string> jit_told;  // uris whose PTX fallback was logged (once per package and variant)

  ~State() {
    // The driver may already be gone at process exit; unloading is best effort.
    for (auto& [key, module] : modules) {
      try {
        if (module) driver().cuModuleUnload(module);
      } catch (...) {
      }
    }
  }
};

namespace {

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (std::size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
  return s;
}

bool matches(const VariantKey& variant, const VariantKey& wanted) {
  if (variant.family != wanted.family) return false;
  for (const auto& a : wanted.axes) {
    const std::string* v = variant.find(a.name);
    if (!v || *v != a.value) return false;
  }
  return true;
}

std::size_t distance(const VariantKey& variant, const VariantKey& wanted) {
  std::size_t d = 0;
  for (const auto& a : wanted.axes) {
    const std::string* v = variant.find(a.name);
    d += !v || *v != a.value;
  }
  return d;
}

bool is_integer(const std::string& s) {
  return !s.empty() && std::all_of(s.begin() + (s[0] == '-'), s.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
         s != "-";
}

// Values for messages: integers first, by value (compared as text: any length), then names.
void sort_values(std::vector<std::string>& values) {
  auto integer_less = [](const std::string& a, const std::string& b) {
    const bool neg_a = a[0] == '-', neg_b = b[0] == '-';
    if (neg_a != neg_b) return neg_a;
    const bool shorter = a.size() != b.size() ? a.size() < b.size() : a < b;  // canonical: no leading zeros
    const bool same = a == b;
    return !same && (neg_a ? !shorter : shorter);
  };
  std::sort(values.begin(), values.end(), [&](const std::string& a, const std::string& b) {
    if (is_integer(a) && is_integer(b)) return integer_less(a, b);
    if (is_integer(a) != is_integer(b)) return is_integer(a);
    return a < b;
  });
}

void add_unique(std::vector<std::string>& items, const std::string& item) {
  if (std::find(items.begin(), items.end(), item) == items.end()) items.push_back(item);
}

// What a query asks that no variant of the package can give: a family it does not hold, an
// axis that family (without a family: every family) lacks, a value no such variant has, or an
// axis named twice. Empty when the query is sound (it may still match nothing: each value
// exists, but not together). `unknown_axis` tells the last kind apart.
std::string query_problem(const Manifest& m, std::string_view family, const std::vector<AxisValue>& where,
                          bool* unknown_axis = nullptr) {
  if (unknown_axis) *unknown_axis = false;
  std::vector<const ManifestVariant*> scope;
  std::vector<std::string> families;
  for (const auto& v : m.variants) {
    add_unique(families, v.key.family);
    if (family.empty() || v.key.family == family) scope.push_back(&v);
  }
  if (!family.empty() && scope.empty())
    return "family: expected one of this package's families (" + join(families) + "), got '" + std::string(family) + "'";
  for (std::size_t i = 0; i < where.size(); ++i) {
    const AxisValue& a = where[i];
    for (std::size_t k = 0; k < i; ++k)
      if (where[k].name == a.name && where[k].value != a.value)
        return "axis " + a.name + ": expected one value, got " + where[k].value + " and " + a.value;
    std::vector<std::string> axes, values;
    for (const auto* v : scope)
      for (const auto& va : v->key.axes) {
        add_unique(axes, va.name);
        if (va.name == a.name) add_unique(values, va.value);
      }
    if (values.empty()) {
      if (unknown_axis) *unknown_axis = true;
      return family.empty() ? "axis: expected an axis some family of this package has (" + join(axes) + "), got '" + a.name + "'"
                            : "axis of " + std::string(family) + ": expected one of its axes (" + join(axes) + "), got '" + a.name + "'";
    }
    if (std::find(values.begin(), values.end(), a.value) == values.end()) {
      sort_values(values);
      return "value of " + a.name + (family.empty() ? std::string() : " (" + std::string(family) + ")") +
             ": expected one of the values this package's variants have (" + join(values) + "), got '" + a.value + "'";
    }
  }
  return {};
}

std::string missing_message(const Package& pkg, const VariantKey& wanted) {
  const Manifest& m = pkg.manifest();
  std::string msg = "package '" + m.package_name + "' (" + pkg.path().string() + ") has no variant " + wanted.describe();
  std::vector<const ManifestVariant*> same_family;
  for (const auto& v : m.variants)
    if (v.key.family == wanted.family) same_family.push_back(&v);
  if (same_family.empty()) {
    std::vector<std::string> families;
    for (const auto& v : m.variants)
      if (std::find(families.begin(), families.end(), v.key.family) == families.end()) families.push_back(v.key.family);
    msg += "; it holds no '" + wanted.family + "' family at all (families: " + join(families) + ")";
  } else {
    std::stable_sort(same_family.begin(), same_family.end(),
                     [&](auto* a, auto* b) { return distance(a->key, wanted) < distance(b->key, wanted); });
    msg += "; nearest: ";
    for (std::size_t i = 0; i < std::min<std::size_t>(3, same_family.size()); ++i)
      msg += (i ? ", " : "") + same_family[i]->key.uri();
    bool unknown_axis = false;
    if (std::string problem = query_problem(m, wanted.family, wanted.axes, &unknown_axis); !problem.empty()) {
      msg += " (" + problem + ")";
      // An axis the family does not have cannot be added by a spec edit.
      if (unknown_axis) return msg;
    }
  }
  return msg + ". To add it, " + spec_include_advice(wanted, m.spec_file, !same_family.empty());
}

struct DeviceArch {
  int major = 0, minor = 0;
};

DeviceArch context_arch() {
  CUdevice device = 0;
  check(driver().cuCtxGetDevice(&device), "cuCtxGetDevice");
  DeviceArch a;
  check(driver().cuDeviceGetAttribute(&a.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device), "compute capability");
  check(driver().cuDeviceGetAttribute(&a.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device), "compute capability");
  return a;
}

// The checks a variant's file passes before its bytes go anywhere, none of which needs the
// driver: it lies inside the package (no link leads out of it), is a regular file, and has the
// manifest's size (compared before reading, so no odd file is read whole) and sha256. On
// success `bytes` holds the file; otherwise the problem names the file, with the error code.
struct FileProblem {
  ErrorCode code = ErrorCode::corrupt_package;
  std::string what;  // empty: the file is fine
};

FileProblem check_variant_file(const fs::path& dir, const ManifestVariant& v, std::string& bytes) {
  const fs::path file = dir / v.file;
  std::error_code ec_dir, ec_file;
  const fs::path root = fs::weakly_canonical(dir, ec_dir);
  const fs::path real = fs::weakly_canonical(file, ec_file);
  if (!ec_dir && !ec_file) {
    auto [r, f] = std::mismatch(root.begin(), root.end(), real.begin(), real.end());
    if (r != root.end())
      return {ErrorCode::corrupt_package, file.string() + ": expected a file inside the package " + root.string() +
                                              ", got a link to " + real.string() + " outside it"};
  }
  std::error_code ec;
  const fs::file_status status = fs::status(file, ec);
  if (!fs::exists(status))
    return {ErrorCode::io_error, "cannot read " + file.string() + ": " +
                                     (ec ? ec.message() : std::string("No such file or directory"))};
  if (!fs::is_regular_file(status))
    return {ErrorCode::corrupt_package, file.string() + ": expected a regular file, got " +
                                            (fs::is_directory(status) ? "a directory" : "a special file (device, fifo or socket)")};
  const std::uintmax_t size = fs::file_size(file, ec);
  if (ec) return {ErrorCode::io_error, "cannot read " + file.string() + ": " + ec.message()};
  auto size_problem = [&](std::uintmax_t has) {
    return FileProblem{ErrorCode::corrupt_package, file.string() + " does not match the manifest: it has " + std::to_string(has) +
                                                       " bytes, the manifest says " + std::to_string(v.size)};
  };
  if (size != v.size) return size_problem(size);
  try {
    bytes = read_file(file);
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  if (bytes.size() != v.size) return size_problem(bytes.size());  // changed while read
  if (const std::string sha = sha256_hex(bytes); sha != v.sha256)
    return {ErrorCode::corrupt_package, file.string() + " does not match the manifest: its sha256 is " + sha +
                                            ", the manifest says " + v.sha256};
  return {};
}

}  // namespace

DeviceCode device_code(const ManifestVariant& variant, int major, int minor) {
  for (const auto& name : variant.archs)
    if (auto arch = Arch::parse(name); arch && arch->runs_on(major, minor)) return DeviceCode::sass;
  for (const auto& name : variant.ptx)
    if (auto arch = Arch::parse_ptx(name); arch && arch->ptx_runs_on(major, minor)) return DeviceCode::ptx;
  return DeviceCode::none;
}

DeviceCode check_device_arch(const ManifestVariant& variant, int major, int minor) {
  if (const DeviceCode code = device_code(variant, major, minor); code != DeviceCode::none) return code;
  const std::string device = "sm_" + std::to_string(major * 10 + minor);
  std::string has = join(variant.archs);
  if (!variant.ptx.empty()) has += (has.empty() ? "PTX " : " and PTX ") + join(variant.ptx);
  throw Error(ErrorCode::unsupported_arch,
              "variant " + variant.key.uri() + " holds code for " + has + ", none of which runs on this GPU (" + device +
                  "); build a package whose spec lists \"" + device + "\" in \"archs\" (or a \"ptx\" arch at or below it)");
}

Arch current_device_arch() {
  detail::current_context();
  const DeviceArch device = context_arch();
  return Arch{device.major, device.minor, false};
}

Package Package::open(const fs::path& dir) {
  fs::path manifest = dir / "manifest.json";
  if (!fs::exists(manifest))
    throw Error(ErrorCode::not_found, "no kernel package at " + dir.string() + " (" + manifest.string() +
                                          " does not exist); build one with aotinfer-gen build SPEC (an interrupted build leaves none: run it again)");
  if (std::error_code ec; !fs::is_regular_file(manifest, ec))
    throw Error(ErrorCode::corrupt_package, manifest.string() + ": expected a manifest file, got " +
                                                (fs::is_directory(manifest, ec) ? "a directory" : "a special file"));
  auto state = std::make_shared<State>();
  state->dir = dir;
  state->manifest = Manifest::load(manifest);
  return Package(std::move(state));
}

const fs::path& Package::path() const { return state_->dir; }
const Manifest& Package::manifest() const { return state_->manifest; }

std::vector<const ManifestVariant*> Package::variants(std::string_view family, const std::vector<AxisValue>& where) const {
  std::vector<const ManifestVariant*> out;
  for (const auto& v : state_->manifest.variants) {
    if (!family.empty() && v.key.family != family) continue;
    if (matches(v.key, VariantKey{v.key.family, where})) out.push_back(&v);
  }
  return out;
}

std::vector<const ManifestVariant*> Package::select(std::string_view family, const std::vector<AxisValue>& where) const {
  if (std::string problem = query_problem(state_->manifest, family, where); !problem.empty())
    throw Error(ErrorCode::invalid_argument, "package '" + state_->manifest.package_name + "' (" + state_->dir.string() + "): " + problem);
  return variants(family, where);
}

const ManifestVariant& Package::find(const VariantKey& key) const {
  auto found = variants(key.family, key.axes);
  if (found.empty() || key.family.empty()) throw Error(ErrorCode::not_found, missing_message(*this, key));
  if (found.size() > 1) {
    std::vector<std::string> uris;
    for (auto* v : found) uris.push_back(v->key.uri());
    throw Error(ErrorCode::invalid_argument,
                key.describe() + " matches " + std::to_string(found.size()) + " variants (" + join(uris) +
                    "); name more axes to pick one");
  }
  return *found.front();
}

const ManifestVariant& Package::find(std::string_view uri) const { return find(VariantKey::from_uri(uri)); }

Kernel Package::kernel(std::string_view uri, std::string_view entry) const { return kernel(VariantKey::from_uri(uri), entry); }

Kernel Package::kernel(const VariantKey& key, std::string_view entry_name) const {
  const ManifestVariant& variant = find(key);
  const std::string uri = variant.key.uri();
  auto entry = std::find_if(variant.entries.begin(), variant.entries.end(), [&](const auto& e) { return e.name == entry_name; });
  if (entry == variant.entries.end()) {
    std::vector<std::string> names;
    for (const auto& e : variant.entries) names.push_back(e.name);
    throw Error(ErrorCode::not_found, "variant " + uri + " has no entry point '" + std::string(entry_name) +
                                          "'; its entries: " + join(names));
  }

  const fs::path file = state_->dir / variant.file;
  // Refuse damaged or foreign code before the driver sees it. The first check comes before the
  // driver is touched at all, so a damaged package says so even on a machine without a GPU.
  auto read_checked = [&] {
    std::string bytes;
    const FileProblem problem = check_variant_file(state_->dir, variant, bytes);
    if (problem.what.empty()) return bytes;
    if (problem.code == ErrorCode::corrupt_package)
      throw Error(problem.code, problem.what + "; the package is damaged or was modified: rebuild or reinstall it");
    throw Error(problem.code, problem.what);
  };
  std::lock_guard lock(state_->mutex);
  std::string bytes;
  if (!state_->checked.count(uri)) {
    bytes = read_checked();
    state_->checked.insert(uri);
  }

  CUcontext ctx = detail::current_context();
  if (auto it = state_->kernels.find({ctx, uri, entry->name}); it != state_->kernels.end()) return it->second;

  CUmodule& module = state_->modules[{ctx, uri}];
  if (!module) {
    if (bytes.empty()) bytes = read_checked();  // another context: the file is read (and checked) again
    DeviceArch arch = context_arch();
    if (check_device_arch(variant, arch.major, arch.minor) == DeviceCode::ptx && state_->jit_told.insert(uri).second)
      detail::log("variant " + uri + " has no SASS for this GPU (sm_" + std::to_string(arch.major * 10 + arch.minor) +
                  "): the driver compiles its PTX (" + join(variant.ptx) + ") on first use, which can take seconds; " +
                  "a package built for this arch skips that");
    CUresult r = driver().cuModuleLoadData(&module, bytes.data());
    if (r != CUDA_SUCCESS) {
      module = nullptr;
      check(r, "loading " + file.string());
    }
  }

  Kernel k;
  k.uri_ = uri;
  k.entry_ = entry->name;
  check(driver().cuModuleGetFunction(&k.function_, module, entry->symbol.c_str()),
        "entry point " + entry->symbol + " of " + uri);
  CUdeviceptr global = 0;
  std::size_t global_size = 0;
  check(driver().cuModuleGetGlobal(&global, &global_size, module, entry->launch_symbol.c_str()),
        "launch info " + entry->launch_symbol + " of " + uri);
  if (global_size != sizeof(aotinfer_launch_info))
    throw Error(ErrorCode::corrupt_package, uri + ": launch info has " + std::to_string(global_size) + " bytes, this runtime expects " +
                                                std::to_string(sizeof(aotinfer_launch_info)) + "; rebuild the package with this aotinfer version");
  check(driver().cuMemcpyDtoH(&k.info_, global, sizeof k.info_), "reading launch info of " + uri);
  if (k.info_.abi_version != AOTINFER_ABI_VERSION)
    throw Error(ErrorCode::corrupt_package, uri + " was built for kernel ABI " + std::to_string(k.info_.abi_version) +
                                                ", this runtime speaks " + std::to_string(AOTINFER_ABI_VERSION) + "; rebuild the package");
  if (k.info_.dynamic_smem_bytes > 48 * 1024)
    check(driver().cuFuncSetAttribute(k.function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(k.info_.dynamic_smem_bytes)),
          "raising the shared-memory limit of " + uri);
  state_->kernels.emplace(std::make_tuple(ctx, uri, entry->name), k);
  return k;
}

std::vector<std::string> Package::verify() const {
  std::vector<std::string> problems;
  for (const auto& v : state_->manifest.variants) {
    std::string bytes;
    if (FileProblem p = check_variant_file(state_->dir, v, bytes); !p.what.empty()) problems.push_back(v.key.uri() + ": " + p.what);
  }
  return problems;
}

void Kernel::launch(Grid grid, const void* params, std::size_t params_size, Stream stream) const {
  if (params_size != info_.params_size)
    throw Error(ErrorCode::invalid_argument, uri_ + "/" + entry_ + " takes a " + std::to_string(info_.params_size) +
                                                 "-byte params struct, got " + std::to_string(params_size) +
                                                 " bytes: the runtime and the package disagree on the kernel ABI");
  void* args[] = {const_cast<void*>(params)};
  const CUresult result = driver().cuLaunchKernel(function_, grid.x, grid.y, grid.z, info_.block[0], info_.block[1],
                                                  info_.block[2], info_.dynamic_smem_bytes, stream, args, nullptr);
  // The message is built only on failure: this is every run()'s path.
  if (result != CUDA_SUCCESS) check(result, "launching " + uri_ + "/" + entry_);
}

int Kernel::max_active_ctas_per_sm() const {
  int n = 0;
  check(driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(
            &n, function_, int(info_.block[0] * info_.block[1] * info_.block[2]), info_.dynamic_smem_bytes),
        "occupancy of " + uri_ + "/" + entry_);
  return n;
}

}  // namespace aotinfer
