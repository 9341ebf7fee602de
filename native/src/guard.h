// The exception barrier of the library's entry points: no C++ exception leaves the library.
#pragma once

#include <exception>
#include <new>
#include <type_traits>

#include "kernel.h"

namespace pcr {

// Runs an entry point's body, in the manner of tvm-ffi's SAFE_CALL:
//   PCR_API int pcr_x(...) { return guarded([&] { ... }); }
// A C++ exception the body lets escape (std::string, std::vector and std::unordered_map
// allocate on exported paths; std::mutex may throw) becomes PCR_ERR_INTERNAL with the
// thread's message set, instead of unwinding through a C caller or ctypes, which cannot
// catch it (std::terminate). A body of type void returns PCR_OK when it completes.
// Entering a try block executes nothing (the unwinder finds handlers through tables only
// when something throws), so the hot entry points pay nothing on their normal path.
template <class Body>
int guarded(Body&& body) noexcept {
  try {
    if constexpr (std::is_void_v<decltype(body())>) {
      body();
      return PCR_OK;
    } else {
      return body();
    }
  } catch (const std::bad_alloc&) {
    return set_error(PCR_ERR_INTERNAL, "out of host memory");
  } catch (const std::exception& e) {
    return set_error(PCR_ERR_INTERNAL, "internal error (C++ exception): %s", e.what());
  } catch (...) {
    return set_error(PCR_ERR_INTERNAL, "unknown C++ exception");
  }
}

// The same for an entry point that returns a pointer: `fallback` when the body throws
// (the thread's message then says why).
template <class T, class Body>
T* guarded_or(T* fallback, Body&& body) noexcept {
  T* result = fallback;
  guarded([&] { result = body(); });
  return result;
}

}  // namespace pcr
