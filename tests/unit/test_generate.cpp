// Generation: emitted text, write-if-different, stale-output removal, and a real package
// build of specs/ci.json through aotinfer-gen and nvcc (no GPU needed).
#include "catch.hpp"

#include "test_util.hpp"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>

#include "aotinfer/files.hpp"
#include "aotinfer/json.hpp"
#include "aotinfer/package.hpp"
#include "build.hpp"
#include "emit.hpp"
#include "json_schema.hpp"
#include "scanner.hpp"
#include "shard.hpp"
#include "spec.hpp"

namespace fs = std::filesystem;
using namespace aotinfer;
using namespace aotinfer::gen;
using aotinfer_test::Contains;

namespace {

using aotinfer::test::TempDir;

std::vector<FamilySchema> toy_families() {
  FamilySchema f;
  f.name = "toy";
  f.cpp_name = "aotinfer::toy";
  f.header = "toy.cuh";
  f.where = {"toy.cuh", 3};
  f.axes = {{"dtype", AxisKind::dtype, {"f16", "bf16"}, {}, {}, "", {"toy.cuh", 4}},
            {"mode", AxisKind::enumeration, {"plain", "fancy"}, "plain", {}, "aotinfer::Mode", {"toy.cuh", 5}},
            {"head_dim", AxisKind::integer, {"64", "128", "256"}, {}, {}, "int", {"toy.cuh", 6}}};
  f.entries = {{"run", "toy_params", {"toy.cuh", 9}}, {"finish", "toy_finish_params", {"toy.cuh", 10}}};
  return {f};
}

Spec toy_spec(const std::string& head_dims) {
  return parse_spec(R"({"format": 1, "package": {"name": "toy-pkg", "version": "2.0"}, "archs": ["sm_90a", "sm_80"],
                        "families": {"toy": {"matrix": {"dtype": ["f16", "bf16"], "head_dim": )" + head_dims + "}}}}",
                    "specs/toy.json", toy_families());
}

NinjaOptions ninja_options() { return {"/cuda/bin/nvcc", "/src/templates", "/bin/aotinfer-gen", ""}; }

std::map<std::string, fs::file_time_type> mtimes(const fs::path& dir) {
  std::map<std::string, fs::file_time_type> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = e.last_write_time();
  return out;
}

// `m` written to a file of its own, to read back with Manifest::load.
fs::path tmp_manifest(const Manifest& m) {
  static TempDir tmp;
  write_file_atomic(tmp.path / "variants.json", m.dump());
  return tmp.path / "variants.json";
}

}  // namespace

TEST_CASE("a variant's source instantiates the template and exports each entry with its launch info") {
  auto families = toy_families();
  VariantKey key{"toy", {{"dtype", "bf16"}, {"mode", "fancy"}, {"head_dim", "128"}}};
  std::string src = variant_source(families[0], key);
  CHECK_THAT(src, Contains("#include \"toy.cuh\""));
  CHECK_THAT(src, Contains("using Family = aotinfer::toy<__nv_bfloat16, aotinfer::Mode::fancy, (int)(128)>;"));
  CHECK_THAT(src, Contains("aotinfer_toy__dtype_bf16__mode_fancy__head_dim_128__run(const __grid_constant__ toy_params params)"));
  CHECK_THAT(src, Contains("Family::finish(params);"));
  CHECK_THAT(src, Contains("extern \"C\" __device__ const aotinfer_launch_info "
                           "aotinfer_toy__dtype_bf16__mode_fancy__head_dim_128__finish__launch = Family::finish_launch;"));
  CHECK_THAT(src, Contains("__launch_bounds__(Family::run_launch.block[0]"));
}

TEST_CASE("the planned manifest and build.ninja cover every variant and arch") {
  Spec spec = toy_spec("[64, 128]");
  Manifest plan = package_plan(spec, toy_families());
  CHECK(plan.archs == std::vector<std::string>{"sm_80", "sm_90a"});  // sorted by generation
  CHECK(plan.spec_file == "toy.json");
  REQUIRE(plan.variants.size() == 4);
  CHECK(plan.variants[0].file == "kernels/toy.dtype-f16.mode-plain.head_dim-64.fatbin");
  CHECK(plan.variants[0].entries.size() == 2);
  std::string ninja = build_ninja(plan, spec, ninja_options());
  CHECK_THAT(ninja, Contains("-gencode=arch=compute_80,code=sm_80"));
  CHECK_THAT(ninja, Contains("-gencode=arch=compute_90a,code=sm_90a"));
  CHECK_THAT(ninja, Contains("-Xfatbin=-compress-all"));
  CHECK_THAT(ninja, Contains("build package/kernels/toy.dtype-bf16.mode-plain.head_dim-128.fatbin: fatbin "
                             "src/toy.dtype-bf16.mode-plain.head_dim-128.cu"));
  CHECK_THAT(ninja, Contains("build package/manifest.json: seal variants.json |"));
  CHECK_THAT(ninja, Contains(".cu | nvcc-flags.txt"));  // a flag change recompiles everything
}

TEST_CASE("archs listed in sass_from_ptx compile from the spec's PTX, in one front-end pass with it") {
  // `head`: the spec's keys before "families".
  auto spec_with = [](const std::string& head) {
    return parse_spec(R"({"format": 1, "package": {"name": "toy-pkg", "version": "2.0"}, )" + head + R"(,
                          "families": {"toy": {"matrix": {"dtype": ["f16"], "head_dim": [64]}}}})",
                      "specs/toy.json", toy_families());
  };
  const std::string archs = R"("archs": ["sm_120", "sm_80", "sm_90a"], "ptx": "compute_80")";
  CHECK(nvcc_flags(spec_with(archs)) == nvcc_flags(toy_spec("[64]")) + " -gencode=arch=compute_120,code=sm_120" +
                                             " -gencode=arch=compute_80,code=compute_80");
  const std::string flags = nvcc_flags(spec_with(archs + R"(, "sass_from_ptx": ["sm_120"])"));
  CHECK_THAT(flags, Contains("-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a "
                             "-gencode=arch=compute_80,code=[compute_80,sm_120]"));
  CHECK(flags.find("compute_120") == std::string::npos);

  auto refusal = [&](const std::string& head) {
    try {
      spec_with(head);
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(refusal(archs + R"(, "sass_from_ptx": ["sm_100"])"), Contains("/sass_from_ptx/0: 'sm_100' is not among \"archs\""));
  CHECK_THAT(refusal(archs + R"(, "sass_from_ptx": ["sm_120", "sm_120"])"), Contains("duplicate arch 'sm_120'"));
  CHECK_THAT(refusal(archs + R"(, "sass_from_ptx": "sm_120")"), Contains("expected a list of archs"));
  CHECK_THAT(refusal(R"("archs": ["sm_80", "sm_120"], "sass_from_ptx": ["sm_120"])"), Contains("needs \"ptx\""));
  CHECK_THAT(refusal(R"("archs": ["sm_80", "sm_90"], "ptx": "compute_90", "sass_from_ptx": ["sm_80"])"),
             Contains("'sm_80' cannot be compiled from compute_90"));
  CHECK_THAT(refusal(R"("archs": ["sm_90a"], "ptx": "compute_90a", "sass_from_ptx": ["sm_90a"])"),
             Contains("needs plain PTX"));
}

TEST_CASE("a family's own sass_from_ptx replaces the spec's for its variants alone") {
  const Spec spec = parse_spec(R"({"format": 1, "package": {"name": "toy-pkg", "version": "2.0"},
                                   "archs": ["sm_80", "sm_90a", "sm_120"], "ptx": "compute_80", "sass_from_ptx": ["sm_120"],
                                   "families": {"toy": {"matrix": {"dtype": ["f16"], "head_dim": [64]},
                                                        "sass_from_ptx": ["sm_90a", "sm_120"]}}})",
                               "specs/toy.json", toy_families());
  CHECK_THAT(nvcc_flags(spec), Contains("-gencode=arch=compute_90a,code=sm_90a"));
  CHECK_THAT(nvcc_flags(spec, "toy"), Contains("-gencode=arch=compute_80,code=[compute_80,sm_90a,sm_120]"));
  CHECK(nvcc_flags(spec, "toy").find("compute_90a") == std::string::npos);
  const std::string ninja = build_ninja(package_plan(spec, toy_families()), spec, ninja_options());
  CHECK_THAT(ninja, Contains("  nvcc_flags = " + nvcc_flags(spec, "toy") + "\n"));
  CHECK(nvcc_flags_text(spec) == nvcc_flags(spec) + "\ntoy: " + nvcc_flags(spec, "toy") + "\n");
  try {
    parse_spec(R"({"format": 1, "package": {"name": "toy-pkg", "version": "2.0"}, "archs": ["sm_80"], "ptx": "compute_80",
                   "families": {"toy": {"matrix": {"dtype": ["f16"], "head_dim": [64]}, "sass_from_ptx": ["sm_90a"]}}})",
               "specs/toy.json", toy_families());
    FAIL("accepted an arch the spec does not build");
  } catch (const SpecError& e) {
    CHECK_THAT(std::string(e.what()), Contains("/families/toy/sass_from_ptx/0: 'sm_90a' is not among"));
  }
}

TEST_CASE("the planned manifest records every family's axes as aotinfer-gen families prints them") {
  const Manifest plan = package_plan(toy_spec("[64]"), toy_families());
  REQUIRE(plan.families.size() == 1);
  const ManifestFamily& toy = plan.families[0];
  CHECK(toy.name == "toy");
  REQUIRE(toy.axes.size() == 3);
  CHECK(toy.axes[1] == ManifestAxis{"mode", "enum", {"plain", "fancy"}, "plain", {}});
  CHECK(toy.axes[2].allowed == std::vector<std::string>{"64", "128", "256"});  // the template's values, not the spec's
  // The same axis objects as `families --json`, less where the template declares them.
  nlohmann::ordered_json printed = to_json(toy_families())[0]["axes"];
  for (auto& axis : printed) axis.erase("where");
  CHECK(printed == manifest_to_json(plan)["families"][0]["axes"]);
  CHECK(Manifest::load(tmp_manifest(plan)) == plan);
}

TEST_CASE("regenerating an unchanged spec touches no file and a new value writes only what is new") {
  TempDir tmp;
  auto families = toy_families();
  auto first = generate_package(toy_spec("[64, 128]"), families, tmp.path, ninja_options());
  CHECK(first.written == 7);  // 4 sources, build.ninja, nvcc-flags.txt, variants.json
  auto before = mtimes(tmp.path);

  auto second = generate_package(toy_spec("[64, 128]"), families, tmp.path, ninja_options());
  CHECK(second.written == 0);
  CHECK(second.unchanged == 7);
  CHECK(mtimes(tmp.path) == before);

  auto third = generate_package(toy_spec("[64, 128, 256]"), families, tmp.path, ninja_options());
  CHECK(third.written == 4);  // two new sources, build.ninja, variants.json (flags unchanged)
  auto after = mtimes(tmp.path);
  for (const auto& [file, time] : before)
    if (file.rfind("src/", 0) == 0) CHECK(after.at(file) == time);
  CHECK(after.count("src/toy.dtype-bf16.mode-plain.head_dim-256.cu"));
}

TEST_CASE("outputs of variants that left the spec are removed and other files are never touched") {
  TempDir tmp;
  auto families = toy_families();
  generate_package(toy_spec("[64, 128]"), families, tmp.path, ninja_options());
  // What a build would have produced, and a file the user put there.
  write_file_atomic(tmp.path / "package/kernels/toy.dtype-f16.mode-plain.head_dim-128.fatbin", "fake");
  write_file_atomic(tmp.path / "package/kernels/toy.dtype-f16.mode-plain.head_dim-64.fatbin", "fake");
  write_file_atomic(tmp.path / "src/notes.txt", "mine");

  auto r = generate_package(toy_spec("[64]"), families, tmp.path, ninja_options());
  CHECK(r.removed == 3);  // two sources and one fatbin
  CHECK_FALSE(fs::exists(tmp.path / "src/toy.dtype-f16.mode-plain.head_dim-128.cu"));
  CHECK_FALSE(fs::exists(tmp.path / "package/kernels/toy.dtype-f16.mode-plain.head_dim-128.fatbin"));
  CHECK(fs::exists(tmp.path / "package/kernels/toy.dtype-f16.mode-plain.head_dim-64.fatbin"));
  CHECK(read_file(tmp.path / "src/notes.txt") == "mine");
}

TEST_CASE("the shipped specs are valid and specs/schema.json matches the templates") {
  auto families = scan_templates({.templates_dir = AOTINFER_SOURCE_DIR "/templates", .cuda_home = AOTINFER_CUDA_HOME, .include_dirs = {}});
  for (const char* name : {"default.json", "ci.json"}) {
    INFO(name);
    Spec spec = load_spec(fs::path(AOTINFER_SOURCE_DIR "/specs") / name, families);
    CHECK(!spec.variants.empty());
  }
  // Regenerate with: aotinfer-gen schema -o specs/schema.json
  CHECK(read_file(AOTINFER_SOURCE_DIR "/specs/schema.json") == spec_json_schema(families).dump(2) + "\n");
}

TEST_CASE("shards give every variant of a spec to exactly one shard, balanced by compile cost") {
  auto families = scan_templates({.templates_dir = AOTINFER_SOURCE_DIR "/templates", .cuda_home = AOTINFER_CUDA_HOME, .include_dirs = {}});
  const Spec spec = load_spec(AOTINFER_SOURCE_DIR "/specs/default.json", families);
  double largest = 0;
  for (const auto& v : spec.variants) largest = std::max(largest, estimated_compile_cost(v));
  for (int count : {1, 2, 3, 7, 200}) {
    INFO(count << " shards");
    std::map<std::string, int> owners;
    double lightest = 1e300, heaviest = 0;
    for (int i = 1; i <= count; ++i) {
      double load = 0;
      auto part = shard_variants(spec.variants, Shard{i, count});
      for (const auto& v : part) {
        ++owners[v.uri()];
        load += estimated_compile_cost(v);
      }
      CHECK(part == shard_variants(spec.variants, Shard{i, count}));  // deterministic
      lightest = std::min(lightest, load);
      heaviest = std::max(heaviest, load);
    }
    CHECK(owners.size() == spec.variants.size());
    for (const auto& [uri, n] : owners) CHECK(n == 1);
    CHECK(heaviest - lightest <= largest + 1e-9);
  }
  CHECK_THROWS_WITH(Shard::parse("0/3"), Contains("1 <= I <= N"));
  CHECK_THROWS_WITH(Shard::parse("4/3"), Contains("1 <= I <= N"));
  CHECK_THROWS_WITH(Shard::parse("two"), Contains("--shard takes I/N"));
  CHECK(Shard::parse("2/5").index == 2);
}

#ifdef AOTINFER_GEN_EXE
namespace {

int run(const std::string& command) {
  int status = std::system((command + " > /dev/null 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string capture(const std::string& command) {
  std::string out;
  if (FILE* p = ::popen((command + " 2>&1").c_str(), "r")) {
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    ::pclose(p);
  }
  return out;
}

}  // namespace

TEST_CASE("a package for a subset of the spec's archs (--archs) plans only those and refuses others", "[build]") {
  TempDir tmp;
  const std::string gen = AOTINFER_GEN_EXE;
  const std::string spec = AOTINFER_SOURCE_DIR "/specs/ci.json";
  REQUIRE(run(gen + " generate " + spec + " --archs sm_90 -o " + (tmp.path / "sm90").string()) == 0);
  const Manifest plan = Manifest::load(tmp.path / "sm90" / "variants.json");
  CHECK(plan.archs == std::vector<std::string>{"sm_90"});
  CHECK_THAT(read_file(tmp.path / "sm90" / "build.ninja"), !Contains("sm_80"));
  const std::string refused = capture(gen + " generate " + spec + " --archs sm_75 -o " + (tmp.path / "x").string());
  CHECK_THAT(refused, Contains("--archs sm_75 is not among the archs of") && Contains("sm_80, sm_90"));
  CHECK_FALSE(fs::exists(tmp.path / "x"));
}

TEST_CASE("aotinfer-gen --lineinfo compiles every variant with -lineinfo and into a folder of its own by default", "[build]") {
  TempDir tmp;
  const std::string gen = AOTINFER_GEN_EXE;
  const std::string spec = AOTINFER_SOURCE_DIR "/specs/ci.json";
  REQUIRE(run("cd " + tmp.path.string() + " && " + gen + " generate " + spec + " --lineinfo") == 0);
  const fs::path out = tmp.path / "generated" / "aotinfer-ci-lineinfo";
  const std::string ninja = read_file(out / "build.ninja");
  CHECK_THAT(ninja, Contains("nvcc_flags = -std=c++17 -O3 -Xfatbin=-compress-all --compress-mode=size -Xptxas=-warn-spills -lineinfo "));
  CHECK_THAT(read_file(out / "nvcc-flags.txt"), Contains(" -lineinfo "));
  REQUIRE(run(gen + " generate " + spec + " -o " + (tmp.path / "plain").string()) == 0);
  CHECK_THAT(read_file(tmp.path / "plain" / "build.ninja"), !Contains("lineinfo"));
}

// Every file of a package folder, by relative path.
std::map<std::string, std::string> package_files(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = read_file(e.path());
  return files;
}

// The number of variants `aotinfer-gen list` expands a spec to ("<n> variants of ..." last).
std::size_t listed_variants(const std::string& gen, const std::string& spec) {
  const std::string out = capture(gen + " list " + spec);
  const std::size_t at = out.rfind(" variants of ");
  REQUIRE(at != std::string::npos);
  const std::size_t line = out.rfind('\n', at);
  return std::stoul(out.substr(line == std::string::npos ? 0 : line + 1, at));
}

TEST_CASE("a spec built as 3 shards in separate processes merges byte-identically and builds are reproducible", "[build]") {
  TempDir tmp;
  const std::string gen = AOTINFER_GEN_EXE;
  const std::string spec = AOTINFER_SOURCE_DIR "/specs/ci.json";
  const std::string d = tmp.path.string();
  // Three shard builds at once (separate processes), and two unsharded builds in other folders.
  REQUIRE(run("(" + gen + " build " + spec + " --shard 1/3 -o " + d + "/s1 & " + gen + " build " + spec + " --shard 2/3 -o " +
              d + "/s2 & " + gen + " build " + spec + " --shard 3/3 -o " + d + "/s3 & wait) && " + gen + " build " + spec +
              " -o " + d + "/one") == 0);
  REQUIRE(run(gen + " build " + spec + " -o " + d + "/two") == 0);
  REQUIRE(run(gen + " merge -o " + d + "/merged " + d + "/s1 " + d + "/s2 " + d + "/s3") == 0);

  const auto single = package_files(tmp.path / "one" / "package");
  CHECK(single.size() == listed_variants(gen, spec) + 1);  // manifest + one fatbin per variant
  CHECK(package_files(tmp.path / "merged" / "package") == single);
  CHECK(package_files(tmp.path / "two" / "package") == single);
  CHECK(package_files(tmp.path / "two" / "src") == package_files(tmp.path / "one" / "src"));
  CHECK(read_file(tmp.path / "two" / "variants.json") == read_file(tmp.path / "one" / "variants.json"));

  // Refusals: a missing shard, a repeated one, and a shard of another spec.
  CHECK_THAT(capture(gen + " merge -o " + d + "/m2 " + d + "/s1 " + d + "/s2"), Contains("shards missing: 3 of 3"));
  CHECK_THAT(capture(gen + " merge -o " + d + "/m2 " + d + "/s1 " + d + "/s1 " + d + "/s3"), Contains("shard 1 given twice"));
  std::string other = read_file(spec);
  other.replace(other.find("\"0.1.0\""), 7, "\"0.1.1\"");
  write_file_atomic(tmp.path / "other.json", other);
  REQUIRE(run(gen + " generate " + d + "/other.json --shard 2/3 -o " + d + "/o2") == 0);
  CHECK_THAT(capture(gen + " merge -o " + d + "/m3 " + d + "/s1 " + d + "/o2 " + d + "/s3"), Contains("different spec"));
  CHECK_THAT(capture(gen + " merge -o " + d + "/m4 " + d + "/one"), Contains("not a shard build"));
}

TEST_CASE("specs/ci.json builds into a sealed package and rebuilds compile only what changed", "[build]") {
  TempDir tmp;
  const std::string gen = AOTINFER_GEN_EXE;
  const fs::path out = tmp.path / "pkg";
  std::string spec = read_file(AOTINFER_SOURCE_DIR "/specs/ci.json");
  write_file_atomic(tmp.path / "ci.json", spec);

  REQUIRE(run(gen + " build " + (tmp.path / "ci.json").string() + " -o " + out.string()) == 0);
  const std::size_t variants = listed_variants(gen, (tmp.path / "ci.json").string());
  Package pkg = Package::open(out / "package");
  const Manifest& m = pkg.manifest();
  CHECK(m.package_name == "aotinfer-ci");
  CHECK(m.variants.size() == variants);
  CHECK(m.families.size() == 6);  // seal keeps what the plan recorded: every template's family
  CHECK(pkg.verify().empty());
  for (const auto& v : m.variants) {
    CHECK(v.archs == m.archs);  // read from the fatbin itself
    CHECK(v.size > 0);
    CHECK(v.sha256.size() == 64);
  }
  CHECK_THAT(capture("ninja -C " + out.string() + " -n"), Contains("no work to do"));
  const std::string report = read_file(out / "build-report.json");
  CHECK_THAT(report, Contains("\"variants\": " + std::to_string(variants)) && Contains("\"largest_first\""));

  // One more head_dim: only its fatbin is compiled.
  auto before = mtimes(out / "package" / "kernels");
  std::string grown = spec;
  grown.replace(grown.find("[64, 128, 512]"), 14, "[64, 128, 256, 512]");
  write_file_atomic(tmp.path / "ci.json", grown);
  REQUIRE(run(gen + " build " + (tmp.path / "ci.json").string() + " -o " + out.string()) == 0);
  auto after = mtimes(out / "package" / "kernels");
  CHECK(after.size() == variants + 2);  // merge_state f16 and bf16 at head_dim 256
  for (const auto& [file, time] : before) CHECK(after.at(file) == time);
  CHECK(Package::open(out / "package").manifest().variants.size() == variants + 2);
  CHECK(Package::open(out / "package").manifest().spec_sha256 != m.spec_sha256);
}
#endif
