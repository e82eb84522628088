/*
 * Force-included (-include) into every translation unit of the prebuilt addon (build.mjs):
 * binds the symbols that glibc 2.34 moved from libdl into libc to their original versions,
 * which every glibc still exports, so the addon loads on glibc >= 2.27 (memfd_create is
 * the newest symbol left) and not only on the glibc it was built on.
 */
#if defined(__linux__) && defined(__x86_64__)
#include <features.h>
#endif
#if defined(__linux__) && defined(__x86_64__) && defined(__GLIBC__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
#endif
