// glibc reach: a library linked on a new glibc that still loads on glibc 2.28 (RHEL 8,
// manylinux_2_28). The static C++ runtime and cudart reference libc functions by plain name, and
// the link binds each to the build machine's newest (default) version. The definitions below,
// hidden (exports.map keeps them inside the library), catch those references and pass them on to
// versions glibc 2.28 has. Each part is compiled only where the headers' glibc has the new
// version; native/check_glibc.py names any reference this file does not cover yet, after the link.
// x86_64 only (CMakeLists.txt adds this file there).
#include <features.h>

#if defined(__x86_64__) && defined(__GLIBC__)
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/stat.h>

// NAME: jumps to OLD@VERSION (arguments untouched, so no prototype is needed).
#define PCR_JUMP(name, old, version)                                                       \
  __asm__(".symver pcr_old_" #name ", " #old "@" version "\n.pushsection .text.pcr_" #name \
          ",\"ax\",@progbits\n.globl " #name "\n.hidden " #name "\n.type " #name           \
          ",@function\n" #name ":\n\tjmp pcr_old_" #name "@PLT\n.size " #name ",.-" #name  \
          "\n.popsection");
#define PCR_OLD(name, version) PCR_JUMP(name, name, version)

#if __GLIBC_PREREQ(2, 34)
// glibc 2.34 moved libpthread's, libdl's and librt's functions into libc under a new default
// version, GLIBC_2.34; the old versions stay, the same code. The references are cudart's.
// CMakeLists.txt also links libpthread.so.0, libdl.so.2 and librt.so.1 (empty since 2.34):
// before 2.34 the old versions are found there.
PCR_OLD(dlclose, "GLIBC_2.2.5")
PCR_OLD(dlerror, "GLIBC_2.2.5")
PCR_OLD(dlmopen, "GLIBC_2.3.4")
PCR_OLD(dlopen, "GLIBC_2.2.5")
PCR_OLD(dlsym, "GLIBC_2.2.5")
PCR_OLD(dlvsym, "GLIBC_2.2.5")
PCR_OLD(pthread_condattr_setpshared, "GLIBC_2.2.5")
PCR_OLD(pthread_create, "GLIBC_2.2.5")
PCR_OLD(pthread_detach, "GLIBC_2.2.5")
PCR_OLD(pthread_getspecific, "GLIBC_2.2.5")
PCR_OLD(pthread_join, "GLIBC_2.2.5")
PCR_OLD(pthread_key_create, "GLIBC_2.2.5")
PCR_OLD(pthread_key_delete, "GLIBC_2.2.5")
PCR_OLD(pthread_kill, "GLIBC_2.2.5")
PCR_OLD(pthread_mutex_trylock, "GLIBC_2.2.5")
PCR_OLD(pthread_mutexattr_destroy, "GLIBC_2.2.5")
PCR_OLD(pthread_mutexattr_init, "GLIBC_2.2.5")
PCR_OLD(pthread_mutexattr_setpshared, "GLIBC_2.2.5")
PCR_OLD(pthread_mutexattr_settype, "GLIBC_2.2.5")
PCR_OLD(pthread_once, "GLIBC_2.2.5")
PCR_OLD(pthread_rwlock_destroy, "GLIBC_2.2.5")
PCR_OLD(pthread_rwlock_init, "GLIBC_2.2.5")
PCR_OLD(pthread_rwlock_rdlock, "GLIBC_2.2.5")
PCR_OLD(pthread_rwlock_timedrdlock, "GLIBC_2.2.5")
PCR_OLD(pthread_rwlock_timedwrlock, "GLIBC_2.2.5")
PCR_OLD(pthread_rwlock_tryrdlock, "GLIBC_2.2.5")
PCR_OLD(pthread_rwlock_trywrlock, "GLIBC_2.2.5")
PCR_OLD(pthread_rwlock_unlock, "GLIBC_2.2.5")
PCR_OLD(pthread_rwlock_wrlock, "GLIBC_2.2.5")
PCR_OLD(pthread_rwlockattr_destroy, "GLIBC_2.2.5")
PCR_OLD(pthread_rwlockattr_init, "GLIBC_2.2.5")
PCR_OLD(pthread_rwlockattr_setpshared, "GLIBC_2.2.5")
PCR_OLD(pthread_setspecific, "GLIBC_2.2.5")
PCR_OLD(pthread_spin_destroy, "GLIBC_2.2.5")
PCR_OLD(pthread_spin_init, "GLIBC_2.2.5")
PCR_OLD(pthread_spin_lock, "GLIBC_2.2.5")
PCR_OLD(pthread_spin_trylock, "GLIBC_2.2.5")
PCR_OLD(pthread_spin_unlock, "GLIBC_2.2.5")
PCR_OLD(sem_destroy, "GLIBC_2.2.5")
PCR_OLD(sem_init, "GLIBC_2.2.5")
PCR_OLD(sem_post, "GLIBC_2.2.5")
PCR_OLD(sem_timedwait, "GLIBC_2.2.5")
PCR_OLD(sem_trywait, "GLIBC_2.2.5")
PCR_OLD(sem_wait, "GLIBC_2.2.5")
PCR_OLD(shm_open, "GLIBC_2.2.5")
PCR_OLD(shm_unlink, "GLIBC_2.2.5")
#endif

#if __GLIBC_PREREQ(2, 29)
// glibc 2.29 gave exp, log and pow new default versions (no SVID error handling); the old
// versions stay, wrappers of the same code. The references are the time model's (rank.cpp).
PCR_OLD(exp, "GLIBC_2.2.5")
PCR_OLD(log, "GLIBC_2.2.5")
PCR_OLD(pow, "GLIBC_2.2.5")
#endif

#if __GLIBC_PREREQ(2, 32)
// libstdc++ (GCC 11+) skips atomic reference counts while glibc says the process is single
// threaded. Our own flag, always 0, keeps them atomic: always safe, slightly slower.
extern "C" {
char __libc_single_threaded = 0;
}
#endif

#if __GLIBC_PREREQ(2, 33)
// fstat64 is a function of its own since glibc 2.33 (libstdc++'s basic_file.o calls it); before,
// <sys/stat.h> made it a call of __fxstat64, which glibc still exports for old binaries.
extern "C" int pcr_fxstat64(int ver, int fd, struct stat64* buf);
__asm__(".symver pcr_fxstat64, __fxstat64@GLIBC_2.2.5");
extern "C" int fstat64(int fd, struct stat64* buf) noexcept {
  return pcr_fxstat64(1 /* _STAT_VER_LINUX of x86_64 */, fd, buf);
}
#endif

#if __GLIBC_PREREQ(2, 36)
// libstdc++'s std::random_device (linked in, unused here) draws from arc4random where the
// build's glibc has it (2.36); getrandom (2.25) is the same kernel source.
extern "C" uint32_t arc4random(void) noexcept {
  uint32_t value;
  while (getrandom(&value, sizeof value, 0) != sizeof value) {
    if (errno != EINTR) abort();
  }
  return value;
}
#endif

#if __GLIBC_PREREQ(2, 38)
// glibc 2.38 headers turn strto* into their C23 versions (which also read 0b prefixes) under
// _GNU_SOURCE, which g++ always defines: the pre-C23 functions serve (seen from GCC 13's
// libstdc++ on Ubuntu 24.04; not linked here, on glibc 2.36).
PCR_JUMP(__isoc23_strtol, strtol, "GLIBC_2.2.5")
PCR_JUMP(__isoc23_strtoul, strtoul, "GLIBC_2.2.5")
PCR_JUMP(__isoc23_strtoll, strtoll, "GLIBC_2.2.5")
PCR_JUMP(__isoc23_strtoull, strtoull, "GLIBC_2.2.5")
#endif
#endif  // x86_64 glibc
