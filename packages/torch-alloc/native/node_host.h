// The one Node environment of the process, and the calls into the bridge it runs: all that
// knows Node and V8. Node starts with no signal handlers, no stdio setup, no NODE_OPTIONS, no
// inspector, no resource-limit or large-page changes, and leaves OpenSSL (which Python's
// hashlib and ssl have set up in the same process) alone: the host process keeps its own.
// Never torn down: at process exit the JS thread may hold the isolate, and PyTorch frees
// tensors until the very end, so its state is leaked on purpose (no static destructors).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gmlake {

class NodeHost {
 public:
  // What the bridge offers besides call/text, read once at start.
  struct Bridge {
    bool freeQueue = false;  // it took the free queue's slots (attachFreeQueue)
    bool sized = false;      // frontCacheEntries and device are numbers (then the two below)
    double frontCacheEntries = 0, device = 0;
    bool peeks = false;                // the policy has peekCached
    bool speculatesByDefault = false;  // and is a built-in one (bridge.ts speculatesByDefault)
    bool records = false;              // the engine keeps its history (record): every call must reach it
  };
  // Called once the bridge took the free queue, before the call slots are attached: false
  // (with err) refuses the start.
  using OnBridge = std::function<bool(const Bridge&, std::string* err)>;

  // Node once per process; the environment, the boot script (`boot`: module.exports = async
  // (configJson) => bridge) and the bridge, given `freeSlots` for its free queue. Runs on the
  // thread that will use the isolate first (the caller for locker, the JS thread for thread).
  bool Start(const std::string& boot, const std::string& config, const std::string& nodeFlagsText,
             const std::vector<std::string>& nodeFlags, double* freeSlots, size_t freeSlotCount, const OnBridge& onBridge,
             std::string* err);

  // Holding the isolate: the bridge's call(op, a, b, c) through the shared slots. False: it
  // threw (err says so). With `jsNs`, [0] and [1] get the clock around the JS function.
  bool Call(int op, double a, double b, double c, double* answer, uint64_t* jsNs, std::string* err);
  // Holding the isolate, after a call that failed: the bridge's message for it (kTextLastError,
  // fetched while the isolate is still held, so another thread's failure cannot replace it).
  void LastError(std::string* err);
  // Holding the isolate: text(op, arg), malloc'ed; a JS error is the text.
  char* Text(int op, const std::string& arg);

  // The JS thread: takes the isolate for good.
  void HoldForGood();
  // A caller with a Locker per call: f() run holding the isolate (a Locker, the isolate entered).
  template <class F>
  void Locked(F f) {
    LockedImpl(&Run<F>, &f);
  }

 private:
  template <class F>
  static void Run(void* f) {
    (*static_cast<F*>(f))();
  }
  void LockedImpl(void (*fn)(void*), void* arg);
  void KeepThreadState();
  struct State;
  State* s_ = nullptr;  // created by Start, never freed
};

}  // namespace gmlake
