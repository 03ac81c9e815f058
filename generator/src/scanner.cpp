// The template scanner. All *.cuh of the templates dir are parsed together as one CUDA
// translation unit (host side, syntax only) by Clang 14; the AOTINFER_* annotations then turn
// each annotated class template into a FamilySchema.
#include "scanner.hpp"

#include <clang/AST/ASTConsumer.h>
#include <clang/AST/Attr.h>
#include <clang/AST/DeclTemplate.h>
#include <clang/AST/QualTypeNames.h>
#include <clang/AST/RecursiveASTVisitor.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/FrontendAction.h>
#include <clang/Tooling/Tooling.h>
#include <llvm/Support/VirtualFileSystem.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "aotinfer/variant.hpp"

namespace aotinfer::gen {
namespace {

namespace fs = std::filesystem;
using clang::cast;
using clang::dyn_cast;
using clang::isa;

// --- Clang 14 vs. the CUDA 13 headers --------------------------------------------------------

// Clang 14's CUDA wrappers predate CUDA 13: texture_fetch_functions.h uses texture references
// CUDA 13 removed, and the wrapper's texture intrinsics want a `texture` template declared after
// cuda_runtime.h. sm_61_intrinsics.hpp is included at exactly that point, so it declares it.
void write_if_different(const fs::path& path, const std::string& text) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream old;
  old << in.rdbuf();
  if (in && old.str() == text) return;
  // Write-then-rename: concurrent scans must never see a half-written header.
  fs::path tmp = path;
  tmp += ".tmp" + std::to_string(::getpid());
  std::ofstream(tmp, std::ios::binary) << text;
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw ScanError("cannot write " + path.string() + ": " + ec.message());
}

fs::path cuda_overlay_dir() {
  fs::path dir = fs::temp_directory_path() / ("aotinfer-clang-overlay-" + std::to_string(::getuid()));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw ScanError("cannot create " + dir.string() + ": " + ec.message());
  write_if_different(dir / "texture_fetch_functions.h", "// emptied by the aotinfer scanner\n");
  write_if_different(dir / "sm_61_intrinsics.hpp",
                     "#pragma once\n#include_next \"sm_61_intrinsics.hpp\"\n"
                     "template <class T, int dim = 1, enum cudaTextureReadMode mode = "
                     "cudaReadModeElementType> struct texture;\n");
  return dir;
}

// --- Locations ---------------------------------------------------------------------------------

// File names relative to the templates dir when inside it, else as Clang has them.
struct Paths {
  fs::path dir;  // absolute, normalised, no trailing separator
  std::string relative(const std::string& file) const {
    fs::path rel = fs::path(file).lexically_normal().lexically_relative(dir);
    return rel.empty() || *rel.begin() == ".." ? file : rel.string();
  }
  gen::SourceLocation where(const clang::SourceManager& sm, clang::SourceLocation loc) const {
    clang::PresumedLoc p = sm.getPresumedLoc(loc);  // inside a macro: where it was used
    if (p.isInvalid()) return {"<unknown>", 0};
    return {relative(p.getFilename()), p.getLine()};
  }
};

// Keeps Clang's errors (and their notes) as "file:line:col: error: message" lines.
class ErrorCollector : public clang::DiagnosticConsumer {
 public:
  explicit ErrorCollector(const Paths& paths) : paths_(paths) {}
  std::string text;

  void HandleDiagnostic(clang::DiagnosticsEngine::Level level, const clang::Diagnostic& info) override {
    DiagnosticConsumer::HandleDiagnostic(level, info);  // counts errors
    // Notes explain the diagnostic before them: keep those of errors, drop those of warnings.
    if (level != clang::DiagnosticsEngine::Note) keeping_ = level >= clang::DiagnosticsEngine::Error;
    if (!keeping_) return;
    llvm::SmallString<256> message;
    info.FormatDiagnostic(message);
    if (info.hasSourceManager() && info.getLocation().isValid()) {
      const auto& sm = info.getSourceManager();
      clang::PresumedLoc p = sm.getPresumedLoc(info.getLocation());
      if (p.isValid())
        text += paths_.relative(p.getFilename()) + ":" + std::to_string(p.getLine()) + ":" +
                std::to_string(p.getColumn()) + ": ";
    }
    text += (level == clang::DiagnosticsEngine::Note ? "note: " : "error: ") + std::string(message) + "\n";
  }

 private:
  const Paths& paths_;
  bool keeping_ = false;
};

// --- Annotations -------------------------------------------------------------------------------

std::vector<const clang::AnnotateAttr*> annotations(const clang::Decl* d, llvm::StringRef name) {
  std::vector<const clang::AnnotateAttr*> found;
  for (const auto* a : d->specific_attrs<clang::AnnotateAttr>())
    if (a->getAnnotation() == name) found.push_back(a);
  return found;
}

// Sema wraps annotation arguments in casts and ConstantExprs; the literal is underneath.
const clang::Expr* arg(const clang::AnnotateAttr* a, unsigned i) {
  return a->args_begin()[i]->IgnoreParenImpCasts();
}

std::optional<std::string> string_value(const clang::Expr* e) {
  if (const auto* s = dyn_cast<clang::StringLiteral>(e); s && s->getCharByteWidth() == 1)
    return s->getString().str();
  return std::nullopt;
}

std::optional<llvm::APSInt> int_value(const clang::Expr* e, const clang::ASTContext& ctx) {
  if (e->isValueDependent()) return std::nullopt;
  if (auto v = e->getIntegerConstantExpr(ctx)) return *v;
  return std::nullopt;
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

std::vector<std::string> dtype_names() {
  std::vector<std::string> names;
  for (const auto& d : dtypes()) names.push_back(d.name);
  return names;
}

// --- From a family template to its schema ------------------------------------------------------

class Extractor {
 public:
  Extractor(clang::ASTContext& ctx, const Paths& paths) : ctx_(ctx), paths_(paths) {}

  FamilySchema family(const clang::ClassTemplateDecl* tmpl) {
    const clang::CXXRecordDecl* record = tmpl->getTemplatedDecl();
    family_.clear();
    auto marks = annotations(record, "aotinfer.family");
    std::optional<std::string> name;
    if (marks.size() == 1 && marks[0]->args_size() == 1) name = string_value(arg(marks[0], 0));
    if (!name)
      fail(record->getLocation(), "AOTINFER_FAMILY must appear once, with the family name as a string");
    if (!is_name(*name))
      fail(record->getLocation(), "family name '" + *name + "' is not lowercase snake_case");
    family_ = *name;

    FamilySchema f;
    f.name = *name;
    f.cpp_name = tmpl->getQualifiedNameAsString();
    f.where = where(record->getLocation());
    f.header = f.where.file;

    auto values = values_by_axis(record, tmpl->getTemplateParameters());
    for (const clang::NamedDecl* p : *tmpl->getTemplateParameters()) {
      auto it = values.find(p->getNameAsString());
      f.axes.push_back(axis(p, tmpl->getTemplateParameters(), it == values.end() ? nullptr : it->second));
    }
    f.entries = entries(record);
    return f;
  }

  gen::SourceLocation where(clang::SourceLocation loc) const {
    return paths_.where(ctx_.getSourceManager(), loc);
  }

 private:
  clang::ASTContext& ctx_;
  const Paths& paths_;
  std::string family_;  // prefixes messages once known

  [[noreturn]] void fail(clang::SourceLocation loc, const std::string& message) const {
    throw ScanError(where(loc).str() + ": " + (family_.empty() ? "" : "family '" + family_ + "': ") +
                    message);
  }

  // AOTINFER_VALUES("axis", ...) annotations keyed by axis, each naming a real parameter once.
  std::map<std::string, const clang::AnnotateAttr*> values_by_axis(
      const clang::CXXRecordDecl* record, const clang::TemplateParameterList* params) {
    std::map<std::string, const clang::AnnotateAttr*> found;
    for (const auto* a : annotations(record, "aotinfer.values")) {
      std::optional<std::string> axis = a->args_size() >= 2 ? string_value(arg(a, 0)) : std::nullopt;
      if (!axis)
        fail(a->getLocation(), "AOTINFER_VALUES takes a parameter name (a string) and at least one value");
      bool exists =
          std::any_of(params->begin(), params->end(), [&](auto* p) { return p->getName() == *axis; });
      std::vector<std::string> names;
      for (const auto* p : *params) names.push_back(p->getNameAsString());
      if (!exists)
        fail(a->getLocation(), "AOTINFER_VALUES names '" + *axis +
                                   "', which is not a template parameter; parameters: " + join(names));
      if (!found.emplace(*axis, a).second)
        fail(a->getLocation(), "AOTINFER_VALUES given twice for '" + *axis + "'");
    }
    return found;
  }

  Axis axis(const clang::NamedDecl* p, const clang::TemplateParameterList* params,
            const clang::AnnotateAttr* values) {
    Axis a;
    a.name = p->getNameAsString();
    a.where = where(p->getLocation());
    auto unsupported = [&](const std::string& what) {
      fail(p->getLocation(), "parameter '" + a.name + "' is a " + what +
                                 "; axes are typename (dtype), enum, bool or integer parameters");
    };
    if (p->isTemplateParameterPack()) unsupported("parameter pack");
    if (isa<clang::TemplateTemplateParmDecl>(p)) unsupported("template template parameter");
    if (!is_name(a.name))
      fail(p->getLocation(),
           "parameter '" + a.name + "' is not a lowercase snake_case name (specs and URIs spell axes by it)");

    if (const auto* t = dyn_cast<clang::TemplateTypeParmDecl>(p)) {
      dtype_axis(a, t, params, values);
    } else {
      const auto* n = cast<clang::NonTypeTemplateParmDecl>(p);
      clang::QualType type = n->getType();
      if (const auto* e = type->getAs<clang::EnumType>())
        enum_axis(a, n, e->getDecl(), values);
      else if (type->isBooleanType())
        bool_axis(a, n, values);
      else if (type->isIntegerType())
        int_axis(a, n, params, values);
      else
        unsupported("non-type parameter of type '" + type.getAsString() + "'");
    }

    for (const auto& v : a.allowed)
      if (std::count(a.allowed.begin(), a.allowed.end(), v) > 1)
        fail(values->getLocation(), "value '" + v + "' of '" + a.name + "' is listed twice");
    if (a.default_value && !a.allows(*a.default_value))
      fail(p->getLocation(), "the default '" + *a.default_value + "' of '" + a.name +
                                 "' is not among its values (" + join(a.allowed) + ")");
    return a;
  }

  using TextOf = std::function<std::optional<std::string>(const clang::Expr*)>;

  // Canonical text of each AOTINFER_VALUES value; `expected` says what they may be.
  std::vector<std::string> texts(const Axis& a, const clang::AnnotateAttr* values, const TextOf& text,
                                 const std::string& expected) const {
    std::vector<std::string> out;
    for (unsigned i = 1; i < values->args_size(); ++i) {
      auto v = text(arg(values, i));
      if (!v) fail(values->getLocation(), "values of '" + a.name + "' are " + expected);
      out.push_back(*v);
    }
    return out;
  }

  std::optional<std::string> default_text(const clang::NonTypeTemplateParmDecl* p, const TextOf& text,
                                          const std::string& expected) const {
    if (!p->hasDefaultArgument()) return std::nullopt;
    const clang::Expr* e = p->getDefaultArgument()->IgnoreParenImpCasts();
    auto v = e->isValueDependent() ? std::nullopt : text(e);
    if (!v) fail(p->getLocation(), "the default of '" + p->getNameAsString() + "' must be " + expected);
    return v;
  }

  void dtype_axis(Axis& a, const clang::TemplateTypeParmDecl* p, const clang::TemplateParameterList* params,
                  const clang::AnnotateAttr* values) {
    a.kind = AxisKind::dtype;
    const std::string vocabulary = "dtype names (" + join(dtype_names()) + ")";
    if (!values)
      fail(p->getLocation(), "dtype parameter '" + a.name + "' needs AOTINFER_VALUES(\"" + a.name +
                                 "\", ...) listing " + vocabulary);
    TextOf dtype_name = [](const clang::Expr* e) {
      auto v = string_value(e);
      return v && find_dtype(*v) ? v : std::nullopt;
    };
    a.allowed = texts(a, values, dtype_name, vocabulary);
    if (!p->hasDefaultArgument()) return;
    clang::QualType def = p->getDefaultArgument();
    if (const auto* other = def->getAs<clang::TemplateTypeParmType>()) {
      a.follows = params->getParam(other->getIndex())->getNameAsString();  // `= dtype_q`
      return;
    }
    // `= __half`, or a typedef of it (`= half`): peel the sugar until a spelling matches.
    auto policy = ctx_.getPrintingPolicy();
    policy.SuppressTagKeyword = true;
    for (clang::QualType t = def;; t = t.getSingleStepDesugaredType(ctx_)) {
      for (const auto& d : dtypes())
        if (t.getAsString(policy) == d.cpp_type) a.default_value = d.name;
      if (a.default_value) return;
      if (t == t.getSingleStepDesugaredType(ctx_)) break;
    }
    fail(p->getLocation(), "the default '" + def.getAsString(policy) + "' of '" + a.name +
                               "' is neither an earlier typename parameter nor the type of one of the " +
                               vocabulary);
  }

  void enum_axis(Axis& a, const clang::NonTypeTemplateParmDecl* p, const clang::EnumDecl* e,
                 const clang::AnnotateAttr* values) {
    a.kind = AxisKind::enumeration;
    a.cpp_type = e->getQualifiedNameAsString();
    if (!(e = e->getDefinition())) fail(p->getLocation(), "enum " + a.cpp_type + " has no definition");
    std::vector<const clang::EnumConstantDecl*> all(e->enumerator_begin(), e->enumerator_end());
    auto named = [&](llvm::StringRef name) -> const clang::EnumConstantDecl* {
      for (const auto* c : all)
        if (c->getName() == name) return c;
      return nullptr;
    };
    std::vector<std::string> names;
    for (const auto* c : all) names.push_back(c->getNameAsString());
    const std::string expected = "enumerators of " + a.cpp_type + " (" + join(names) + ")";

    TextOf enumerator = [&](const clang::Expr* v) {
      auto name = string_value(v);
      return name && named(*name) ? name : std::nullopt;
    };
    a.allowed = values ? texts(a, values, enumerator, expected) : names;
    for (const auto& name : a.allowed)
      if (!is_name(name))
        fail(named(name)->getLocation(),
             "enumerator '" + name + "' of " + a.cpp_type + " (axis '" + a.name +
                 "') is not a lowercase snake_case name; specs spell enumerators as values");
    // `= E::x` names the enumerator; any other constant is matched by value.
    TextOf default_enumerator = [&](const clang::Expr* d) -> std::optional<std::string> {
      if (const auto* ref = dyn_cast<clang::DeclRefExpr>(d))
        if (const auto* c = dyn_cast<clang::EnumConstantDecl>(ref->getDecl())) return c->getNameAsString();
      if (auto v = int_value(d, ctx_))
        for (const auto* c : all)
          if (llvm::APSInt::isSameValue(c->getInitVal(), *v)) return c->getNameAsString();
      return std::nullopt;
    };
    a.default_value = default_text(p, default_enumerator, "one of the " + expected);
  }

  void bool_axis(Axis& a, const clang::NonTypeTemplateParmDecl* p, const clang::AnnotateAttr* values) {
    a.kind = AxisKind::boolean;
    TextOf text = [&](const clang::Expr* e) -> std::optional<std::string> {
      auto v = int_value(e, ctx_);
      if (!v || (*v != 0 && *v != 1)) return std::nullopt;
      return *v == 0 ? "false" : "true";
    };
    a.allowed = values ? texts(a, values, text, "true and false") : std::vector<std::string>{"false", "true"};
    a.default_value = default_text(p, text, "true or false");
  }

  void int_axis(Axis& a, const clang::NonTypeTemplateParmDecl* p, const clang::TemplateParameterList* params,
                const clang::AnnotateAttr* values) {
    a.kind = AxisKind::integer;
    clang::QualType type = p->getType();
    a.cpp_type = type.getAsString(ctx_.getPrintingPolicy());
    // Decimal text of a constant that both the parameter's type and a JSON int64 hold.
    TextOf text = [&](const clang::Expr* e) -> std::optional<std::string> {
      auto v = int_value(e, ctx_);
      if (!v || e->getType()->isBooleanType() || v->getMinSignedBits() > 64) return std::nullopt;
      llvm::APSInt converted(v->extOrTrunc(ctx_.getIntWidth(type)), !type->isSignedIntegerType());
      if (!llvm::APSInt::isSameValue(*v, converted)) return std::nullopt;
      return std::to_string(v->getExtValue());
    };
    if (!values)
      fail(p->getLocation(), "integer parameter '" + a.name + "' needs AOTINFER_VALUES(\"" + a.name +
                                 "\", ...) listing its values");
    const std::string expected = "integer constants that fit " + a.cpp_type;
    a.allowed = texts(a, values, text, expected);
    // `int head_dim_vo = head_dim`: follows an earlier integer parameter, as dtype_o follows dtype_q.
    if (p->hasDefaultArgument())
      if (const auto* ref = dyn_cast<clang::DeclRefExpr>(p->getDefaultArgument()->IgnoreParenImpCasts()))
        if (const auto* other = dyn_cast<clang::NonTypeTemplateParmDecl>(ref->getDecl())) {
          if (!other->getType()->isIntegerType() || other->getType()->isBooleanType())
            fail(p->getLocation(), "the default of '" + a.name + "' names '" + other->getNameAsString() +
                                       "', which is not an integer parameter");
          a.follows = params->getParam(other->getIndex())->getNameAsString();
          return;
        }
    a.default_value = default_text(p, text, "an integer constant that fits " + a.cpp_type);
  }

  std::vector<EntrySchema> entries(const clang::CXXRecordDecl* record) {
    std::vector<EntrySchema> found;
    for (const clang::Decl* d : record->decls()) {
      if (annotations(d, "aotinfer.entry").empty()) continue;
      const auto* m = dyn_cast<clang::CXXMethodDecl>(d);
      if (!m || !m->isStatic() || !m->getIdentifier())
        fail(d->getLocation(), "AOTINFER_ENTRY goes on static member functions (not templates or operators)");
      EntrySchema e{m->getNameAsString(), "", where(m->getLocation())};
      if (!is_name(e.name))
        fail(m->getLocation(), "entry '" + e.name + "' is not a lowercase snake_case name");
      if (m->getNumParams() != 1)
        fail(m->getLocation(), "entry '" + e.name + "' must take exactly one parameter, its params struct");
      clang::QualType params = m->getParamDecl(0)->getType().getNonReferenceType().getUnqualifiedType();
      if (params->isDependentType())
        fail(m->getLocation(), "the params type of entry '" + e.name +
                                   "' depends on template parameters; it must be a plain C struct");
      // `struct p` -> "p": the emitter uses the name as a C++ type (typedef names stay as written).
      if (const auto* elaborated = dyn_cast<clang::ElaboratedType>(params.getTypePtr()))
        params = elaborated->getNamedType();
      e.params_type = clang::TypeName::getFullyQualifiedName(params, ctx_, ctx_.getPrintingPolicy());
      auto launch = record->lookup(&ctx_.Idents.get(e.name + "_launch"));
      bool has_launch = std::any_of(launch.begin(), launch.end(), [](const clang::NamedDecl* n) {
        const auto* v = dyn_cast<clang::VarDecl>(n);
        return v && v->isStaticDataMember();
      });
      if (!has_launch)
        fail(m->getLocation(), "entry '" + e.name + "' has no static data member '" + e.name +
                                   "_launch' (its aotinfer_launch_info)");
      found.push_back(std::move(e));
    }
    if (found.empty()) fail(record->getLocation(), "no AOTINFER_ENTRY static member function");
    return found;
  }
};

// Finds the family templates outside system headers.
struct FamilyFinder : clang::RecursiveASTVisitor<FamilyFinder> {
  const clang::SourceManager& sm;
  std::vector<const clang::CXXRecordDecl*> records;
  explicit FamilyFinder(const clang::SourceManager& s) : sm(s) {}

  bool TraverseDecl(clang::Decl* d) {
    if (d && !isa<clang::TranslationUnitDecl>(d) && sm.isInSystemHeader(d->getLocation())) return true;
    return RecursiveASTVisitor::TraverseDecl(d);
  }
  bool VisitCXXRecordDecl(clang::CXXRecordDecl* r) {
    if (!r->isInjectedClassName() && !isa<clang::ClassTemplateSpecializationDecl>(r) &&
        r->isThisDeclarationADefinition() && !annotations(r, "aotinfer.family").empty())
      records.push_back(r);
    return true;
  }
};

struct ScanResult {
  std::vector<FamilySchema> families;
  std::exception_ptr error;
};

class ScanConsumer : public clang::ASTConsumer {
 public:
  ScanConsumer(const Paths& paths, ScanResult& result) : paths_(paths), result_(result) {}

  // Runs inside Clang's call stack: our exceptions stop here, never unwinding through Clang.
  void HandleTranslationUnit(clang::ASTContext& ctx) override {
    if (ctx.getDiagnostics().hasErrorOccurred()) return;
    try {
      FamilyFinder finder(ctx.getSourceManager());
      finder.TraverseDecl(ctx.getTranslationUnitDecl());
      Extractor extract(ctx, paths_);
      std::map<std::string, gen::SourceLocation> seen;
      for (const auto* r : finder.records) {
        gen::SourceLocation at = extract.where(r->getLocation());
        if (!r->getDescribedClassTemplate())
          throw ScanError(at.str() + ": AOTINFER_FAMILY goes on a class template");
        FamilySchema f = extract.family(r->getDescribedClassTemplate());
        if (auto [it, fresh] = seen.emplace(f.name, f.where); !fresh)
          throw ScanError(f.where.str() + ": family '" + f.name + "' is defined twice: here and at " +
                          it->second.str());
        result_.families.push_back(std::move(f));
      }
    } catch (...) {
      result_.error = std::current_exception();
    }
  }

 private:
  const Paths& paths_;
  ScanResult& result_;
};

class ScanAction : public clang::ASTFrontendAction {
 public:
  ScanAction(const Paths& paths, ScanResult& result) : paths_(paths), result_(result) {}
  std::unique_ptr<clang::ASTConsumer> CreateASTConsumer(clang::CompilerInstance&, llvm::StringRef) override {
    return std::make_unique<ScanConsumer>(paths_, result_);
  }

 private:
  const Paths& paths_;
  ScanResult& result_;
};

}  // namespace

std::vector<FamilySchema> scan_templates(const ScanOptions& options) {
  Paths paths{fs::absolute(options.templates_dir).lexically_normal()};
  if (!paths.dir.has_filename()) paths.dir = paths.dir.parent_path();
  if (!fs::is_directory(paths.dir)) throw ScanError(paths.dir.string() + ": templates dir not found");

  // One synthetic TU including every family header: one parse for the whole dir.
  std::vector<std::string> headers;
  for (const auto& e : fs::directory_iterator(paths.dir))
    if (e.path().extension() == ".cuh" && e.is_regular_file())
      headers.push_back(e.path().filename().string());
  std::sort(headers.begin(), headers.end());
  std::string code = "// aotinfer scanner: every family header of this dir\n";
  for (const auto& h : headers) code += "#include \"" + h + "\"\n";
  const std::string main_file = (paths.dir / "__aotinfer_scan.cu").string();

  // clang-format off
  std::vector<std::string> args = {
      "aotinfer-scan", "-x", "cuda", "--cuda-host-only", "-nocudalib", "--cuda-gpu-arch=sm_80",
      "--cuda-path=" + options.cuda_home.string(), "-std=c++17", "-Wno-unknown-cuda-version",
      "-fno-caret-diagnostics",  // else Clang prints "N errors generated" to stderr
      "-DAOTINFER_SCANNING", "-I" + paths.dir.string()};
  // clang-format on
  for (const auto& dir : options.include_dirs) args.push_back("-I" + fs::absolute(dir).string());
  args.insert(args.end(), {"-isystem", cuda_overlay_dir().string(), "-resource-dir",
                           AOTINFER_CLANG_RESOURCE_DIR, "-fsyntax-only", main_file});

  // The synthetic file lives only in memory, over the real file system.
  auto memory = llvm::makeIntrusiveRefCnt<llvm::vfs::InMemoryFileSystem>();
  memory->addFile(main_file, 0, llvm::MemoryBuffer::getMemBufferCopy(code));
  auto overlay = llvm::makeIntrusiveRefCnt<llvm::vfs::OverlayFileSystem>(llvm::vfs::getRealFileSystem());
  overlay->pushOverlay(memory);
  auto files = llvm::makeIntrusiveRefCnt<clang::FileManager>(clang::FileSystemOptions(), overlay);

  ScanResult result;
  ErrorCollector errors(paths);
  clang::tooling::ToolInvocation invocation(args, std::make_unique<ScanAction>(paths, result), files.get());
  invocation.setDiagnosticConsumer(&errors);
  bool ok = invocation.run();
  if (errors.getNumErrors() > 0 || !ok)
    throw ScanError(errors.text.empty() ? paths.dir.string() + ": Clang failed without a diagnostic"
                                        : errors.text.substr(0, errors.text.size() - 1));
  if (result.error) std::rethrow_exception(result.error);
  std::sort(result.families.begin(), result.families.end(),
            [](const FamilySchema& a, const FamilySchema& b) { return a.name < b.name; });
  return std::move(result.families);
}

}  // namespace aotinfer::gen
