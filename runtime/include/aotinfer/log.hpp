// What the runtime has to tell a person rather than its caller's control flow: today, that a
// kernel runs from PTX the driver compiles (a one-time cost of seconds on first use). Silent
// by default; a handler receives each message, or AOTINFER_LOG=1 prints them to stderr.
#pragma once
#include <string>

namespace aotinfer {

using LogHandler = void (*)(const char* message, void* user);

// Replaces the handler for the whole process (thread-safe); nullptr restores the default.
void set_log_handler(LogHandler handler, void* user = nullptr);

namespace detail {
void log(const std::string& message);
}

}  // namespace aotinfer
