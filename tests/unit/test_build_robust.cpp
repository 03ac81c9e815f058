// Builds under stress, with nvcc (no GPU): two builds of one output folder at once, builds killed
// (SIGKILL of the whole aotinfer-gen process tree) at many points, and foreign files in the
// output folder. The spec is one merge_state variant for one arch, so a build takes about a
// second; the kill points are fractions of a measured build. Tagged [slow].
#include "catch.hpp"

#include "test_util.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <tuple>
#include <unistd.h>
#include <vector>

#include "aotinfer/files.hpp"
#include "aotinfer/package.hpp"

#ifdef AOTINFER_GEN_EXE

namespace fs = std::filesystem;
using aotinfer::Error;
using aotinfer::ErrorCode;
using aotinfer::Package;
using aotinfer::read_file;
using aotinfer::write_file_atomic;
using aotinfer::test::TempDir;
using aotinfer_test::Contains;

namespace {

// One merge_state variant for sm_80: a build of a few seconds at most.
std::string tiny_spec(int head_dim) {
  return R"({"format": 1, "package": {"name": "tiny", "version": "0.1.0"}, "archs": ["sm_80"],
  "families": {"merge_state": {"matrix": {"dtype": "f16", "head_dim": )" +
         std::to_string(head_dim) + "}}}}\n";
}

// aotinfer-gen build SPEC -o OUT -j 1 as a child in its own process group, output to `log`;
// without a compiler cache, so that every build really compiles and a kill lands inside it.
pid_t spawn_build(const fs::path& spec, const fs::path& out, const fs::path& log) {
  const std::vector<std::string> args = {AOTINFER_GEN_EXE, "build", spec.string(), "-o", out.string(), "-j", "1",
                                         "--launcher", "none"};
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {  // only async-signal-safe calls until exec
    ::setpgid(0, 0);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  REQUIRE(pid > 0);
  ::setpgid(pid, pid);
  return pid;
}

// The exit status of a child, or 128 + signal.
int wait_child(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int build(const fs::path& spec, const fs::path& out, const fs::path& log) { return wait_child(spawn_build(spec, out, log)); }

// Every process whose parent chain leads to `root` (ninja puts its jobs in process groups of
// their own, so killing root's group would leave nvcc running).
std::set<pid_t> descendants(pid_t root) {
  std::map<pid_t, pid_t> parent;
  if (DIR* proc = ::opendir("/proc")) {
    while (dirent* e = ::readdir(proc)) {
      const pid_t pid = std::atoi(e->d_name);
      if (pid <= 0) continue;
      std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
      std::string line;
      if (!std::getline(stat, line)) continue;
      const auto close = line.rfind(')');  // the command name may hold spaces
      if (close == std::string::npos) continue;
      char state = 0;
      int ppid = 0;
      if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) == 2) parent[pid] = ppid;
    }
    ::closedir(proc);
  }
  std::set<pid_t> tree;
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& [pid, ppid] : parent)
      if ((ppid == root || tree.count(ppid)) && tree.insert(pid).second) grew = true;
  }
  return tree;
}

// SIGKILL of root and everything it started: the tree is stopped first (until no new process
// appears), so nothing forks past the kill.
void kill_tree(pid_t root) {
  std::set<pid_t> stopped = {root};
  ::kill(root, SIGSTOP);
  for (int round = 0; round < 50; ++round) {
    bool fresh = false;
    for (pid_t pid : descendants(root))
      if (stopped.insert(pid).second) {
        ::kill(pid, SIGSTOP);
        fresh = true;
      }
    if (!fresh) break;
  }
  for (pid_t pid : stopped) ::kill(pid, SIGKILL);
  wait_child(root);
}

std::string sha_of_spec_in(const fs::path& package) { return Package::open(package).manifest().spec_sha256; }

// What the runtime sees in `package`: nothing (no manifest, said clearly) or a complete package
// whose every file matches the manifest, of one of the `known` specs. Returns "unsealed" or
// "complete".
std::string runtime_view(const fs::path& package, const std::set<std::string>& known) {
  try {
    const Package pkg = Package::open(package);
    const auto problems = pkg.verify();
    INFO((problems.empty() ? std::string() : problems.front()));
    CHECK(problems.empty());
    CHECK(known.count(pkg.manifest().spec_sha256) == 1);
    return "complete";
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.code() == ErrorCode::not_found);
    CHECK_THAT(e.what(), Contains("manifest.json does not exist") && Contains("run it again"));
    return "unsealed";
  }
}

std::map<std::string, std::string> files_under(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = read_file(e.path());
  return files;
}

// Holds <out>/.aotinfer-lock as a build would (a write record lock on all of it) until the
// returned descriptor is closed.
int hold_build_lock(const fs::path& out) {
  const int fd = ::open((out / ".aotinfer-lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  struct flock whole = {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;
  REQUIRE(::fcntl(fd, F_SETLK, &whole) == 0);
  return fd;
}

}  // namespace

TEST_CASE("a build refuses an output folder another build holds, naming its pid", "[build][slow]") {
  TempDir tmp;
  const fs::path spec = tmp.path / "tiny.json", out = tmp.path / "out";
  write_file_atomic(spec, tiny_spec(64));
  fs::create_directories(out);

  const int fd = hold_build_lock(out);
  const std::string pid = std::to_string(::getpid());

  CHECK(build(spec, out, tmp.path / "refused.log") == 1);
  const std::string refused = read_file(tmp.path / "refused.log");
  CHECK_THAT(refused, Contains(out.string() + ": expected no other build of this output folder, got one running") &&
                          Contains("(pid " + pid + " holds " + (out / ".aotinfer-lock").string()) &&
                          Contains("wait for it to finish"));
  CHECK_FALSE(fs::exists(out / "build.ninja"));  // refused before writing anything
  CHECK_FALSE(fs::exists(out / "package"));

  ::close(fd);  // released: the next build goes ahead
  CHECK(build(spec, out, tmp.path / "ok.log") == 0);
  CHECK(Package::open(out / "package").verify().empty());
}

TEST_CASE("seal, merge and a bare ninja run take the build lock too", "[build][slow]") {
  TempDir tmp;
  const fs::path spec = tmp.path / "tiny.json", out = tmp.path / "out", log = tmp.path / "step.log";
  write_file_atomic(spec, tiny_spec(64));
  // A shell command's exit status, its output in `log`.
  auto run = [&](const std::string& command) {
    const int status = std::system((command + " > '" + log.string() + "' 2>&1").c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  };
  const std::string gen = std::string("'") + AOTINFER_GEN_EXE + "'";
  REQUIRE(run(gen + " generate '" + spec.string() + "' -o '" + out.string() + "' --launcher none") == 0);

  const int fd = hold_build_lock(out);
  const std::string busy = "expected no other build of this output folder, got one running (pid " + std::to_string(::getpid());

  CHECK(run("ninja -C '" + out.string() + "'") != 0);  // its compile refuses: nothing compiled
  CHECK_THAT(read_file(log), Contains(busy));
  CHECK_FALSE(fs::exists(out / "package" / "manifest.json"));
  CHECK(run(gen + " seal '" + out.string() + "'") == 1);
  CHECK_THAT(read_file(log), Contains(busy));
  CHECK(run(gen + " merge -o '" + (tmp.path / "merged").string() + "' '" + out.string() + "'") == 1);
  CHECK_THAT(read_file(log), Contains(busy));

  ::close(fd);  // released: a bare ninja run compiles and seals
  REQUIRE(run("ninja -C '" + out.string() + "'") == 0);
  CHECK(Package::open(out / "package").verify().empty());
  // Its compiles held a read lock each, which the build's exclusive lock waits out: none is left.
  CHECK(build(spec, out, tmp.path / "after.log") == 0);
}

TEST_CASE("a build from another templates folder recompiles every fatbin, and the same one again compiles nothing",
          "[build][slow]") {
  TempDir tmp;
  const fs::path spec = tmp.path / "tiny.json", out = tmp.path / "out", log = tmp.path / "step.log";
  write_file_atomic(spec, tiny_spec(64));
  // Two copies of the templates, equal but for their folder: only the compile's command differs.
  for (const char* copy : {"a", "b"})
    fs::copy(fs::path(AOTINFER_SOURCE_DIR) / "templates", tmp.path / copy, fs::copy_options::recursive);
  auto build_from = [&](const char* templates) {
    const std::string command = std::string("'") + AOTINFER_GEN_EXE + "' build '" + spec.string() + "' -o '" +
                                out.string() + "' --templates '" + (tmp.path / templates).string() +
                                "' --launcher none -j 1 > '" + log.string() + "' 2>&1";
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  };
  REQUIRE(build_from("a") == 0);
  REQUIRE(build_from("b") == 0);
  CHECK_THAT(read_file(log), Contains("nvcc merge_state"));
  REQUIRE(build_from("b") == 0);
  CHECK_THAT(read_file(log), Contains("no work to do"));
  CHECK(Package::open(out / "package").verify().empty());
}

TEST_CASE("two builds of one spec into one folder at once give one package or a clear refusal", "[build][slow]") {
  TempDir tmp;
  const fs::path out = tmp.path / "out";
  int refusals = 0;
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    // Round 0 builds from nothing, round 1 a changed spec over a package, round 2 an unchanged one.
    const fs::path spec = tmp.path / ("tiny" + std::to_string(round) + ".json");
    write_file_atomic(spec, tiny_spec(round == 0 ? 64 : 128));
    const fs::path log_a = tmp.path / "a.log", log_b = tmp.path / "b.log";
    const pid_t a = spawn_build(spec, out, log_a);
    const pid_t b = spawn_build(spec, out, log_b);
    const int status_a = wait_child(a), status_b = wait_child(b);
    const std::string text_a = read_file(log_a), text_b = read_file(log_b);
    INFO(text_a << "\n---\n" << text_b);
    CHECK((status_a == 0 || status_b == 0));
    for (auto [status, text, other] : {std::tuple{status_a, text_a, b}, {status_b, text_b, a}}) {
      if (status == 0) continue;
      ++refusals;
      CHECK(status == 1);
      CHECK_THAT(text, Contains("expected no other build of this output folder, got one running (pid " +
                                std::to_string(other) + " holds"));
    }
    const Package pkg = Package::open(out / "package");
    CHECK(pkg.verify().empty());
    CHECK(pkg.manifest().variants.size() == 1);
    CHECK(pkg.manifest().variants[0].key.uri() == "merge_state.dtype-f16.head_dim-" + std::string(round == 0 ? "64" : "128"));
  }
  // With builds of about a second started together, at least one round overlaps.
  CHECK(refusals >= 1);
}

TEST_CASE("a build killed at any point leaves no package the runtime would take, and the next build finishes it",
          "[build][slow]") {
  TempDir tmp;
  const fs::path out = tmp.path / "out";
  const fs::path spec[2] = {tmp.path / "a.json", tmp.path / "b.json"};
  write_file_atomic(spec[0], tiny_spec(64));
  write_file_atomic(spec[1], tiny_spec(128));

  // Both complete once, to learn their spec hashes and how long a build of one variant takes.
  REQUIRE(build(spec[1], out, tmp.path / "first.log") == 0);
  const std::string sha_b = sha_of_spec_in(out / "package");
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(build(spec[0], out, tmp.path / "second.log") == 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string sha_a = sha_of_spec_in(out / "package");
  REQUIRE(sha_a != sha_b);
  const std::set<std::string> known = {sha_a, sha_b};

  // Each round switches spec, so the killed build always has work: generate, remove the stale
  // fatbin, compile, seal. The kill lands at a fraction of a full build.
  std::map<std::string, int> seen;
  int which = 1;
  for (double fraction : {0.02, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2}) {
    INFO("killed at " << fraction << " of " << seconds << " s");
    const pid_t pid = spawn_build(spec[which], out, tmp.path / "killed.log");
    std::this_thread::sleep_for(std::chrono::duration<double>(fraction * seconds));
    kill_tree(pid);
    ++seen[runtime_view(out / "package", known)];

    // The next build of the same spec finishes it.
    const int status = build(spec[which], out, tmp.path / "finish.log");
    INFO(read_file(tmp.path / "finish.log"));
    REQUIRE(status == 0);
    const Package pkg = Package::open(out / "package");
    CHECK(pkg.verify().empty());
    CHECK(pkg.manifest().spec_sha256 == (which ? sha_b : sha_a));
    which = 1 - which;
  }
  INFO("unsealed " << seen["unsealed"] << ", complete " << seen["complete"]);
  CHECK(seen["unsealed"] >= 1);  // some kill landed inside a build
}

TEST_CASE("rebuilding with a changed spec never deletes a file the generator did not write, and removes its leftover temporaries",
          "[build][slow]") {
  TempDir tmp;
  const fs::path out = tmp.path / "out";
  const fs::path spec = tmp.path / "tiny.json";
  // Files of the user's, some there before the first build.
  const std::map<std::string, std::string> early = {{"notes.txt", "mine"}, {"package/README", "about my package"}};
  for (const auto& [rel, content] : early) write_file_atomic(out / rel, content);

  write_file_atomic(spec, tiny_spec(64));
  REQUIRE(build(spec, out, tmp.path / "one.log") == 0);
  const std::string old_fatbin = "package/kernels/merge_state.dtype-f16.head_dim-64.fatbin";
  REQUIRE(fs::exists(out / old_fatbin));

  std::map<std::string, std::string> foreign = early;
  for (const auto& [rel, content] : std::map<std::string, std::string>{
           {"src/extra.cu", "// mine"},
           {"package/kernels/mine.fatbin", "my own code"},
           {"package/kernels/merge_state.dtype-f16.head_dim-256.fatbin", "named like an output, never written by it"},
           {"package/kernels/merge_state.dtype-f16.head_dim-64.fatbin.bak", "a backup"},
           {"package/kernels/sub/deep.bin", "deeper"},
           {"package/manifest.json.orig", "{}"}}) {
    write_file_atomic(out / rel, content);
    foreign[rel] = content;
  }

  // Temporaries a killed atomic write of the generator's left beside its outputs, and the
  // user's look-alikes beside files it does not own.
  const std::vector<std::string> owned_temps = {"package/manifest.json.tmp4242", "build.ninja.tmp77",
                                                ".aotinfer-outputs.tmp9", "src/merge_state.dtype-f16.head_dim-64.cu.tmp123"};
  for (const auto& rel : owned_temps) write_file_atomic(out / rel, "half-written");
  for (const auto& [rel, content] : std::map<std::string, std::string>{
           {"notes.txt.tmp12", "mine"}, {"package/kernels/mine.fatbin.tmp3", "mine"}, {"build.ninja.tmpfile", "mine"}}) {
    write_file_atomic(out / rel, content);
    foreign[rel] = content;
  }

  write_file_atomic(spec, tiny_spec(128));  // the head_dim-64 fatbin becomes stale
  REQUIRE(build(spec, out, tmp.path / "two.log") == 0);
  CHECK_FALSE(fs::exists(out / old_fatbin));  // the generator's own stale output goes
  for (const auto& rel : owned_temps) {
    INFO(rel);
    CHECK_FALSE(fs::exists(out / rel));  // and so do its leftover temporaries
  }
  const auto files = files_under(out);
  for (const auto& [rel, content] : foreign) {
    INFO(rel);
    REQUIRE(files.count(rel) == 1);
    CHECK(files.at(rel) == content);
  }
  const Package pkg = Package::open(out / "package");
  CHECK(pkg.verify().empty());
  CHECK(pkg.manifest().variants.size() == 1);
}

#endif
