// Kernel packages: open one, ask which variants it holds, load an entry point by URI.
//
//   auto pkg = aotinfer::Package::open("generated/aotinfer-ci/package");
//   auto kernel = pkg.kernel("merge_state.dtype-bf16.head_dim-128", "merge");
//   kernel.launch(grid, params, stream);
//
// Queries need no GPU. Loading goes through the CUDA driver (libcuda, opened at first use), is
// lazy and thread-safe, caches one module per (context, variant), checks the file first (a
// regular file inside the package, no link leading out of it, with the manifest's size and
// sha256: Error(corrupt_package) naming the file, io_error when it cannot be read; no driver
// needed), and refuses code that cannot run on the current device.
#pragma once
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "aotinfer/abi.h"
#include "aotinfer/arch.hpp"
#include "aotinfer/error.hpp"
#include "aotinfer/manifest.hpp"
#include "aotinfer/variant.hpp"

struct CUstream_st;
struct CUfunc_st;

namespace aotinfer {

using Stream = CUstream_st*;  // a CUstream or cudaStream_t; nullptr is the legacy default stream

struct Grid {
  unsigned x = 1, y = 1, z = 1;
};

// One entry point of a loaded variant. Cheap to copy; valid while its Package lives.
class Kernel {
 public:
  const aotinfer_launch_info& launch_info() const { return info_; }
  const std::string& uri() const { return uri_; }
  const std::string& entry() const { return entry_; }

  // Launches with the template's block size and dynamic shared memory. Throws
  // Error(invalid_argument) when params_size differs from the kernel's params struct.
  void launch(Grid grid, const void* params, std::size_t params_size, Stream stream) const;
  template <typename Params>
  void launch(Grid grid, const Params& params, Stream stream) const {
    launch(grid, &params, sizeof(Params), stream);
  }

  // CTAs of this kernel that fit on one SM at once (planners size grids with it).
  int max_active_ctas_per_sm() const;

 private:
  friend class Package;
  CUfunc_st* function_ = nullptr;
  aotinfer_launch_info info_{};
  std::string uri_, entry_;
};

class Package {
 public:
  // Reads dir/manifest.json. Throws Error(not_found / corrupt_package).
  static Package open(const std::filesystem::path& dir);

  // The package a program gets without configuration: $AOTINFER_PACKAGE when set, else the one
  // installed beside this runtime library (<lib>/../share/aotinfer/package after cmake --install,
  // <lib>/package inside the Python wheel; a statically linked program looks beside itself).
  // Throws Error(not_found) naming where it looked.
  static std::filesystem::path default_path();
  static Package open_default() { return open(default_path()); }

  const std::filesystem::path& path() const;
  const Manifest& manifest() const;

  // Variants of `family` (all when empty) whose axes include every given value.
  std::vector<const ManifestVariant*> variants(std::string_view family = {},
                                               const std::vector<AxisValue>& where = {}) const;
  // The same, for queries typed by a person (aotinfer list): a family the package does not
  // hold, an axis that family (without a family: every family) lacks, a value no such variant
  // has, or an axis given twice with two values is Error(invalid_argument) naming what the
  // package holds, instead of an empty answer.
  std::vector<const ManifestVariant*> select(std::string_view family, const std::vector<AxisValue>& where) const;

  // The one variant of key.family matching every axis the key names (axes it leaves out may
  // take any value, as long as exactly one variant matches). Throws Error(not_found) naming
  // the key, the nearest variants that exist and the spec entry that would add it, or
  // Error(invalid_argument) when several match.
  const ManifestVariant& find(const VariantKey& key) const;
  const ManifestVariant& find(std::string_view uri) const;

  // Loads (once per context) and returns an entry point of a variant.
  Kernel kernel(std::string_view uri, std::string_view entry) const;
  Kernel kernel(const VariantKey& key, std::string_view entry) const;

  // Checks every file's size and sha256 against the manifest; returns one line per problem.
  std::vector<std::string> verify() const;

  struct State;

 private:
  explicit Package(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

// Which code of the variant a device of this compute capability runs: its SASS when some arch of
// `archs` runs there (Arch::runs_on), else its PTX when the driver can compile that for the
// device (Arch::ptx_runs_on), else none.
enum class DeviceCode { none, sass, ptx };
DeviceCode device_code(const ManifestVariant& variant, int device_major, int device_minor);

// device_code(), or Error(unsupported_arch) naming the variant's archs, its PTX and the device
// when it is none: what kernel() requires before it loads a variant. Exposed for tests.
DeviceCode check_device_arch(const ManifestVariant& variant, int device_major, int device_minor);

// The compute capability of the calling thread's device (device 0's primary context when it has
// none), as kernel() reads it; `specific` is false. Throws Error(no_driver / no_device).
Arch current_device_arch();

}  // namespace aotinfer
