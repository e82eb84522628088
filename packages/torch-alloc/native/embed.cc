// The Node embedding behind the allocator (libgmlake_embed.so, linked against Debian's
// libnode.so.108): one Node environment per process, started on the first
// gmlake_embed_start(), running native/boot.cjs, which imports the bridge (dist/bridge.js)
// and through it @gmlake/stitch. Every allocator call becomes one synchronous call of the
// bridge's `call(op, a, b, c)` (its arguments and answer passed through shared slots,
// attachCallSlots), except frees, which are queued and handed over with the next call
// (embed.h kFreeQueueSlots): one isolate entry per alloc+free pair, not two. With the front
// cache on (frontCacheEntries), the last frees are held here instead and an alloc of the same
// size on the same stream takes one back without entering JS at all (README "Front cache").
//
// Two ways for PyTorch's threads (the Python thread, autograd's backward thread) to reach
// the one isolate, chosen at start (README "Threading", BENCHMARKS.md):
//   locker - the calling thread takes a v8::Locker, enters the isolate and calls;
//   thread - a dedicated JS thread owns the isolate; a caller hands the request over
//            through a one-slot mailbox and spins, then sleeps on a futex, for the answer.
// Node starts with no signal handlers, no stdio setup, no NODE_OPTIONS, no inspector, no
// resource-limit or large-page changes, and leaves OpenSSL (which Python's hashlib and ssl
// have set up in the same process) alone: the host process keeps its own.
#include "embed.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <node.h>
#include <uv.h>

namespace {

using v8::Context;
using v8::Function;
using v8::HandleScope;
using v8::Isolate;
using v8::Local;
using v8::Locker;
using v8::Number;
using v8::Object;
using v8::Promise;
using v8::String;
using v8::TryCatch;
using v8::Value;

// ---- process-wide Node state ------------------------------------------------------------
// Never torn down: at process exit the JS thread may hold the isolate, and PyTorch frees
// tensors until the very end, so these are leaked on purpose (no static destructors).
node::InitializationResult* g_init = nullptr;
node::CommonEnvironmentSetup* g_setup = nullptr;
Isolate* g_isolate = nullptr;
v8::Global<Function>* g_text = new v8::Global<Function>();
v8::Global<Function>* g_slotCall = new v8::Global<Function>();  // the bridge's attachCallSlots answer
double g_callSlots[4];  // (op, a, b, c) in, the answer in [0]: read by g_slotCall
int g_threading = kThreadingLocker;
bool g_started = false;

// The free queue (embed.h): filled under g_freeMutex by any thread, handed to JS through
// g_freeSlots (a Float64Array there) by whoever holds the isolate, before its call.
// The mutex on a line of its own: with answers worked out ahead every caller takes it on every
// allocation, so no other hot global may share its line (BENCHMARKS.md "Per-call cost in a hot loop (run 35)").
alignas(64) std::mutex g_freeMutex;
std::vector<double> g_freeQueue;  // (address, size, stream) each
double g_freeSlots[kFreeQueueLength];
bool g_freeQueueOn = false;  // the bridge took the slots (attachFreeQueue)
// GMLAKE_DRAIN_US (one JS thread only; default 2, "off" or < 0: off): while that thread
// waits for a request it hands frees queued for this long to the engine itself, so the next
// alloc finds none to take first (README "Threading"). g_freePending mirrors the queue's length for its spin loop, on a
// line of its own; g_drains and g_drainedFrees count its hand-overs (under g_freeMutex).
double g_drainUs = -1;
alignas(64) std::atomic<uint32_t> g_freePending{0};
double g_drains = 0, g_drainedFrees = 0;
bool g_draining = false;  // the JS thread's hand-over in progress (read by HandOverFrees on that thread)
bool g_ownCall = false;   // a call the JS thread makes for itself (a drain, a peek): nobody's call, not timed

// GMLAKE_SPECULATE=K (one JS thread only; 0: off; kSpecDefault where the policy is a built-in
// one that can peek and the front cache is off): once the JS thread is idle it
// foresees the next allocation from the last K (the same sizes and streams that followed them
// the last time) and asks the engine where it would land (kOpPeek: no change). An alloc that
// matches takes that address at once, without the hand-off, while nothing happened in between
// (no free queued, no call into JS: the engine's state is the one the peek saw), and queues the
// allocation so that the engine makes it, at that address, before anything after it (the
// bridge checks). Under g_freeMutex: g_spec, g_reqLog (every alloc, in the order callers took
// the mutex, for the JS thread to learn from) and the two counters.
struct Req {
  double size, stream;
};
struct Spec {
  bool valid;
  double size, stream, addr;
};
constexpr int kSpecMaxContext = 8;
// The default with one JS thread (H200, BENCHMARKS.md "Host time per step (runs 31 to 33)": vms's host time in
// alloc+free fell to or below PyTorch expandable_segments' own on lora, fsdp and gpt2_ft).
constexpr int kSpecDefault = 6;
std::atomic<int> g_specContext{0};
bool g_specAsked = false;  // GMLAKE_SPECULATE was set: a start that cannot have it is refused, not quietly off
bool g_bridgePeeks = false;  // the policy has peekCached
bool g_bridgeSpeculatesByDefault = false;  // and is a built-in one (bridge.ts speculatesByDefault)
Spec g_spec{false, 0, 0, 0};
std::vector<Req> g_reqLog;
double g_speculations = 0, g_specHits = 0;
// The JS thread's own: which allocation follows the last k ones (k = K .. 1), in a
// direct-mapped table (a collision only makes a wrong guess, which the caller's exact match
// turns into a miss), the last K allocations, and g_reqLog taken over.
constexpr size_t kSpecSlots = size_t{1} << 16;
struct SpecSlot {
  uint64_t tag;  // 0: empty
  Req next;
};
std::vector<SpecSlot> g_specTable;
Req g_hist[kSpecMaxContext];
int g_histLen = 0;
std::vector<Req> g_learn;

// The front cache (embed.h), all under g_freeMutex. A held block stays allocated in the
// engine's books; `g_live` knows every block the engine handed out (its size and stream at
// the alloc), so that only a block of ours, freed once, with its own size and stream and no
// other stream's use (record_stream: its free waits on events), is ever handed out again.
struct Held {
  double addr, size, stream;
};
struct LiveBlock {
  double size, stream;
  bool held;      // in g_held now
  bool recorded;  // record_stream was called on it
};
std::atomic<size_t> g_frontCacheEntries{0};  // the bridge's frontCacheEntries (0: off)
double g_device = 0;                          // the one device the engine serves
std::vector<Held> g_held;                     // oldest first
std::unordered_map<uint64_t, LiveBlock> g_live;
double g_frontCacheHits = 0, g_frontCacheHitBytes = 0, g_frontCachePasses = 0;
std::string g_startError;  // sticky: a failed start is reported again, never retried
thread_local std::string t_lastError;

// GMLAKE_TIME_CALLS=1 (read at start; not with =total): where a call's time goes on this side, summed over
// the calls that enter JS (a Locker per call): taking the isolate (Locker, Isolate::Scope;
// with one JS thread: from the post to the JS thread's pick-up), the scopes and the
// hand-over of queued frees, and the JS function itself. The library's own timer has the
// whole; what is left is leaving (the scopes' and the Locker's destructors; the answer's
// way back).
bool g_timeParts = false;
bool g_timeWhole = false;  // GMLAKE_TIME_CALLS=total: the library's whole-call timer only
std::atomic<uint64_t> g_partNs[3];  // enter, prepare, js
std::atomic<uint64_t> g_partCalls{0};

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
thread_local uint64_t t_partStart = 0;  // set by gmlake_embed_call, read by CallJs

std::string Describe(Isolate* isolate, TryCatch& tc) {
  if (!tc.HasCaught()) return "unknown JavaScript error";
  Local<Value> ex = tc.Exception();
  Local<Context> ctx = isolate->GetCurrentContext();
  if (ex->IsObject()) {
    Local<Value> stack;
    if (ex.As<Object>()->Get(ctx, String::NewFromUtf8Literal(isolate, "message")).ToLocal(&stack) && stack->IsString()) {
      String::Utf8Value s(isolate, stack);
      if (*s != nullptr) return *s;
    }
  }
  String::Utf8Value s(isolate, ex);
  return *s != nullptr ? *s : "unprintable JavaScript error";
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Runs the event loop until `promise` settles (module loading reads files through libuv),
// at most `limitS` seconds: a load that never settles is an error, not a hang.
bool Settle(Local<Promise> promise, double limitS, std::string* err) {
  uv_loop_t* loop = g_setup->event_loop();
  node::MultiIsolatePlatform* platform = g_init->platform();
  auto t0 = std::chrono::steady_clock::now();
  while (promise->State() == Promise::kPending) {
    uv_run(loop, UV_RUN_NOWAIT);
    platform->DrainTasks(g_isolate);
    g_isolate->PerformMicrotaskCheckpoint();
    if (promise->State() != Promise::kPending) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limitS) {
      *err = "loading the allocator's modules did not finish within " + std::to_string(static_cast<int>(limitS)) + " s";
      return false;
    }
    if (!uv_loop_alive(loop)) usleep(200);
  }
  if (promise->State() == Promise::kRejected) {
    Local<Value> r = promise->Result();
    Local<Context> ctx = g_isolate->GetCurrentContext();
    std::string msg;
    Local<Value> m;
    if (r->IsObject() && r.As<Object>()->Get(ctx, String::NewFromUtf8Literal(g_isolate, "message")).ToLocal(&m) && m->IsString()) {
      String::Utf8Value s(g_isolate, m);
      msg = *s ? *s : "";
    } else {
      String::Utf8Value s(g_isolate, r);
      msg = *s ? *s : "";
    }
    *err = msg.empty() ? "the allocator's boot script failed" : msg;
    return false;
  }
  return true;
}

// Node once per process; the environment, the boot script and the bridge. Runs on the
// thread that will use the isolate first (the caller for locker, the JS thread for thread).
bool StartNode(const std::string& boot, const std::string& config, std::string* err) {
  std::vector<std::string> args = {"gmlake-torch-alloc"};
  // NODE_OPTIONS stays off (the training job's own settings are not ours); our Node's own
  // flags come from GMLAKE_NODE_FLAGS (e.g. V8's --prof to profile the policy in place).
  if (const char* f = std::getenv("GMLAKE_NODE_FLAGS")) {
    std::string w;
    for (const char* c = f;; ++c) {
      if (*c != '\0' && *c != ' ' && *c != '\t') {
        w += *c;
        continue;
      }
      if (!w.empty() && w.rfind("--", 0) != 0) {
        *err = "GMLAKE_NODE_FLAGS takes flags only (each beginning with --), not '" + w + "'";
        return false;
      }
      if (!w.empty()) args.push_back(w);
      w.clear();
      if (*c == '\0') break;
    }
  }
  using namespace node::ProcessInitializationFlags;
  g_init = node::InitializeOncePerProcess(
               args, {kNoDefaultSignalHandling, kNoStdioInitialization, kNoAdjustResourceLimits, kNoUseLargePages,
                      kDisableNodeOptionsEnv, kNoPrintHelpOrVersionOutput, kNoInitOpenSSL})
               .release();
  if (g_init->early_return() || !g_init->errors().empty()) {
    *err = args.size() > 1 ? "Node.js initialization failed (GMLAKE_NODE_FLAGS: " + std::string(std::getenv("GMLAKE_NODE_FLAGS")) + ")" : "Node.js initialization failed";
    for (const std::string& e : g_init->errors()) *err += ": " + e;
    return false;
  }
  std::vector<std::string> errors;
  g_setup = node::CommonEnvironmentSetup::Create(
      g_init->platform(), &errors, g_init->args(), g_init->exec_args(),
      static_cast<node::EnvironmentFlags::Flags>(node::EnvironmentFlags::kOwnsProcessState |
                                                 node::EnvironmentFlags::kNoCreateInspector))
                .release();
  if (g_setup == nullptr) {
    *err = "creating the Node.js environment failed";
    for (const std::string& e : errors) *err += ": " + e;
    return false;
  }
  g_isolate = g_setup->isolate();
  Locker locker(g_isolate);
  Isolate::Scope isolateScope(g_isolate);
  HandleScope handleScope(g_isolate);
  Local<Context> ctx = g_setup->context();
  Context::Scope contextScope(ctx);
  TryCatch tc(g_isolate);
  // process.exit() from a policy would end the Python process: refused.
  std::string script =
      "process.exit = process.reallyExit = () => { throw new Error('process.exit() is not allowed inside the gmlake allocator'); };\n"
      "globalThis.__gmlakeBoot = require('module').createRequire(" + JsonString(boot) + ")(" + JsonString(boot) + ");\n";
  if (node::LoadEnvironment(g_setup->env(), script.c_str()).IsEmpty()) {
    *err = "the allocator's boot script " + boot + " failed: " + Describe(g_isolate, tc);
    return false;
  }
  Local<Value> bootFn;
  if (!ctx->Global()->Get(ctx, String::NewFromUtf8Literal(g_isolate, "__gmlakeBoot")).ToLocal(&bootFn) || !bootFn->IsFunction()) {
    *err = "the allocator's boot script " + boot + " exports no function";
    return false;
  }
  Local<Value> argv[1] = {String::NewFromUtf8(g_isolate, config.c_str()).ToLocalChecked()};
  Local<Value> ret;
  if (!bootFn.As<Function>()->Call(ctx, ctx->Global(), 1, argv).ToLocal(&ret) || !ret->IsPromise()) {
    *err = "the allocator's boot function failed: " + Describe(g_isolate, tc);
    return false;
  }
  if (!Settle(ret.As<Promise>(), 120, err)) return false;
  Local<Value> bridge = ret.As<Promise>()->Result();
  Local<Value> call, text, failure;
  if (bridge->IsObject() && bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(g_isolate, "error")).ToLocal(&failure) &&
      failure->IsString()) {
    String::Utf8Value s(g_isolate, failure);
    *err = *s != nullptr ? *s : "the allocator failed to start";
    return false;
  }
  if (!bridge->IsObject() ||
      !bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(g_isolate, "call")).ToLocal(&call) || !call->IsFunction() ||
      !bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(g_isolate, "text")).ToLocal(&text) || !text->IsFunction()) {
    *err = "the allocator's bridge has no call/text functions";
    return false;
  }
  g_text->Reset(g_isolate, text.As<Function>());
  Local<Value> attach;
  if (bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(g_isolate, "attachFreeQueue")).ToLocal(&attach) && attach->IsFunction()) {
    std::shared_ptr<v8::BackingStore> store =
        v8::ArrayBuffer::NewBackingStore(g_freeSlots, sizeof g_freeSlots, v8::BackingStore::EmptyDeleter, nullptr);
    Local<v8::ArrayBuffer> ab = v8::ArrayBuffer::New(g_isolate, std::move(store));
    Local<Value> aargv[1] = {v8::Float64Array::New(ab, 0, sizeof g_freeSlots / sizeof(double))};
    if (attach.As<Function>()->Call(ctx, bridge, 1, aargv).IsEmpty()) {
      *err = "the allocator's bridge refused the free queue: " + Describe(g_isolate, tc);
      return false;
    }
    g_freeQueue.reserve(3 * (kFreeQueueSlots + kFrontCacheMaxEntries));
    g_freeQueueOn = true;
    Local<Value> entries, device;
    if (bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(g_isolate, "frontCacheEntries")).ToLocal(&entries) &&
        entries->IsNumber() &&
        bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(g_isolate, "device")).ToLocal(&device) && device->IsNumber()) {
      double n = entries.As<Number>()->Value();
      g_device = device.As<Number>()->Value();
      if (n > 0 && n <= kFrontCacheMaxEntries) {
        g_held.reserve(static_cast<size_t>(n) + 1);
        g_live.reserve(16384);
        g_frontCacheEntries.store(static_cast<size_t>(n));
      }
    }
    Local<Value> peeks;
    g_bridgePeeks = bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(g_isolate, "peeks")).ToLocal(&peeks) && peeks->IsTrue();
    Local<Value> byDefault;
    g_bridgeSpeculatesByDefault = bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(g_isolate, "speculatesByDefault")).ToLocal(&byDefault) &&
                                  byDefault->IsTrue();
  }
  // Unasked, on with one JS thread for a built-in policy that peeks, the front cache off (an
  // outside policy's peeks are the user's to turn on); asked, refused below where it cannot be.
  if (!g_specAsked && g_threading == kThreadingThread && g_bridgeSpeculatesByDefault && g_frontCacheEntries.load() == 0) {
    g_specContext.store(kSpecDefault);
  }
  if (g_specContext.load() > 0) {
    if (!g_bridgePeeks) {
      *err = "GMLAKE_SPECULATE needs a policy that can say where an allocation would land (peekCached; vms can)";
      return false;
    }
    if (g_frontCacheEntries.load() != 0) {
      *err = "GMLAKE_SPECULATE and the front cache (frontCacheEntries) do not go together: the cache's held blocks are outside the engine's state the answers are worked out from";
      return false;
    }
    g_specTable.assign(kSpecSlots, SpecSlot{0, {0, 0}});
    g_reqLog.reserve(4096);
    g_learn.reserve(4096);
  }
  Local<Value> attachCall, slotCall;
  if (!bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(g_isolate, "attachCallSlots")).ToLocal(&attachCall) ||
      !attachCall->IsFunction()) {
    *err = "the allocator's bridge has no attachCallSlots function";
    return false;
  }
  std::shared_ptr<v8::BackingStore> slots =
      v8::ArrayBuffer::NewBackingStore(g_callSlots, sizeof g_callSlots, v8::BackingStore::EmptyDeleter, nullptr);
  Local<Value> sargv[1] = {v8::Float64Array::New(v8::ArrayBuffer::New(g_isolate, std::move(slots)), 0, 4)};
  if (!attachCall.As<Function>()->Call(ctx, bridge, 1, sargv).ToLocal(&slotCall) || !slotCall->IsFunction()) {
    *err = "the allocator's bridge refused the call slots: " + Describe(g_isolate, tc);
    return false;
  }
  g_slotCall->Reset(g_isolate, slotCall.As<Function>());
  return true;
}

// Holding the isolate: the queued frees into the slots JS reads at its next call.
void HandOverFrees() {
  std::lock_guard<std::mutex> lock(g_freeMutex);
  g_spec.valid = false;  // the engine's state changes from here on: a foreseen answer no longer holds
  size_t n = g_freeQueue.size();
  // The queue holds at most kFreeQueueSlots frees plus one cache given back (a free that finds
  // it fuller hands it over first). Should it ever hold more, the rest waits for the next call.
  constexpr size_t kRoom = kFreeQueueLength - kFreeQueueHeader;
  size_t take = n < kRoom ? n : kRoom;
  if (g_draining && take > 0) {
    g_drains += 1;
    for (size_t i = 1; i < take; i += 3) g_drainedFrees += g_freeQueue[i] >= 0 ? 1 : 0;  // not the foreseen allocations
  }
  g_freeSlots[2] = g_frontCacheHits;
  g_freeSlots[3] = g_frontCacheHitBytes;
  g_freeSlots[4] = g_frontCachePasses;
  g_freeSlots[5] = g_drains;
  g_freeSlots[6] = g_drainedFrees;
  g_freeSlots[7] = g_speculations;
  g_freeSlots[8] = g_specHits;
  g_freeSlots[9] = g_specContext.load(std::memory_order_relaxed);
  if (n == 0) return;
  std::memcpy(g_freeSlots + kFreeQueueHeader, g_freeQueue.data(), take * sizeof(double));
  g_freeSlots[0] = static_cast<double>(take / 3);
  g_freeQueue.erase(g_freeQueue.begin(), g_freeQueue.begin() + static_cast<std::ptrdiff_t>(take));
  if (g_drainUs >= 0) g_freePending.store(static_cast<uint32_t>(g_freeQueue.size() / 3), std::memory_order_relaxed);
}

// ---- the front cache (under g_freeMutex) ---------------------------------------------------
uint64_t Key(double address) { return static_cast<uint64_t>(address); }

void QueueLocked(double address, double size, double stream) {
  g_freeQueue.push_back(address);
  g_freeQueue.push_back(size);
  g_freeQueue.push_back(stream);
  if (g_drainUs >= 0) g_freePending.store(static_cast<uint32_t>(g_freeQueue.size() / 3), std::memory_order_relaxed);
}

// Every held block to the queue, so the engine sees it at the next call: before it would
// grow, before empty_cache and before statistics, snapshots and close.
void GiveBackHeldLocked() {
  for (const Held& h : g_held) {
    g_live.erase(Key(h.addr));
    QueueLocked(h.addr, h.size, h.stream);
  }
  g_held.clear();
}

// A free with the cache on: held (the oldest held block queued when over the size), or queued.
void HoldOrQueueLocked(double address, double size, double stream) {
  auto it = g_live.find(Key(address));
  if (it != g_live.end() && it->second.held) {
    // Handing it out twice would give two tensors one block: dropped, and said.
    std::fprintf(stderr, "gmlake: free(0x%llx, %.0f) of a block freed already (the front cache holds it); ignored\n",
                 static_cast<unsigned long long>(Key(address)), size);
    return;
  }
  if (it == g_live.end() || it->second.recorded || it->second.size != size || it->second.stream != stream) {
    // Not one to hand out again: the engine decides (an address it did not hand out is an
    // error there; a block used on other streams is freed once their events complete).
    if (it != g_live.end()) g_live.erase(it);
    g_frontCachePasses += 1;
    QueueLocked(address, size, stream);
    return;
  }
  it->second.held = true;
  g_held.push_back({address, size, stream});
  if (g_held.size() > g_frontCacheEntries.load(std::memory_order_relaxed)) {
    Held oldest = g_held.front();
    g_held.erase(g_held.begin());
    g_live.erase(Key(oldest.addr));
    QueueLocked(oldest.addr, oldest.size, oldest.stream);
  }
}

// An alloc with the cache on: the newest held block of this size and stream, or 0 (none).
double TakeHeldLocked(double size, double device, double stream) {
  if (device != g_device) return 0;
  for (size_t i = g_held.size(); i-- > 0;) {
    const Held& h = g_held[i];
    if (h.size != size || h.stream != stream) continue;
    double address = h.addr;
    g_held.erase(g_held.begin() + static_cast<std::ptrdiff_t>(i));
    g_live[Key(address)].held = false;
    g_frontCacheHits += 1;
    g_frontCacheHitBytes += size;
    return address;
  }
  return 0;
}

char* TextJs(int op, const std::string& arg);

// Holding the isolate, after a call: queued frees that failed (a free cannot fail towards
// PyTorch) are said loudly, as an unqueued one would be.
void ReportFreeErrors() {
  if (g_freeSlots[1] == 0) return;
  g_freeSlots[1] = 0;
  char* msg = TextJs(kTextFreeErrors, "");
  std::fprintf(stderr, "%s\n", msg);
  std::free(msg);
}

// ---- one call into JS, on a thread that holds the isolate --------------------------------
uint64_t g_calls = 0;

double CallJs(int op, double a, double b, double c, std::string* err) {
  HandleScope hs(g_isolate);
  Local<Context> ctx = g_setup->context();
  Context::Scope cs(ctx);
  // Nothing else runs Node's loop: every 4096 calls it gets one non-blocking turn, so the
  // isolate's foreground tasks (GC follow-ups) and Node-API finalizers still run.
  if ((++g_calls & 4095) == 0) uv_run(g_setup->event_loop(), UV_RUN_NOWAIT);
  if (g_freeQueueOn) HandOverFrees();
  TryCatch tc(g_isolate);
  // The arguments and the answer go through slots JS shares (attachCallSlots): no boxed numbers.
  g_callSlots[0] = op;
  g_callSlots[1] = a;
  g_callSlots[2] = b;
  g_callSlots[3] = c;
  const bool timed = g_timeParts && !g_ownCall;  // the JS thread's own drains and peeks are nobody's call
  uint64_t tJs = timed ? NowNs() : 0;
  if (g_slotCall->Get(g_isolate)->Call(ctx, v8::Undefined(g_isolate), 0, nullptr).IsEmpty()) {
    *err = "gmlake allocator: " + Describe(g_isolate, tc);
    return kStatusError;
  }
  if (timed) {
    g_partNs[1].fetch_add(tJs - t_partStart, std::memory_order_relaxed);
    g_partNs[2].fetch_add(NowNs() - tJs, std::memory_order_relaxed);
    g_partCalls.fetch_add(1, std::memory_order_relaxed);
  }
  double v = g_callSlots[0];
  if (g_freeSlots[1] != 0) ReportFreeErrors();
  if (v < 0) {
    // The bridge's message for this failure, fetched while the isolate is still held (so
    // another thread's failure cannot replace it).
    Local<Value> targv[2] = {Number::New(g_isolate, kTextLastError), String::Empty(g_isolate)};
    Local<Value> m;
    if (g_text->Get(g_isolate)->Call(ctx, v8::Undefined(g_isolate), 2, targv).ToLocal(&m) && m->IsString()) {
      String::Utf8Value s(g_isolate, m);
      *err = *s ? *s : "";
    }
  }
  return v;
}

char* TextJs(int op, const std::string& arg) {
  HandleScope hs(g_isolate);
  Local<Context> ctx = g_setup->context();
  Context::Scope cs(ctx);
  TryCatch tc(g_isolate);
  if (g_freeQueueOn && op != kTextFreeErrors) HandOverFrees();
  Local<Value> argv[2] = {Number::New(g_isolate, op), String::NewFromUtf8(g_isolate, arg.c_str()).ToLocalChecked()};
  Local<Value> r;
  std::string out;
  if (!g_text->Get(g_isolate)->Call(ctx, v8::Undefined(g_isolate), 2, argv).ToLocal(&r) || !r->IsString()) {
    out = "gmlake allocator: " + Describe(g_isolate, tc);
  } else {
    String::Utf8Value s(g_isolate, r);
    out = *s ? *s : "";
  }
  return strdup(out.c_str());
}

// ---- the JS-thread design: a one-slot mailbox, spin then futex --------------------------
long Futex(std::atomic<uint32_t>* addr, int op, uint32_t val) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op | FUTEX_PRIVATE_FLAG, val, nullptr, nullptr, 0);
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

double NowUs() { return static_cast<double>(NowNs()) / 1e3; }

// Each side spins on a line of its own that holds nothing but the counter it waits for: a
// spinning reader takes a line back between the other side's stores to it, so a request's
// fields written into the line the JS thread spins on would each cost a cross-core transfer.
// The request (written by a caller before `posted`) and the answer (written by the JS thread
// before `done`) sit on lines that nobody spins on. With answers worked out ahead this halved
// the default's hot-loop pair on the H200 (3.33 -> 1.73 us, BENCHMARKS.md "Per-call cost in a hot loop (run 35)").
struct Mailbox {
  alignas(64) std::mutex submit;  // one request in flight
  // the request
  bool isText = false;
  int op = 0;
  double a = 0, b = 0, c = 0;
  uint64_t postedNs = 0;  // GMLAKE_TIME_CALLS: when the caller posted it (the hand-off is the "enter" part)
  std::string textArg;
  alignas(64) std::atomic<uint32_t> posted{0};  // bumped by the caller; the JS thread spins on it
  alignas(64) std::atomic<uint32_t> done{0};    // set to `posted` by the JS thread; the caller spins on it
  // the answer
  alignas(64) double result = 0;
  char* textOut = nullptr;
  std::string error;
  alignas(64) std::atomic<uint32_t> jsSleeping{0};
  alignas(64) std::atomic<uint32_t> callerSleeping{0};
};
Mailbox g_box;
// GMLAKE_SPIN_US: how long either side spins before it sleeps. 1 ms, longer than the gaps
// between a training step's calls (with 50 us the JS thread slept between them and every
// wake-up was paid: +4-6% of step on the H200, docs/notebook/2026-12-01-live-runs.md, runs 14 to 16).
double g_spinUs = 1000;

// GMLAKE_DRAIN_US: the JS thread, waiting, hands the queued frees to the engine (an OP_FLUSH
// of its own). The engine takes the same frees in the same order before the same alloc as
// without it, so it decides the same; only the work moves off the caller's wait.
void DrainFrees() {
  g_draining = g_ownCall = true;
  std::string err;
  double r = CallJs(kOpFlush, 0, 0, 0, &err);
  g_draining = g_ownCall = false;
  if (r < 0) std::fprintf(stderr, "gmlake: handing queued frees to the engine failed: %s\n", err.c_str());
}

// ---- GMLAKE_SPECULATE's foresight (the JS thread only) --------------------------------------

uint64_t MixIn(uint64_t h, double x) {
  uint64_t v;
  std::memcpy(&v, &x, sizeof v);
  return (h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2))) * 0xff51afd7ed558ccdull;
}
uint64_t ContextTag(int k) {
  uint64_t h = static_cast<uint64_t>(k);
  for (int i = g_histLen - k; i < g_histLen; i++) h = MixIn(MixIn(h, g_hist[i].size), g_hist[i].stream);
  // the table takes the low bits, which the products above barely move (sizes differ in high bits)
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 29;
  return h | 1;
}
void Learn(const Req& r) {
  for (int k = 1; k <= g_histLen; k++) {
    uint64_t t = ContextTag(k);
    g_specTable[t & (kSpecSlots - 1)] = {t, r};
  }
  if (g_histLen == g_specContext.load(std::memory_order_relaxed)) {
    std::memmove(g_hist, g_hist + 1, sizeof(Req) * static_cast<size_t>(g_histLen - 1));
    g_histLen--;
  }
  g_hist[g_histLen++] = r;
}
bool Foresee(Req* out) {
  for (int k = g_histLen; k >= 1; k--) {
    uint64_t t = ContextTag(k);
    const SpecSlot& sl = g_specTable[t & (kSpecSlots - 1)];
    if (sl.tag == t) {
      *out = sl.next;
      return true;
    }
  }
  return false;
}

// After each of its calls and drains: learn the allocations since, foresee the next, peek.
// `seen`: the last request taken; one posted since goes first (a peek would only delay it).
// While callers take few answers (under 1 in 8 of the last 256 made: no pattern to foresee,
// or no gap between calls, as in a hot loop), it peeks at 1 in 16 chances only.
void Speculate(uint32_t seen) {
  if (g_specContext.load(std::memory_order_relaxed) == 0) return;
  bool queued;
  double made, taken;
  {
    std::lock_guard<std::mutex> lock(g_freeMutex);
    g_learn.swap(g_reqLog);
    queued = !g_freeQueue.empty();
    made = g_speculations;
    taken = g_specHits;
  }
  for (const Req& r : g_learn) Learn(r);
  g_learn.clear();
  static double windowMade = 0, windowTaken = 0;
  static bool few = false;
  static uint32_t chances = 0;
  if (made - windowMade >= 256) {
    few = (taken - windowTaken) < (made - windowMade) / 8;
    windowMade = made;
    windowTaken = taken;
  }
  Req next;
  if (queued || !Foresee(&next)) return;  // frees first (a drain follows, then this again)
  if (few && (++chances & 15) != 0) return;
  if (g_box.posted.load(std::memory_order_acquire) != seen) return;
  g_ownCall = true;
  std::string err;
  double addr = CallJs(kOpPeek, next.size, g_device, next.stream, &err);
  g_ownCall = false;
  if (addr <= 0) return;
  std::lock_guard<std::mutex> lock(g_freeMutex);
  g_spec = {true, next.size, next.stream, addr};
  g_speculations += 1;
}

void JsThreadMain(std::string boot, std::string config, std::mutex* m, std::condition_variable* cv, bool* ready,
                  std::string* startErr) {
  std::string err;
  bool ok = StartNode(boot, config, &err);
  {
    std::lock_guard<std::mutex> lock(*m);
    *startErr = err;
    *ready = true;
  }
  cv->notify_all();
  if (!ok) return;
  // The JS thread holds the isolate for good.
  Locker locker(g_isolate);
  Isolate::Scope isolateScope(g_isolate);
  uint32_t seen = 0;
  const bool drain = g_drainUs >= 0;
  for (;;) {
    uint32_t p = g_box.posted.load(std::memory_order_acquire);
    if (p == seen) {
      double t0 = NowUs();
      double pendingSince = -1;  // when this wait first saw frees queued
      while ((p = g_box.posted.load(std::memory_order_acquire)) == seen) {
        double now = NowUs();
        if (drain && g_freePending.load(std::memory_order_relaxed) != 0) {
          if (pendingSince < 0) pendingSince = now;
          if (now - pendingSince >= g_drainUs) {
            DrainFrees();
            Speculate(seen);
            pendingSince = -1;
            t0 = NowUs();  // frees coming in: the job is busy, keep spinning
            continue;
          }
        }
        if (now - t0 >= g_spinUs) break;
        CpuRelax();
      }
      if (p == seen) {
        g_box.jsSleeping.store(1, std::memory_order_seq_cst);
        while ((p = g_box.posted.load(std::memory_order_seq_cst)) == seen) Futex(&g_box.posted, FUTEX_WAIT, seen);
        g_box.jsSleeping.store(0, std::memory_order_relaxed);
      }
    }
    seen = p;
    g_box.error.clear();
    if (g_box.isText) {
      g_box.textOut = TextJs(g_box.op, g_box.textArg);
    } else {
      if (g_timeParts) {
        t_partStart = NowNs();
        g_partNs[0].fetch_add(t_partStart - g_box.postedNs, std::memory_order_relaxed);
      }
      g_box.result = CallJs(g_box.op, g_box.a, g_box.b, g_box.c, &g_box.error);
    }
    g_box.done.store(seen, std::memory_order_seq_cst);
    if (g_box.callerSleeping.load(std::memory_order_seq_cst)) Futex(&g_box.done, FUTEX_WAKE, 1);
    Speculate(seen);
  }
}

// Posts the request held in g_box (submit mutex held) and waits for its answer.
void PostAndWait() {
  uint32_t n = g_box.posted.load(std::memory_order_relaxed) + 1;
  g_box.posted.store(n, std::memory_order_seq_cst);
  if (g_box.jsSleeping.load(std::memory_order_seq_cst)) Futex(&g_box.posted, FUTEX_WAKE, 1);
  double t0 = NowUs();
  while (g_box.done.load(std::memory_order_acquire) != n) {
    if (NowUs() - t0 < g_spinUs) {
      CpuRelax();
      continue;
    }
    g_box.callerSleeping.store(1, std::memory_order_seq_cst);
    while (g_box.done.load(std::memory_order_seq_cst) != n) Futex(&g_box.done, FUTEX_WAIT, n - 1);
    g_box.callerSleeping.store(0, std::memory_order_relaxed);
  }
}

std::mutex g_startMutex;

// A v8::Locker that is the thread's outermost ("top level") frees the thread's V8 state at
// its end and builds it again at the next (handle blocks malloc'ed and freed, the stack
// guard and thread-local top set up: a third of a round trip, perf on the 2-core VM). A
// Locker inside an Unlocker instead archives the state, lazily, and takes it back at
// once when the same thread comes again. So each calling thread, on its first call, takes
// an outer Locker and an Unlocker and keeps both for good (never destroyed: a thread's
// archived state, a few KiB with no handles and no JS frames, stays until the process
// ends); its per-call Locker is then an inner one. Another thread's call still
// archives and restores the states, as before.
void KeepThreadState() {
  thread_local bool kept = false;
  if (kept) return;
  kept = true;
  new Locker(g_isolate);
  // Entered for good too (the pattern Locker, Isolate::Scope, Unlocker): a call's
  // Isolate::Scope then only counts an entry, where entering anew looks the thread up in the
  // isolate's table under its mutex.
  g_isolate->Enter();
  new v8::Unlocker(g_isolate);
}

}  // namespace

extern "C" int gmlake_embed_start(const char* boot, const char* config_json, int threading, char* err, size_t errlen) {
  std::lock_guard<std::mutex> lock(g_startMutex);
  auto fail = [&](const std::string& m) {
    g_startError = m;
    std::snprintf(err, errlen, "%s", m.c_str());
    return -1;
  };
  if (g_started) return 0;
  if (!g_startError.empty()) return fail(g_startError);
  // microseconds, a number >= 0: anything else is refused, not read as 0
  auto micros = [](const char* name, double* out) -> std::string {
    const char* s = std::getenv(name);
    if (s == nullptr) return "";
    char* end = nullptr;
    double v = std::strtod(s, &end);
    if (*s == '\0' || *end != '\0' || !(v >= 0) || v > 1e9) return std::string(name) + " takes microseconds (a number >= 0), not '" + s + "'";
    *out = v;
    return "";
  };
  std::string bad = micros("GMLAKE_SPIN_US", &g_spinUs);
  if (!bad.empty()) return fail(bad);
  const char* drain = std::getenv("GMLAKE_DRAIN_US");
  bool drainOff = drain != nullptr && std::strcmp(drain, "off") == 0;
  if (drain != nullptr && !drainOff && threading != kThreadingThread) {
    return fail("GMLAKE_DRAIN_US needs GMLAKE_THREADING=thread: with a Locker per call no thread waits to hand frees over");
  }
  if (const char* k = std::getenv("GMLAKE_SPECULATE")) {
    char* end = nullptr;
    long v = std::strtol(k, &end, 10);
    if (*k == '\0' || *end != '\0' || v < 0 || v > kSpecMaxContext) {
      return fail(std::string("GMLAKE_SPECULATE takes how many allocations the foresight looks back on, 0 (off) to ") +
                  std::to_string(kSpecMaxContext) + ", not '" + k + "'");
    }
    if (v > 0 && threading != kThreadingThread) {
      return fail("GMLAKE_SPECULATE needs GMLAKE_THREADING=thread: only a waiting JS thread works answers out ahead");
    }
    g_specContext.store(static_cast<int>(v));
    g_specAsked = true;
  }
  if (threading == kThreadingThread && !drainOff) {
    // the default with one JS thread: frees handed over 2 us after they are first seen, so that
    // in a hot loop the next alloc, which comes sooner, takes them itself in its own call
    // (H200, docs/notebook/2026-12-01-live-runs.md, runs 31 to 33: the pair 3.20 -> 2.58 us, training's host time as at 0 us)
    g_drainUs = 2;
    bad = micros("GMLAKE_DRAIN_US", &g_drainUs);
    if (!bad.empty()) return fail(bad + " (or off)");
  }
  // "total": only the library's whole-call timer (two clock reads a call, as the plug's for
  // PyTorch's own allocator), not these parts (four more reads on every call into JS)
  if (const char* s = std::getenv("GMLAKE_TIME_CALLS")) {
    g_timeWhole = std::strcmp(s, "total") == 0;
    g_timeParts = *s != '\0' && std::strcmp(s, "0") != 0 && !g_timeWhole;
  }
  g_threading = threading;  // before Node starts: StartNode reads it
  std::string startErr;
  if (threading == kThreadingThread) {
    std::mutex m;
    std::condition_variable cv;
    bool ready = false;
    std::thread(JsThreadMain, std::string(boot), std::string(config_json), &m, &cv, &ready, &startErr).detach();
    std::unique_lock<std::mutex> wait(m);
    cv.wait(wait, [&] { return ready; });
    if (!startErr.empty()) return fail(startErr);
  } else {
    if (!StartNode(boot, config_json, &startErr)) return fail(startErr);
  }
  g_started = true;
  return 0;
}

namespace {

// One call into JS, by the threading chosen at start.
double Dispatch(int op, double a, double b, double c) {
  if (g_threading == kThreadingThread) {
    std::lock_guard<std::mutex> lock(g_box.submit);
    g_box.isText = false;
    g_box.op = op;
    g_box.a = a;
    g_box.b = b;
    g_box.c = c;
    if (g_timeParts) g_box.postedNs = NowNs();
    PostAndWait();
    if (g_box.result < 0) t_lastError = g_box.error;
    return g_box.result;
  }
  uint64_t t0 = g_timeParts ? NowNs() : 0;
  KeepThreadState();
  Locker locker(g_isolate);
  Isolate::Scope isolateScope(g_isolate);
  if (g_timeParts) {
    t_partStart = NowNs();
    g_partNs[0].fetch_add(t_partStart - t0, std::memory_order_relaxed);
  }
  std::string err;
  double r = CallJs(op, a, b, c, &err);
  if (r < 0) t_lastError = err;
  return r;
}

// An alloc with the front cache on: a held block of this size and stream, else the engine
// (from what it holds while the cache holds blocks; else after it got them back).
double AllocFrontCached(double size, double device, double stream) {
  bool holding;
  {
    std::lock_guard<std::mutex> lock(g_freeMutex);
    double address = TakeHeldLocked(size, device, stream);
    if (address != 0) return address;
    holding = !g_held.empty();
  }
  double r = holding ? Dispatch(kOpAllocCached, size, device, stream) : Dispatch(kOpAlloc, size, device, stream);
  if (r == kStatusNotCached) {
    {
      std::lock_guard<std::mutex> lock(g_freeMutex);
      GiveBackHeldLocked();
    }
    r = Dispatch(kOpAlloc, size, device, stream);
  }
  if (r >= 0) {
    std::lock_guard<std::mutex> lock(g_freeMutex);
    g_live[Key(r)] = {size, stream, false, false};
  }
  return r;
}

}  // namespace

extern "C" double gmlake_embed_call(int op, double a, double b, double c) {
  if (!g_started) {
    t_lastError = "gmlake allocator: not started";
    return kStatusNotStarted;
  }
  bool frontCache = g_frontCacheEntries.load(std::memory_order_relaxed) != 0;
  if (op == kOpFree && g_freeQueueOn) {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(g_freeMutex);
        // room for one more entry (this free, or the held block it pushes out)
        if (g_freeQueue.size() < 3 * static_cast<size_t>(kFreeQueueSlots)) {
          if (frontCache) {
            HoldOrQueueLocked(a, b, c);
          } else {
            QueueLocked(a, b, c);
          }
          return 0;
        }
      }
      // full: hand the queue over now, as any call would, then queue this free
      double r = Dispatch(kOpFlush, 0, 0, 0);
      if (r < 0) return r;
    }
  }
  if (op == kOpAlloc && g_specContext.load(std::memory_order_relaxed) != 0) {
    std::lock_guard<std::mutex> lock(g_freeMutex);
    if (g_reqLog.size() >= 4096) g_reqLog.clear();  // the JS thread slept through them: start learning again
    g_reqLog.push_back({a, c});
    // foreseen, and nothing since the peek: the engine would answer exactly this (never a size
    // of 0, whose negative, -0, could not mark the queue entry as an allocation)
    if (g_spec.valid && a > 0 && g_spec.size == a && g_spec.stream == c && b == g_device && g_freeQueue.empty()) {
      g_spec.valid = false;
      g_specHits += 1;
      QueueLocked(g_spec.addr, -a, c);
      return g_spec.addr;
    }
  }
  if (frontCache) {
    if (op == kOpAlloc) return AllocFrontCached(a, b, c);
    if (op == kOpEmptyCache) {
      std::lock_guard<std::mutex> lock(g_freeMutex);
      GiveBackHeldLocked();
    } else if (op == kOpRecordStream) {
      std::lock_guard<std::mutex> lock(g_freeMutex);
      auto it = g_live.find(Key(a));
      if (it != g_live.end()) it->second.recorded = true;
    }
  }
  return Dispatch(op, a, b, c);
}

/**
 * GMLAKE_TIME_CALLS=1: out[0..2] ns taking the isolate, preparing, in JS; out[3] calls; 1.
 * =total: 2 (the library times the whole calls only; out untouched). 0 when off.
 */
extern "C" int gmlake_embed_times(double* out) {
  if (g_timeWhole) return 2;
  if (!g_timeParts) return 0;
  for (int k = 0; k < 3; k++) out[k] = static_cast<double>(g_partNs[k].load(std::memory_order_relaxed));
  out[3] = static_cast<double>(g_partCalls.load(std::memory_order_relaxed));
  return 1;
}

extern "C" char* gmlake_embed_text(int op, const char* arg) {
  if (op == kTextLastError) return strdup(t_lastError.c_str());
  if (!g_started) return strdup("gmlake allocator: not started");
  std::string a = arg != nullptr ? arg : "";
  if (op == kTextClose) {
    // nothing is foreseen after close (the engine hands nothing out)
    std::lock_guard<std::mutex> lock(g_freeMutex);
    g_specContext.store(0);
    g_spec.valid = false;
  }
  if (op != kTextFreeErrors && g_frontCacheEntries.load(std::memory_order_relaxed) != 0) {
    // statistics count, snapshots show and close frees what the engine has: the held blocks too
    std::lock_guard<std::mutex> lock(g_freeMutex);
    GiveBackHeldLocked();
    // after close the engine hands nothing out: nothing is held again
    if (op == kTextClose) {
      g_frontCacheEntries.store(0);
      g_live.clear();
    }
  }
  if (g_threading == kThreadingThread) {
    std::lock_guard<std::mutex> lock(g_box.submit);
    g_box.isText = true;
    g_box.op = op;
    g_box.textArg = a;
    PostAndWait();
    return g_box.textOut;
  }
  KeepThreadState();
  Locker locker(g_isolate);
  Isolate::Scope isolateScope(g_isolate);
  return TextJs(op, a);
}
