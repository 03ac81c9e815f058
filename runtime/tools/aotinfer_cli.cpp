// aotinfer: inspect kernel packages. `aotinfer help` lists the commands.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "aotinfer/json.hpp"
#include "aotinfer/package.hpp"
#include "coverage/args.hpp"
#include "coverage/report.hpp"

using namespace aotinfer;

namespace {

constexpr const char* kUsage = R"(usage: aotinfer <command> PACKAGE [args]

commands:
  list PACKAGE [FAMILY] [AXIS=VALUE...] [--json]   variants, optionally filtered
  info PACKAGE URI [--json]                        one variant: axes, entry points, file, archs
  verify PACKAGE                                   check every file against the manifest's sha256
  coverage PACKAGE --model config.json [options]   does the package serve this model? (docs/COVERAGE.md)
      --arch sm_XX             the GPU to check for (default: this machine's GPU)
      --dtype f16|bf16         activation dtype (default: the config's torch_dtype)
      --kv-dtype auto|f16|bf16|e4m3|e5m2   KV cache dtype (default auto: the activation dtype)
      --page-size N            tokens per KV page (a run-time value: checked, not a variant axis)
      --fused-rope             RoPE applied inside attention (rope_llama variants)
      --json                   machine-readable report
    exit status: 0 every variant the model needs is present, 1 something is missing or unsupported

PACKAGE is a package folder (the one holding manifest.json), e.g. generated/aotinfer-default/package.
Exit status 2: a usage error (also an unreadable package or config.json for coverage).
)";

[[noreturn]] void usage_error(const std::string& what) {
  std::cerr << "aotinfer: " << what << "\n\n" << kUsage;
  std::exit(2);
}

std::string join(const std::vector<std::string>& items, const char* sep = " ") {
  std::string s;
  for (std::size_t i = 0; i < items.size(); ++i) s += (i ? sep : "") + items[i];
  return s;
}

std::string human_bytes(std::uint64_t n) {
  char buf[32];
  if (n < 1024) std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)n);
  else if (n < (1u << 20)) std::snprintf(buf, sizeof buf, "%.1f KiB", n / 1024.0);
  else std::snprintf(buf, sizeof buf, "%.2f MiB", n / 1048576.0);
  return buf;
}

nlohmann::ordered_json variant_json(const Manifest& m, const ManifestVariant& v) {
  nlohmann::ordered_json j = manifest_to_json(m)["variants"][&v - m.variants.data()];
  return j;
}

int cmd_list(const Package& pkg, const std::vector<std::string>& args, bool json) {
  std::string family;
  std::vector<AxisValue> where;
  for (const auto& a : args) {
    auto eq = a.find('=');
    if (eq == std::string::npos) {
      if (!family.empty()) usage_error("list: expected one family name and AXIS=VALUE filters, got '" + family + "' and '" + a + "'");
      family = a;
    } else if (eq == 0 || eq + 1 == a.size()) {
      usage_error("list: filter '" + a + "': expected AXIS=VALUE, e.g. head_dim=128");
    } else {
      where.push_back({a.substr(0, eq), a.substr(eq + 1)});
    }
  }
  const Manifest& m = pkg.manifest();
  // A family, axis or value the package does not have is a typo, not an empty answer.
  std::vector<const ManifestVariant*> variants;
  try {
    variants = pkg.select(family, where);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::invalid_argument) throw;
    usage_error(std::string("list: ") + e.what());
  }
  if (json) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (auto* v : variants) out.push_back(variant_json(m, *v));
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::size_t width = 3;
  for (auto* v : variants) width = std::max(width, v->key.uri().size());
  std::printf("%s %s (%s, spec %s)\n", m.package_name.c_str(), m.package_version.c_str(), m.generator.c_str(),
              m.spec_file.c_str());
  std::printf("%-*s  %10s  %s\n", int(width), "URI", "SIZE", "ARCHS");
  std::uint64_t total = 0;
  for (auto* v : variants) {
    const std::string code = join(v->archs) + (v->ptx.empty() ? "" : " + PTX " + join(v->ptx));
    std::printf("%-*s  %10s  %s\n", int(width), v->key.uri().c_str(), human_bytes(v->size).c_str(), code.c_str());
    total += v->size;
  }
  std::printf("%zu of %zu variants, %s, archs: %s%s\n", variants.size(), m.variants.size(), human_bytes(total).c_str(),
              join(m.archs).c_str(), m.ptx.empty() ? "" : (" + PTX " + m.ptx).c_str());
  return 0;
}

int cmd_info(const Package& pkg, const std::vector<std::string>& args, bool json) {
  if (args.size() != 1) usage_error("info takes one URI");
  const ManifestVariant& v = pkg.find(args[0]);
  if (json) {
    std::cout << variant_json(pkg.manifest(), v).dump(2) << "\n";
    return 0;
  }
  std::printf("uri      %s\nfamily   %s\n", v.key.uri().c_str(), v.key.family.c_str());
  for (const auto& a : v.key.axes) std::printf("  %-14s %s\n", a.name.c_str(), a.value.c_str());
  for (const auto& e : v.entries) std::printf("entry    %s -> %s\n", e.name.c_str(), e.symbol.c_str());
  std::printf("file     %s (%s)\nsha256   %s\narchs    %s\n", (pkg.path() / v.file).c_str(), human_bytes(v.size).c_str(),
              v.sha256.c_str(), join(v.archs).c_str());
  if (!v.ptx.empty()) std::printf("ptx      %s (compiled by the driver where no arch above runs)\n", join(v.ptx).c_str());
  if (!v.resources.empty()) {
    std::printf("resources per CTA (shared memory: static + dynamic bytes; stack: bytes per thread)\n");
    std::printf("  %-8s %-14s %5s %8s %8s %8s %6s\n", "arch", "entry", "regs", "threads", "static", "dynamic", "stack");
    for (const auto& per_arch : v.resources)
      for (const auto& k : per_arch.kernels)
        std::printf("  %-8s %-14s %5u %8u %8u %8u %6u\n", per_arch.arch.c_str(), k.entry.c_str(), k.registers, k.threads,
                    k.static_smem, k.dynamic_smem, k.stack_bytes);
  }
  return 0;
}

int cmd_verify(const Package& pkg) {
  auto problems = pkg.verify();
  for (const auto& p : problems) std::printf("FAILED  %s\n", p.c_str());
  std::printf("%s: %zu variants, %zu problems\n", pkg.path().c_str(), pkg.manifest().variants.size(), problems.size());
  return problems.empty() ? 0 : 1;
}

// The arch to check for: --arch, else this machine's GPU; with neither, a usage error naming the
// package's archs.
Arch coverage_arch(const coverage::Args& a, const Package& pkg) {
  if (a.arch) return *a.arch;
  try {
    return current_device_arch();
  } catch (const Error& e) {
    usage_error("coverage: no GPU to take the arch from (" + std::string(e.what()) + "); pass --arch, e.g. one of " +
                pkg.manifest().package_name + "'s archs: " + join(pkg.manifest().archs, ", "));
  }
}

// Exit status 0: the package serves the model; 1: it does not; 2: the inputs could not be used.
int cmd_coverage(const std::vector<std::string>& args) {
  coverage::Args a;
  try {
    a = coverage::parse_args(args);
  } catch (const coverage::UsageError& e) {
    usage_error(e.what());
  }
  try {
    const Package pkg = Package::open(a.package);
    const coverage::ModelConfig model = coverage::load_model_config(a.model);
    const coverage::Needs needs = coverage::model_needs(model, a.options);
    const Arch arch = coverage_arch(a, pkg);
    const coverage::Report report{model, needs, pkg.manifest(), pkg.path().string(), arch,
                                  coverage::check_needs(pkg.manifest(), needs.needs, arch)};
    if (a.json) std::cout << coverage::report_json(report).dump(2) << "\n";
    else std::cout << coverage::report_text(report);
    return coverage::serves(report.findings) ? 0 : 1;
  } catch (const std::exception& e) {  // Error (the package) and ConfigError (config.json)
    std::cerr << "aotinfer: coverage: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "coverage") return cmd_coverage({args.begin() + 1, args.end()});
  bool json = false;
  std::vector<std::string> rest;
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--json") json = true;
    else rest.push_back(args[i]);
  }
  const std::string& command = args[0];
  if (command != "list" && command != "info" && command != "verify") usage_error("unknown command '" + command + "'");
  if (rest.empty()) usage_error(command + " needs a PACKAGE folder");
  try {
    Package pkg = Package::open(rest[0]);
    rest.erase(rest.begin());
    if (command == "list") return cmd_list(pkg, rest, json);
    if (command == "info") return cmd_info(pkg, rest, json);
    return cmd_verify(pkg);
  } catch (const std::exception& e) {
    std::cerr << "aotinfer: error: " << e.what() << "\n";
    return 1;
  }
}
