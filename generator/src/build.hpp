// Writing a package's build tree and turning built fatbins into a sealed package.
//
//   <out>/src/<uri>.cu              one translation unit per variant
//   <out>/build.ninja               nvcc -> package/kernels/<uri>.fatbin, then seal
//   <out>/variants.json             the planned manifest (no sizes or hashes yet)
//   <out>/package/manifest.json     written by seal from the built fatbins
//   <out>/build-report.json         compile seconds and bytes per variant (written by seal)
//   <out>/.aotinfer-outputs         every path the generator and its build wrote: the only
//                                   files it will ever delete
#pragma once
#include <cstddef>
#include <filesystem>
#include <vector>

#include "aotinfer/manifest.hpp"
#include "emit.hpp"
#include "schema.hpp"
#include "spec.hpp"

namespace aotinfer::gen {

struct GenerateResult {
  Manifest plan;
  std::size_t written = 0;    // files whose content changed
  std::size_t unchanged = 0;  // files left untouched (same content)
  std::size_t removed = 0;    // stale outputs of an earlier run, deleted
};

// Takes the output folder's lock (a POSIX record lock on <out>/.aotinfer-lock) and keeps it
// until this process exits, so two builds never write one folder at once: a second process is
// refused with Error(io_error) naming the holder's pid, as the kernel reports it. Taking it again in the same
// process is a no-op. The lock is not inherited by ninja or compilers. build, generate, seal and
// merge take it; the seal step of a build's own ninja runs inside that build's lock (the build
// exports its pid to ninja).
void lock_output_dir(const std::filesystem::path& out_dir);

// Runs `command` (execvp; returns only by throwing) holding a read lock on out_dir's lock file:
// the compile steps of build.ninja, so that a bare `ninja -C out` and a build of the same folder
// refuse each other as two builds do, while the compiles of one ninja run side by side. Inside
// a build's own ninja it runs under the build's lock.
[[noreturn]] void exec_locked(const std::filesystem::path& out_dir, char* const* command);

// Locks out_dir (lock_output_dir), then writes the build tree. When the package is about to
// change, the sealed package/manifest.json is removed first (seal writes it back last), so an
// interrupted build leaves no manifest describing missing or half-built files.
// `extra_files` (relative path, content) are written and tracked like the generated ones (a
// shard build's shard.json).
GenerateResult generate_package(const Spec& spec, const std::vector<FamilySchema>& families,
                                const std::filesystem::path& out_dir, const NinjaOptions& ninja,
                                const std::vector<std::pair<std::string, std::string>>& extra_files = {});

// Hashes every planned fatbin, reads the archs it holds, and writes package/manifest.json
// (only when its content changes). Throws Error when a fatbin is missing or lacks a spec arch.
Manifest seal_package(const std::filesystem::path& out_dir);

// build-report.json beside package/: per-variant compile seconds (from ninja's log) and fatbin
// bytes, slowest first, with totals. Outside the package, so packages stay reproducible.
void write_build_report(const std::filesystem::path& out_dir, const Manifest& manifest);

// Parallel jobs for nvcc: one per core, but no more than free memory allows (~1.5 GiB each).
int default_jobs();

// Runs ninja in out_dir with a progress line per step (done/total, elapsed, ETA); returns
// ninja's exit status. When ninja has work to do, the sealed manifest is removed first.
int run_ninja(const std::filesystem::path& out_dir, int jobs);

}  // namespace aotinfer::gen
