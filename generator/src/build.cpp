#include "build.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unistd.h>

#include "aotinfer/error.hpp"
#include "aotinfer/fatbin.hpp"
#include "aotinfer/files.hpp"
#include "aotinfer/sha256.hpp"
#include "resources.hpp"

namespace aotinfer::gen {

namespace fs = std::filesystem;

namespace {

constexpr const char* kOutputsList = ".aotinfer-outputs";

const FamilySchema& family_of(const std::vector<FamilySchema>& families, const std::string& name) {
  for (const auto& f : families)
    if (f.name == name) return f;
  throw std::logic_error("no schema for family " + name);
}

std::set<std::string> read_outputs(const fs::path& out_dir) {
  fs::path list = out_dir / kOutputsList;
  if (!fs::exists(list)) return {};
  auto j = nlohmann::json::parse(read_file(list), nullptr, false);
  if (!j.is_array()) throw Error(ErrorCode::io_error, list.string() + " is damaged; delete " + out_dir.string() + " and generate again");
  return j.get<std::set<std::string>>();
}

constexpr const char* kLockFile = ".aotinfer-lock";
constexpr const char* kManifest = "package/manifest.json";
// The pid of a build that holds its folder's lock, exported to the ninja it runs: the seal and
// compile steps of that ninja run inside the build's lock rather than against it.
constexpr const char* kLockHolderEnv = "AOTINFER_LOCK_HOLDER";

// Output folders this process has locked (canonical path -> lock file descriptor).
std::mutex locks_mutex;
std::map<std::string, int> locks_held;

// A path from the outputs list is only ever a plain relative path inside out_dir.
bool is_inside(const std::string& rel) {
  fs::path p(rel);
  return !rel.empty() && p.is_relative() && std::none_of(p.begin(), p.end(), [](const fs::path& part) { return part == ".."; });
}

// Temporaries of atomic writes (write_file_atomic: <path>.tmp<pid>) that a killed run left
// beside paths this generator tracks. Called with the folder locked, so no run of ours is
// writing one now; a temporary beside any other file is the user's and stays.
void remove_leftover_temps(const fs::path& out_dir, std::set<std::string> owners) {
  owners.insert(kOutputsList);
  std::set<fs::path> dirs;
  for (const auto& rel : owners)
    if (is_inside(rel)) dirs.insert(fs::path(rel).parent_path());
  for (const fs::path& dir : dirs) {
    std::error_code ec;
    for (fs::directory_iterator it(out_dir / dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      const std::size_t at = name.rfind(".tmp");
      if (at == std::string::npos || at + 4 == name.size() ||
          !std::all_of(name.begin() + at + 4, name.end(), [](unsigned char c) { return std::isdigit(c); }))
        continue;
      if (!owners.count((dir / name.substr(0, at)).generic_string())) continue;
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

// The sealed manifest at `path` describes the planned variants (it may differ only in what seal
// fills in: sizes, hashes, and the archs, PTX and resources read from each fatbin).
bool matches_plan(const fs::path& path, const Manifest& plan) {
  if (!fs::exists(path)) return true;  // nothing sealed: nothing to take back
  try {
    Manifest sealed = Manifest::load(path);
    for (auto& v : sealed.variants) {
      v.size = 0;
      v.sha256.clear();
      v.archs.clear();
      v.ptx.clear();
      v.resources.clear();
    }
    return sealed == plan;
  } catch (const Error&) {
    return false;
  }
}

// Removes the sealed manifest (only ever one this generator wrote: callers check the outputs
// list), so the package reads as "not built" until seal writes it again.
void unseal(const fs::path& out_dir) {
  std::error_code ec;
  fs::remove(out_dir / kManifest, ec);
  if (ec) throw Error(ErrorCode::io_error, "cannot remove " + (out_dir / kManifest).string() + ": " + ec.message());
}

// The lock file of out_dir, opened (created when missing); without O_CLOEXEC when the lock must
// outlive an exec (exec_locked).
int open_lock(const fs::path& out_dir, bool cloexec) {
  const fs::path lock = out_dir / kLockFile;
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | (cloexec ? O_CLOEXEC : 0), 0644);
  if (fd < 0) throw Error(ErrorCode::io_error, "cannot open the lock file " + lock.string() + ": " + std::strerror(errno));
  return fd;
}

// Whether the build that runs this process (through ninja) holds out_dir's lock for writing.
bool held_by_our_build(int fd) {
  const char* ours = std::getenv(kLockHolderEnv);
  if (!ours) return false;
  struct flock probe = {};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  return ::fcntl(fd, F_GETLK, &probe) == 0 && probe.l_type == F_WRLCK && std::to_string(probe.l_pid) == ours;
}

// Takes the lock of `fd` (F_WRLCK: a build, seal or merge; F_RDLCK: one compile of a bare ninja
// run, which may run beside the others) or throws naming the process that holds it.
void take_lock(const fs::path& out_dir, int fd, short type) {
  for (;;) {
    struct flock whole = {};
    whole.l_type = type;
    whole.l_whence = SEEK_SET;  // l_start = l_len = 0: the whole file
    if (::fcntl(fd, F_SETLK, &whole) == 0) return;
    const int err = errno;
    const fs::path lock = out_dir / kLockFile;
    if (err != EACCES && err != EAGAIN) {
      ::close(fd);
      throw Error(ErrorCode::io_error, "cannot lock " + lock.string() + ": " + std::strerror(err));
    }
    if (::fcntl(fd, F_GETLK, &whole) != 0 || whole.l_type == F_UNLCK) continue;  // released meanwhile: try again
    ::close(fd);
    // l_pid is 0 when the holder lives in another pid namespace (a container).
    const std::string holder = whole.l_pid > 0 ? std::to_string(whole.l_pid) : "unknown";
    throw Error(ErrorCode::io_error, out_dir.string() +
                                         ": expected no other build of this output folder, got one running (pid " + holder +
                                         " holds " + lock.string() + "); wait for it to finish, or stop it, and run again");
  }
}

}  // namespace

void lock_output_dir(const fs::path& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw Error(ErrorCode::io_error, "cannot create the output folder " + out_dir.string() + ": " + ec.message());
  const std::string key = fs::canonical(out_dir).string();
  std::lock_guard guard(locks_mutex);
  if (locks_held.count(key)) return;
  // A POSIX record lock, not flock: the kernel reports its holder's pid (F_GETLK), so a refused
  // build names it without reading a pid file the holder may not have written yet. Record locks
  // are not inherited across fork (ninja, nvcc and a compiler cache's server never keep it) and
  // this process opens the lock file nowhere else, so no close() elsewhere drops it.
  const int fd = open_lock(out_dir, /*cloexec=*/true);
  if (!held_by_our_build(fd)) take_lock(out_dir, fd, F_WRLCK);  // (the seal step of our build's ninja: held)
  locks_held.emplace(key, fd);
}

void exec_locked(const fs::path& out_dir, char* const* command) {
  // The read lock stays with this process through exec (its descriptor stays open), so the
  // compiler holds it until it exits; every compile of a bare ninja run holds one at once.
  const int fd = open_lock(out_dir, /*cloexec=*/false);
  if (!held_by_our_build(fd)) take_lock(out_dir, fd, F_RDLCK);
  ::execvp(command[0], command);
  throw Error(ErrorCode::io_error, std::string("cannot run ") + command[0] + ": " + std::strerror(errno));
}

GenerateResult generate_package(const Spec& spec, const std::vector<FamilySchema>& families, const fs::path& out_dir,
                                const NinjaOptions& ninja, const std::vector<std::pair<std::string, std::string>>& extra_files) {
  GenerateResult result;
  result.plan = package_plan(spec, families);

  // Everything this run writes, and everything its build will write.
  std::vector<std::pair<std::string, std::string>> files;  // relative path, content
  for (const auto& v : result.plan.variants)
    files.emplace_back("src/" + v.key.uri() + ".cu", variant_source(family_of(families, v.key.family), v.key));
  files.emplace_back("build.ninja", build_ninja(result.plan, spec, ninja));
  files.emplace_back("nvcc-flags.txt", nvcc_flags_text(spec));
  files.emplace_back("variants.json", result.plan.dump());
  files.insert(files.end(), extra_files.begin(), extra_files.end());

  std::set<std::string> outputs;
  for (const auto& [rel, _] : files) outputs.insert(rel);
  for (const auto& v : result.plan.variants) {
    outputs.insert("package/" + v.file);
    outputs.insert("package/" + v.file + ".d");
  }
  outputs.insert("package/manifest.json");
  outputs.insert("build-report.json");

  lock_output_dir(out_dir);
  const std::set<std::string> previous = read_outputs(out_dir);

  // The sealed manifest is the package's commit mark: it goes before any file it describes
  // changes (here, and in run_ninja before a compile), and seal writes it back last. An
  // interrupted build so never leaves a manifest naming files that are gone or half-built.
  if (previous.count(kManifest) && !matches_plan(out_dir / kManifest, result.plan)) unseal(out_dir);

  // Every path this run or its build may write is tracked before any is written, so an
  // interrupted run leaves nothing of its own untracked (the next run removes what is stale).
  std::set<std::string> tracked = previous;
  tracked.insert(outputs.begin(), outputs.end());
  remove_leftover_temps(out_dir, tracked);
  write_if_different(out_dir / kOutputsList, nlohmann::json(tracked).dump(1) + "\n");

  // Stale outputs next: a variant that left the spec must not linger in the package.
  for (const auto& rel : previous) {
    if (outputs.count(rel) || !is_inside(rel)) continue;
    std::error_code ec;
    if (fs::remove(out_dir / rel, ec)) ++result.removed;
  }
  for (const auto& [rel, content] : files) {
    if (write_if_different(out_dir / rel, content)) ++result.written;
    else ++result.unchanged;
  }
  nlohmann::json list(outputs);
  write_if_different(out_dir / kOutputsList, list.dump(1) + "\n");
  return result;
}

namespace {

// Compile seconds of each output, from ninja's log (format 5: start, end, mtime, path, hash;
// the last line of a path wins).
std::map<std::string, double> ninja_seconds(const fs::path& out_dir) {
  std::map<std::string, double> seconds;
  std::ifstream log(out_dir / ".ninja_log");
  for (std::string line; std::getline(log, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    long start = 0, end = 0, mtime = 0;
    std::string path;
    if (fields >> start >> end >> mtime >> path) seconds[path] = (end - start) / 1000.0;
  }
  return seconds;
}

}  // namespace

void write_build_report(const fs::path& out_dir, const Manifest& m) {
  const auto seconds = ninja_seconds(out_dir);
  struct Row {
    std::string uri;
    double seconds;
    std::uint64_t bytes;
  };
  std::vector<Row> rows;
  double total_seconds = 0;
  std::uint64_t total_bytes = 0;
  for (const auto& v : m.variants) {
    auto it = seconds.find("package/" + v.file);
    rows.push_back({v.key.uri(), it == seconds.end() ? 0.0 : it->second, v.size});
    total_seconds += rows.back().seconds;
    total_bytes += v.size;
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
  nlohmann::ordered_json j = {{"package", m.package_name},
                              {"archs", m.archs},
                              {"variants", rows.size()},
                              {"compile_seconds", total_seconds},
                              {"bytes", total_bytes},
                              {"largest_first", nlohmann::ordered_json::array()}};
  for (const auto& r : rows)
    j["largest_first"].push_back({{"uri", r.uri}, {"compile_seconds", r.seconds}, {"bytes", r.bytes}});
  write_file_atomic(out_dir / "build-report.json", j.dump(2) + "\n");
  std::printf("aotinfer-gen: build report %s: %zu variants, %.1f s of compiles, %.2f MiB", (out_dir / "build-report.json").c_str(),
              rows.size(), total_seconds, double(total_bytes) / (1 << 20));
  if (!rows.empty()) std::printf("; slowest %s (%.1f s)", rows.front().uri.c_str(), rows.front().seconds);
  std::printf("\n");
}

Manifest seal_package(const fs::path& out_dir) {
  if (fs::is_directory(out_dir)) lock_output_dir(out_dir);  // inside a build's own ninja: that build's lock
  fs::path plan_path = out_dir / "variants.json";
  Manifest m = Manifest::load(plan_path);
  std::vector<std::string> problems;
  for (auto& v : m.variants) {
    fs::path file = out_dir / "package" / v.file;
    std::string bytes = read_file(file);
    v.size = bytes.size();
    v.sha256 = sha256_hex(bytes);
    try {
      v.archs = fatbin_sass_archs(bytes);
      v.ptx = fatbin_ptx_archs(bytes);
      v.resources = read_resources(bytes, v.entries);
    } catch (const Error& e) {
      throw Error(ErrorCode::corrupt_package, file.string() + ": " + e.what());
    }
    const std::vector<std::string> ptx = m.ptx.empty() ? std::vector<std::string>{} : std::vector<std::string>{m.ptx};
    if (v.archs != m.archs || v.ptx != ptx)
      throw Error(ErrorCode::corrupt_package, file.string() + " holds code for " + nlohmann::json(v.archs).dump() + " and PTX " +
                                                  nlohmann::json(v.ptx).dump() + " but the spec asks for " +
                                                  nlohmann::json(m.archs).dump() + " and PTX " + nlohmann::json(ptx).dump());
    for (auto& problem : resource_problems(v)) problems.push_back(std::move(problem));
  }
  if (!problems.empty()) {
    std::string message = "this package holds code that cannot launch on a chip it runs on (" + std::to_string(problems.size()) +
                          (problems.size() == 1 ? " case" : " cases") + "):";
    for (const auto& p : problems) message += "\n  " + p;
    message += "\nList the chip's own arch in the spec's \"archs\" (its code is then built for it), and give the template "
               "smaller tiles for that arch if it still does not fit. The package was not sealed.";
    throw Error(ErrorCode::unsupported_arch, message);
  }
  write_if_different(out_dir / "package" / "manifest.json", m.dump());
  write_build_report(out_dir, m);
  return m;
}

int default_jobs() {
  long cores = std::max(1u, std::thread::hardware_concurrency());
  long available_kib = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    long value = 0;
    std::string unit;
    meminfo >> value >> unit;
    if (key == "MemAvailable:") available_kib = value;
  }
  constexpr long kPerJobKib = 1536L * 1024;  // an nvcc of a large attention kernel, several archs
  long by_memory = available_kib > 0 ? std::max(1L, available_kib / kPerJobKib) : cores;
  return int(std::min(cores, by_memory));
}

int run_ninja(const fs::path& out_dir, int jobs) {
  // A compile is about to replace fatbins that the sealed manifest describes: take the manifest
  // back first (see generate_package). `ninja -n` only plans; "no work to do" keeps it.
  if (read_outputs(out_dir).count(kManifest) && fs::exists(out_dir / kManifest)) {
    std::string plan;
    if (FILE* dry = ::popen(("ninja -C '" + out_dir.string() + "' -n 2>&1").c_str(), "r")) {
      char buffer[4096];
      while (std::size_t n = std::fread(buffer, 1, sizeof buffer, dry)) plan.append(buffer, n);
      ::pclose(dry);
    }
    if (plan.find("no work to do") == std::string::npos) unseal(out_dir);
  }
  // ninja prints "[done/total elapsed] ..." per step; an ETA from the rate so far is added.
  std::string command = std::string(kLockHolderEnv) + "=" + std::to_string(::getpid()) + " NINJA_STATUS='[%f/%t %es] ' ninja -C '" +
                        out_dir.string() + "' -j " + std::to_string(jobs) + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return 127;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe)) {
    std::string line = buffer;
    int done = 0, total = 0;
    double elapsed = 0;
    if (std::sscanf(line.c_str(), "[%d/%d %lfs]", &done, &total, &elapsed) == 3 && done > 0 && done < total) {
      const auto close = line.find(']');
      const double eta = elapsed / done * (total - done);
      char note[32];
      std::snprintf(note, sizeof note, " ETA %.0fs", eta);
      line.insert(close, note);
    }
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
  }
  const int status = ::pclose(pipe);
  if (status == -1) return 127;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace aotinfer::gen
