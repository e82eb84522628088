// A device-memory sampler for live runs: a native thread that calls cuMemGetInfo every
// `interval_us` and keeps the lowest free byte count seen, so the peak of device memory in
// use is sampled inside the training steps (at kernel-launch pace), not only at their ends.
// A native thread, not a Python one, because a Python sampler needs the GIL between samples
// and would both slow the step and miss peaks while the training thread holds it.
//
// Build (the GPU host has gcc): gcc -O2 -shared -fPIC -o memsampler.so memsampler.c -ldl -lpthread
// Use from Python through ctypes: start(device, interval_us), then peak_used() / reset() /
// samples() / stop(). libcuda is dlopen'ed at run time, never linked.
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;

static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuMemGetInfo)(size_t *, size_t *);

static pthread_t thread;
static atomic_int running;
static atomic_size_t min_free;
static atomic_size_t total_bytes;
static atomic_ulong sample_count;
static int g_device;
static long g_interval_us;

static void *loop(void *arg) {
  (void)arg;
  CUdevice dev;
  CUcontext ctx;
  if (p_cuDeviceGet(&dev, g_device) != 0 || p_cuDevicePrimaryCtxRetain(&ctx, dev) != 0 || p_cuCtxSetCurrent(ctx) != 0) {
    atomic_store(&running, 0);
    return NULL;
  }
  struct timespec ts = {0, g_interval_us * 1000L};
  while (atomic_load(&running)) {
    size_t f = 0, t = 0;
    if (p_cuMemGetInfo(&f, &t) == 0) {
      atomic_store(&total_bytes, t);
      size_t cur = atomic_load(&min_free);
      while (f < cur && !atomic_compare_exchange_weak(&min_free, &cur, f)) {
      }
      atomic_fetch_add(&sample_count, 1);
    }
    nanosleep(&ts, NULL);
  }
  return NULL;
}

// 0 on success; -1 libcuda missing; -2 cuInit failed; -3 thread start failed.
int start(int device, long interval_us) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!h) return -1;
  p_cuInit = dlsym(h, "cuInit");
  p_cuDeviceGet = dlsym(h, "cuDeviceGet");
  p_cuDevicePrimaryCtxRetain = dlsym(h, "cuDevicePrimaryCtxRetain");
  p_cuCtxSetCurrent = dlsym(h, "cuCtxSetCurrent");
  p_cuMemGetInfo = dlsym(h, "cuMemGetInfo_v2");
  if (!p_cuInit || !p_cuDeviceGet || !p_cuDevicePrimaryCtxRetain || !p_cuCtxSetCurrent || !p_cuMemGetInfo) return -1;
  if (p_cuInit(0) != 0) return -2;
  g_device = device;
  g_interval_us = interval_us > 0 ? interval_us : 100;
  atomic_store(&min_free, SIZE_MAX);
  atomic_store(&running, 1);
  if (pthread_create(&thread, NULL, loop, NULL) != 0) return -3;
  return 0;
}

void reset(void) { atomic_store(&min_free, SIZE_MAX); }

// Bytes in use at the lowest free seen since start/reset (total - min free); 0 before a sample.
size_t peak_used(void) {
  size_t f = atomic_load(&min_free);
  return f == SIZE_MAX ? 0 : atomic_load(&total_bytes) - f;
}

unsigned long samples(void) { return atomic_load(&sample_count); }

void stop(void) {
  if (atomic_exchange(&running, 0)) pthread_join(thread, NULL);
}
