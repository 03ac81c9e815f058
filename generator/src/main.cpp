// aotinfer-gen: spec files -> kernel packages. `aotinfer-gen help` lists the commands.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "aotinfer/error.hpp"
#include "aotinfer/files.hpp"
#include "build.hpp"
#include "json_schema.hpp"
#include "scanner.hpp"
#include "shard.hpp"
#include "spec.hpp"

namespace fs = std::filesystem;
using namespace aotinfer;
using namespace aotinfer::gen;

namespace {

constexpr const char* kUsage = R"(usage: aotinfer-gen <command> [options]

commands:
  list SPEC              validate SPEC and print its variants and their count (writes nothing)
  generate SPEC          write sources, build.ninja and the planned manifest
  build SPEC             generate, then compile every variant and seal the package
  families               print the kernel families and their axes, read from the templates
  schema                 print the JSON Schema of spec files (-o specs/schema.json to write it)
  merge -o OUT DIR...    join sealed shard builds (--shard) into OUT/package, byte-identical
                         to an unsharded build of the same spec
  seal DIR               hash DIR's built fatbins and write DIR/package/manifest.json
                         (build.ninja runs this; you rarely need it)
  locked DIR -- CMD...   run CMD holding DIR's build lock beside other compiles (build.ninja
                         runs its compiles so: a bare `ninja -C DIR` and a build exclude each other)

options:
  -o, --out PATH         output folder (generate/build: default generated/<package name>;
                         schema: a file)
  -j, --jobs N           parallel compiles (build: default from cores and free memory)
  --json                 machine-readable output (list, families)
  --templates DIR        kernel templates (default: $AOTINFER_TEMPLATES or the source tree's)
  --cuda DIR             CUDA toolkit (default: $CUDA_HOME or )" AOTINFER_DEFAULT_CUDA_HOME R"()
  --launcher CMD         compiler launcher for nvcc (default: $AOTINFER_LAUNCHER, else ccache
                         when it is on PATH; "none": no launcher)
  --archs A,B            build only these of the spec's archs (per-arch packages; the spec's
                         PTX stays); the default output folder becomes generated/<package name>-<archs>
  --shard I/N            generate/build shard I of N (balanced by estimated compile cost); the
                         default output folder becomes generated/<package name>-shard-I-of-N
  --lineinfo             kernels carry source line information, for compute-sanitizer and ncu
                         (optimised as without it); the default output folder gains the suffix -lineinfo
)";

struct Options {
  std::string command;
  std::vector<std::string> positional;
  std::optional<fs::path> out;
  int jobs = 0;
  bool json = false;
  fs::path templates;
  fs::path cuda;
  std::string launcher;
  std::vector<std::string> archs;  // subset of the spec's archs; empty: all
  std::optional<Shard> shard;
  bool lineinfo = false;
};

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// ccache when it is on PATH (./setup.sh installs it): a spec that gains one variant then
// compiles one variant, in any output folder. "" when there is none.
std::string default_launcher() {
  const char* path = std::getenv("PATH");
  for (std::string dirs = path ? path : ""; !dirs.empty();) {
    const std::size_t colon = dirs.find(':');
    const fs::path candidate = fs::path(dirs.substr(0, colon)) / "ccache";
    std::error_code ec;
    if (!candidate.parent_path().empty() && fs::is_regular_file(candidate, ec) &&
        (fs::status(candidate, ec).permissions() & fs::perms::owner_exec) != fs::perms::none)
      return "ccache";
    dirs = colon == std::string::npos ? "" : dirs.substr(colon + 1);
  }
  return "";
}

[[noreturn]] void usage_error(const std::string& what) {
  std::cerr << "aotinfer-gen: " << what << "\n\n" << kUsage;
  std::exit(2);
}

Options parse_args(int argc, char** argv) {
  Options o;
  o.templates = env_or("AOTINFER_TEMPLATES", AOTINFER_SOURCE_DIR "/templates");
  o.cuda = env_or("CUDA_HOME", AOTINFER_DEFAULT_CUDA_HOME);
  o.launcher = env_or("AOTINFER_LAUNCHER", default_launcher());
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) usage_error("no command given");
  o.command = args[0];
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) usage_error(a + " needs a value");
      return args[++i];
    };
    if (a == "-o" || a == "--out") o.out = value();
    else if (a == "-j" || a == "--jobs") {
      std::string v = value();
      try { o.jobs = std::stoi(v); } catch (...) { usage_error("--jobs takes a positive number, not '" + v + "'"); }
      if (o.jobs < 1) usage_error("--jobs takes a positive number, not '" + v + "'");
    }
    else if (a == "--json") o.json = true;
    else if (a == "--lineinfo") o.lineinfo = true;
    else if (a == "--templates") o.templates = value();
    else if (a == "--cuda") o.cuda = value();
    else if (a == "--launcher") o.launcher = value();
    else if (a == "--shard") {
      try { o.shard = Shard::parse(value()); } catch (const std::invalid_argument& e) { usage_error(e.what()); }
    }
    else if (a == "--archs") {
      std::string list = value();
      for (std::size_t start = 0; start <= list.size();) {
        std::size_t comma = list.find(',', start);
        std::string arch = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!arch.empty()) o.archs.push_back(arch);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      if (o.archs.empty()) usage_error("--archs takes a comma-separated list such as sm_80,sm_90");
    }
    else if (!a.empty() && a[0] == '-') usage_error("unknown option " + a);
    else o.positional.push_back(a);
  }
  if (o.launcher == "none") o.launcher.clear();
  return o;
}

std::vector<FamilySchema> scan(const Options& o) {
  if (!fs::is_directory(o.templates))
    throw ScanError(o.templates.string() + ": no such templates directory (set --templates or AOTINFER_TEMPLATES)");
  return scan_templates({.templates_dir = fs::absolute(o.templates), .cuda_home = o.cuda, .include_dirs = {}});
}

std::string spec_argument(const Options& o) {
  if (o.positional.size() != 1) usage_error(o.command + " takes one spec file");
  return o.positional[0];
}

// The spec, restricted to --archs when given (each must be one of the spec's), with --lineinfo.
Spec read_spec(const Options& o, const std::vector<FamilySchema>& families) {
  Spec spec = load_spec(spec_argument(o), families);
  spec.lineinfo = o.lineinfo;
  if (o.archs.empty()) return spec;
  std::string have;
  for (const auto& a : spec.archs) have += (have.empty() ? "" : ", ") + a;
  for (const auto& a : o.archs)
    if (std::find(spec.archs.begin(), spec.archs.end(), a) == spec.archs.end())
      throw SpecError("--archs " + a + " is not among the archs of " + spec.file + " (" + have + ")");
  spec.archs = o.archs;
  auto outside = [&](const std::string& a) { return std::find(spec.archs.begin(), spec.archs.end(), a) == spec.archs.end(); };
  std::erase_if(spec.sass_from_ptx, outside);
  for (auto& [family, archs] : spec.family_sass_from_ptx) std::erase_if(archs, outside);
  return spec;
}

fs::path out_dir(const Options& o, const Spec& spec) {
  if (o.out) return *o.out;
  std::string name = spec.package_name;
  for (const auto& a : o.archs) name += "-" + a;
  if (o.shard) name += "-shard-" + std::to_string(o.shard->index) + "-of-" + std::to_string(o.shard->count);
  if (o.lineinfo) name += "-lineinfo";
  return fs::path("generated") / name;
}

int cmd_list(const Options& o) {
  auto families = scan(o);
  Spec spec = read_spec(o, families);
  if (o.json) {
    nlohmann::ordered_json j = {{"package", spec.package_name}, {"version", spec.package_version},
                                {"archs", spec.archs}, {"count", spec.variants.size()}};
    j["variants"] = nlohmann::ordered_json::array();
    for (const auto& v : spec.variants) j["variants"].push_back(v.uri());
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  for (const auto& v : spec.variants) std::cout << v.uri() << "\n";
  std::cout << spec.variants.size() << " variants of " << spec.package_name << " " << spec.package_version
            << " for " << spec.archs.size() << " archs\n";
  return 0;
}

GenerateResult generate(const Options& o, const Spec& spec, const std::vector<FamilySchema>& families) {
  fs::path out = out_dir(o, spec);
  fs::path nvcc = o.cuda / "bin" / "nvcc";
  if (!fs::exists(nvcc)) throw Error(ErrorCode::not_found, nvcc.string() + " not found: install the CUDA toolkit or pass --cuda DIR");
  NinjaOptions ninja{.nvcc = fs::absolute(nvcc),
                     .templates_dir = fs::absolute(o.templates),
                     .generator = fs::canonical("/proc/self/exe"),
                     .launcher = o.launcher};
  // A shard builds its part of the spec and records which part (shard.json) for merge.
  Spec part = spec;
  std::vector<std::pair<std::string, std::string>> extra;
  if (o.shard) {
    part.variants = shard_variants(spec.variants, *o.shard);
    std::vector<std::string> uris;
    for (const auto& v : spec.variants) uris.push_back(v.uri());
    extra.emplace_back("shard.json", shard_info_json({*o.shard, spec.sha256, generator_id(), uris}));
  }
  GenerateResult r = generate_package(part, families, out, ninja, extra);
  std::cout << "aotinfer-gen: " << spec.package_name << ": " << r.plan.variants.size() << " variants in " << out.string()
            << " (" << r.written << " files written, " << r.unchanged << " unchanged, " << r.removed
            << " stale removed)\n";
  return r;
}

int cmd_generate(const Options& o) {
  auto families = scan(o);
  generate(o, read_spec(o, families), families);
  return 0;
}

int cmd_build(const Options& o) {
  auto families = scan(o);
  Spec spec = read_spec(o, families);
  generate(o, spec, families);
  int jobs = o.jobs ? o.jobs : default_jobs();
  std::cout << "aotinfer-gen: compiling with " << jobs << " parallel jobs for " << spec.archs.size() << " archs, "
            << (o.launcher.empty() ? std::string("no compiler cache (install ccache, or --launcher CMD)")
                                   : "through " + o.launcher)
            << "\n" << std::flush;
  auto start = std::chrono::steady_clock::now();
  int status = run_ninja(out_dir(o, spec), jobs);
  if (status != 0) {
    std::cerr << "aotinfer-gen: the build failed (ninja exit status " << status << "); the package was not sealed\n";
    return 1;
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("aotinfer-gen: package ready in %s (%.1f s)\n", (out_dir(o, spec) / "package").c_str(), seconds);
  return 0;
}

int cmd_families(const Options& o) {
  auto families = scan(o);
  if (o.json) {
    std::cout << to_json(families).dump(2) << "\n";
    return 0;
  }
  for (const auto& f : families) {
    std::cout << f.name << "  (" << f.cpp_name << ", " << f.where.str() << ")\n";
    for (const auto& a : f.axes) {
      std::string values;
      for (const auto& v : a.allowed) values += (values.empty() ? "" : " ") + v;
      std::cout << "  " << a.name << "  " << to_string(a.kind) << "  {" << values << "}";
      if (a.default_value) std::cout << "  default " << *a.default_value;
      if (a.follows) std::cout << "  default = " << *a.follows;
      std::cout << "\n";
    }
    for (const auto& e : f.entries) std::cout << "  entry " << e.name << "(" << e.params_type << ")\n";
  }
  return 0;
}

int cmd_schema(const Options& o) {
  std::string text = spec_json_schema(scan(o)).dump(2) + "\n";
  if (!o.out) {
    std::cout << text;
  } else if (write_if_different(*o.out, text)) {
    std::cout << "aotinfer-gen: wrote " << o.out->string() << "\n";
  }
  return 0;
}

int cmd_merge(const Options& o) {
  if (!o.out || o.positional.empty()) usage_error("merge takes -o OUT and the shard folders");
  std::vector<fs::path> dirs(o.positional.begin(), o.positional.end());
  Manifest m = merge_shards(dirs, *o.out);
  std::printf("aotinfer-gen: merged %zu shards: %zu variants in %s\n", dirs.size(), m.variants.size(),
              (*o.out / "package").c_str());
  return 0;
}

int cmd_seal(const Options& o) {
  if (o.positional.size() != 1) usage_error("seal takes the generated folder");
  Manifest m = seal_package(o.positional[0]);
  std::uint64_t bytes = 0;
  for (const auto& v : m.variants) bytes += v.size;
  std::printf("aotinfer-gen: sealed %zu variants, %.2f MiB\n", m.variants.size(), double(bytes) / (1 << 20));
  return 0;
}

}  // namespace

// `locked DIR -- CMD...`: its own arguments, which parse_args would read as options.
static int cmd_locked(int argc, char** argv) {
  if (argc < 5 || std::string(argv[3]) != "--") usage_error("locked takes DIR -- COMMAND [ARGS...]");
  try {
    exec_locked(argv[2], argv + 4);
  } catch (const std::exception& e) {
    std::cerr << "aotinfer-gen: error: " << e.what() << "\n";
    return 1;
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "locked") return cmd_locked(argc, argv);
  Options o = parse_args(argc, argv);
  const std::map<std::string, int (*)(const Options&)> commands = {
      {"list", cmd_list},         {"generate", cmd_generate}, {"build", cmd_build},
      {"families", cmd_families}, {"schema", cmd_schema},     {"seal", cmd_seal},
      {"merge", cmd_merge}};
  if (o.command == "help" || o.command == "--help" || o.command == "-h") {
    std::cout << kUsage;
    return 0;
  }
  auto it = commands.find(o.command);
  if (it == commands.end()) usage_error("unknown command '" + o.command + "'");
  try {
    return it->second(o);
  } catch (const std::exception& e) {
    // Spec and scan errors already start with file:line or file: pointer.
    std::cerr << "aotinfer-gen: error: " << e.what() << "\n";
    return 1;
  }
}
