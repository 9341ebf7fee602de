// Status codes travel as return values; the text travels in a thread-local buffer.
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <string>

#include "runtime.h"

namespace pcr {
namespace {
// Grows to the message (a selection's refusal lists every candidate's reason), up to a cap
// that keeps a runaway message from taking the thread's memory.
constexpr size_t kMaxMessage = 64 << 10;
thread_local std::string g_message;
}  // namespace

int set_error(int status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char small[1024];
  va_list again;
  va_copy(again, ap);
  const int need = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  try {
    if (need >= 0 && size_t(need) < sizeof small) {
      g_message.assign(small, size_t(need));
    } else if (need >= 0) {
      g_message.resize(std::min(size_t(need), kMaxMessage) + 1);
      vsnprintf(&g_message[0], g_message.size(), fmt, again);
      g_message.resize(g_message.size() - 1);
    }
  } catch (...) {  // no memory for the text: the status still tells
    g_message.clear();
  }
  va_end(again);
  return status;
}

void clear_error() noexcept { g_message.clear(); }

const char* last_error() noexcept { return g_message.c_str(); }

}  // namespace pcr
