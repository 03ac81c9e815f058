#include "coverage/args.hpp"

#include <charconv>

namespace aotinfer::coverage {

namespace {

[[noreturn]] void refuse(const std::string& what) { throw UsageError("coverage: " + what); }

DType dtype_value(const std::string& flag, const std::string& value, const std::vector<DType>& allowed) {
  std::string names;
  for (DType t : allowed) {
    names += (names.empty() ? "" : ", ") + std::string(dtype_name(t));
    if (dtype_name(t) == value) return t;
  }
  refuse(flag + ": expected one of " + names + (flag == "--kv-dtype" ? ", auto" : "") + ", got '" + value + "'");
}

int page_size_value(const std::string& value) {
  int n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || end != value.data() + value.size() || n < 1)
    refuse("--page-size: expected a number of tokens per page, an integer from 1 to 2147483647, got '" + value + "'");
  return n;
}

Arch arch_value(const std::string& value) {
  if (auto arch = Arch::parse(value)) return *arch;
  std::string known;
  for (const auto& name : known_arch_names()) known += (known.empty() ? "" : ", ") + name;
  refuse("--arch: expected a GPU arch (" + known + "), got '" + value + "'");
}

}  // namespace

Args parse_args(const std::vector<std::string>& args) {
  Args a;
  std::vector<std::string> positional;
  bool has_model = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) refuse(flag + " needs a value");
      return args[++i];
    };
    if (flag == "--model") a.model = value(), has_model = true;
    else if (flag == "--dtype") a.options.dtype = dtype_value(flag, value(), {DType::f16, DType::bf16});
    else if (flag == "--kv-dtype") {
      const std::string v = value();
      a.options.kv_dtype = v == "auto" ? std::nullopt
                                       : std::optional(dtype_value(flag, v, {DType::f16, DType::bf16, DType::e4m3, DType::e5m2}));
    } else if (flag == "--page-size") a.options.page_size = page_size_value(value());
    else if (flag == "--arch") a.arch = arch_value(value());
    else if (flag == "--fused-rope") a.options.fused_rope = true;
    else if (flag == "--json") a.json = true;
    else if (flag.size() > 1 && flag[0] == '-')
      refuse("unknown option '" + flag + "' (options: --model, --arch, --dtype, --kv-dtype, --page-size, --fused-rope, --json)");
    else positional.push_back(flag);
  }
  if (positional.size() != 1)
    refuse("expected one PACKAGE folder, got " + (positional.empty() ? std::string("none") : std::to_string(positional.size())));
  if (!has_model || a.model.empty()) refuse("--model config.json is required: the model's Hugging Face config.json");
  a.package = positional.front();
  return a;
}

}  // namespace aotinfer::coverage
