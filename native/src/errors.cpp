// Status codes travel as return values; the text travels in a thread-local buffer.
#include <cstdarg>
#include <cstdio>

#include "runtime.h"

namespace pcr {
namespace {
thread_local char g_message[1024] = "";
}

int set_error(int status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_message, sizeof g_message, fmt, ap);
  va_end(ap);
  return status;
}

void clear_error() noexcept { g_message[0] = '\0'; }

const char* last_error() noexcept { return g_message; }

}  // namespace pcr
