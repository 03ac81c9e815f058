#include "aotinfer/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace aotinfer {
namespace {

std::mutex log_mutex;
LogHandler log_handler = nullptr;
void* log_user = nullptr;

bool stderr_wanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("AOTINFER_LOG");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return wanted;
}

}  // namespace

void set_log_handler(LogHandler handler, void* user) {
  std::lock_guard lock(log_mutex);
  log_handler = handler;
  log_user = user;
}

namespace detail {

void log(const std::string& message) {
  std::lock_guard lock(log_mutex);
  if (log_handler) log_handler(message.c_str(), log_user);
  else if (stderr_wanted()) std::fprintf(stderr, "aotinfer: %s\n", message.c_str());
}

}  // namespace detail
}  // namespace aotinfer
