// The Node environment and the calls into the bridge (node_host.h): native/boot.cjs imports
// the bridge (dist/bridge.js) and through it @gmlake/stitch; each call is one synchronous call
// of the bridge's `call(op, a, b, c)`, its arguments and answer passed through shared slots
// (attachCallSlots).
#include "node_host.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <node.h>
#include <uv.h>

#include "contract.h"
#include "timing.h"

namespace gmlake {

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

}  // namespace

struct NodeHost::State {
  node::InitializationResult* init = nullptr;
  node::CommonEnvironmentSetup* setup = nullptr;
  Isolate* isolate = nullptr;
  v8::Global<Function> text;
  v8::Global<Function> slotCall;  // the bridge's attachCallSlots answer
  double callSlots[4] = {};       // (op, a, b, c) in, the answer in [0]: read by slotCall
  uint64_t calls = 0;

  // Runs the event loop until `promise` settles (module loading reads files through libuv),
  // at most `limitS` seconds: a load that never settles is an error, not a hang.
  bool Settle(Local<Promise> promise, double limitS, std::string* err) {
    uv_loop_t* loop = setup->event_loop();
    node::MultiIsolatePlatform* platform = init->platform();
    auto t0 = std::chrono::steady_clock::now();
    while (promise->State() == Promise::kPending) {
      uv_run(loop, UV_RUN_NOWAIT);
      platform->DrainTasks(isolate);
      isolate->PerformMicrotaskCheckpoint();
      if (promise->State() != Promise::kPending) break;
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limitS) {
        *err = "loading the allocator's modules did not finish within " + std::to_string(static_cast<int>(limitS)) + " s";
        return false;
      }
      if (!uv_loop_alive(loop)) usleep(200);
    }
    if (promise->State() == Promise::kRejected) {
      Local<Value> r = promise->Result();
      Local<Context> ctx = isolate->GetCurrentContext();
      std::string msg;
      Local<Value> m;
      if (r->IsObject() && r.As<Object>()->Get(ctx, String::NewFromUtf8Literal(isolate, "message")).ToLocal(&m) && m->IsString()) {
        String::Utf8Value s(isolate, m);
        msg = *s ? *s : "";
      } else {
        String::Utf8Value s(isolate, r);
        msg = *s ? *s : "";
      }
      *err = msg.empty() ? "the allocator's boot script failed" : msg;
      return false;
    }
    return true;
  }
};

bool NodeHost::Start(const std::string& boot, const std::string& config, const std::string& nodeFlagsText,
                     const std::vector<std::string>& nodeFlags, double* freeSlots, size_t freeSlotCount, const OnBridge& onBridge,
                     std::string* err) {
  s_ = new State();  // never freed (node_host.h)
  State& s = *s_;
  std::vector<std::string> args = {"gmlake-torch-alloc"};
  args.insert(args.end(), nodeFlags.begin(), nodeFlags.end());
  using namespace node::ProcessInitializationFlags;
  s.init = node::InitializeOncePerProcess(
               args, {kNoDefaultSignalHandling, kNoStdioInitialization, kNoAdjustResourceLimits, kNoUseLargePages,
                      kDisableNodeOptionsEnv, kNoPrintHelpOrVersionOutput, kNoInitOpenSSL})
               .release();
  if (s.init->early_return() || !s.init->errors().empty()) {
    *err = args.size() > 1 ? "Node.js initialization failed (GMLAKE_NODE_FLAGS: " + nodeFlagsText + ")" : "Node.js initialization failed";
    for (const std::string& e : s.init->errors()) *err += ": " + e;
    return false;
  }
  std::vector<std::string> errors;
  s.setup = node::CommonEnvironmentSetup::Create(
      s.init->platform(), &errors, s.init->args(), s.init->exec_args(),
      static_cast<node::EnvironmentFlags::Flags>(node::EnvironmentFlags::kOwnsProcessState |
                                                 node::EnvironmentFlags::kNoCreateInspector))
                .release();
  if (s.setup == nullptr) {
    *err = "creating the Node.js environment failed";
    for (const std::string& e : errors) *err += ": " + e;
    return false;
  }
  Isolate* isolate = s.isolate = s.setup->isolate();
  Locker locker(isolate);
  Isolate::Scope isolateScope(isolate);
  HandleScope handleScope(isolate);
  Local<Context> ctx = s.setup->context();
  Context::Scope contextScope(ctx);
  TryCatch tc(isolate);
  // process.exit() from a policy would end the Python process: refused.
  std::string script =
      "process.exit = process.reallyExit = () => { throw new Error('process.exit() is not allowed inside the gmlake allocator'); };\n"
      "globalThis.__gmlakeBoot = require('module').createRequire(" + JsonString(boot) + ")(" + JsonString(boot) + ");\n";
  if (node::LoadEnvironment(s.setup->env(), script.c_str()).IsEmpty()) {
    *err = "the allocator's boot script " + boot + " failed: " + Describe(isolate, tc);
    return false;
  }
  Local<Value> bootFn;
  if (!ctx->Global()->Get(ctx, String::NewFromUtf8Literal(isolate, "__gmlakeBoot")).ToLocal(&bootFn) || !bootFn->IsFunction()) {
    *err = "the allocator's boot script " + boot + " exports no function";
    return false;
  }
  Local<Value> argv[1] = {String::NewFromUtf8(isolate, config.c_str()).ToLocalChecked()};
  Local<Value> ret;
  if (!bootFn.As<Function>()->Call(ctx, ctx->Global(), 1, argv).ToLocal(&ret) || !ret->IsPromise()) {
    *err = "the allocator's boot function failed: " + Describe(isolate, tc);
    return false;
  }
  if (!s.Settle(ret.As<Promise>(), 120, err)) return false;
  Local<Value> bridge = ret.As<Promise>()->Result();
  Local<Value> call, text, failure;
  if (bridge->IsObject() && bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(isolate, "error")).ToLocal(&failure) &&
      failure->IsString()) {
    String::Utf8Value m(isolate, failure);
    *err = *m != nullptr ? *m : "the allocator failed to start";
    return false;
  }
  if (!bridge->IsObject() ||
      !bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(isolate, "call")).ToLocal(&call) || !call->IsFunction() ||
      !bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(isolate, "text")).ToLocal(&text) || !text->IsFunction()) {
    *err = "the allocator's bridge has no call/text functions";
    return false;
  }
  s.text.Reset(isolate, text.As<Function>());
  Bridge offer;
  Local<Value> attach;
  if (bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(isolate, "attachFreeQueue")).ToLocal(&attach) && attach->IsFunction()) {
    std::shared_ptr<v8::BackingStore> store =
        v8::ArrayBuffer::NewBackingStore(freeSlots, freeSlotCount * sizeof(double), v8::BackingStore::EmptyDeleter, nullptr);
    Local<v8::ArrayBuffer> ab = v8::ArrayBuffer::New(isolate, std::move(store));
    Local<Value> aargv[1] = {v8::Float64Array::New(ab, 0, freeSlotCount)};
    if (attach.As<Function>()->Call(ctx, bridge, 1, aargv).IsEmpty()) {
      *err = "the allocator's bridge refused the free queue: " + Describe(isolate, tc);
      return false;
    }
    offer.freeQueue = true;
    Local<Value> entries, device;
    if (bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(isolate, "frontCacheEntries")).ToLocal(&entries) &&
        entries->IsNumber() &&
        bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(isolate, "device")).ToLocal(&device) && device->IsNumber()) {
      offer.sized = true;
      offer.frontCacheEntries = entries.As<Number>()->Value();
      offer.device = device.As<Number>()->Value();
    }
    Local<Value> peeks;
    offer.peeks = bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(isolate, "peeks")).ToLocal(&peeks) && peeks->IsTrue();
    Local<Value> byDefault;
    offer.speculatesByDefault = bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(isolate, "speculatesByDefault")).ToLocal(&byDefault) &&
                                byDefault->IsTrue();
    Local<Value> records;
    offer.records = bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(isolate, "records")).ToLocal(&records) && records->IsTrue();
  }
  if (!onBridge(offer, err)) return false;
  Local<Value> attachCall, slotCall;
  if (!bridge.As<Object>()->Get(ctx, String::NewFromUtf8Literal(isolate, "attachCallSlots")).ToLocal(&attachCall) ||
      !attachCall->IsFunction()) {
    *err = "the allocator's bridge has no attachCallSlots function";
    return false;
  }
  std::shared_ptr<v8::BackingStore> slots =
      v8::ArrayBuffer::NewBackingStore(s.callSlots, sizeof s.callSlots, v8::BackingStore::EmptyDeleter, nullptr);
  Local<Value> sargv[1] = {v8::Float64Array::New(v8::ArrayBuffer::New(isolate, std::move(slots)), 0, 4)};
  if (!attachCall.As<Function>()->Call(ctx, bridge, 1, sargv).ToLocal(&slotCall) || !slotCall->IsFunction()) {
    *err = "the allocator's bridge refused the call slots: " + Describe(isolate, tc);
    return false;
  }
  s.slotCall.Reset(isolate, slotCall.As<Function>());
  return true;
}

bool NodeHost::Call(int op, double a, double b, double c, double* answer, uint64_t* jsNs, std::string* err) {
  State& s = *s_;
  HandleScope hs(s.isolate);
  Local<Context> ctx = s.setup->context();
  Context::Scope cs(ctx);
  // Nothing else runs Node's loop: every 4096 calls it gets one non-blocking turn, so the
  // isolate's foreground tasks (GC follow-ups) and Node-API finalizers still run.
  if ((++s.calls & 4095) == 0) uv_run(s.setup->event_loop(), UV_RUN_NOWAIT);
  TryCatch tc(s.isolate);
  // The arguments and the answer go through slots JS shares (attachCallSlots): no boxed numbers.
  s.callSlots[0] = op;
  s.callSlots[1] = a;
  s.callSlots[2] = b;
  s.callSlots[3] = c;
  if (jsNs != nullptr) jsNs[0] = NowNs();
  if (s.slotCall.Get(s.isolate)->Call(ctx, v8::Undefined(s.isolate), 0, nullptr).IsEmpty()) {
    *err = "gmlake allocator: " + Describe(s.isolate, tc);
    return false;
  }
  if (jsNs != nullptr) jsNs[1] = NowNs();
  *answer = s.callSlots[0];
  return true;
}

void NodeHost::LastError(std::string* err) {
  State& s = *s_;
  HandleScope hs(s.isolate);
  Local<Context> ctx = s.setup->context();
  Context::Scope cs(ctx);
  TryCatch tc(s.isolate);  // a throw here leaves err as it was
  Local<Value> targv[2] = {Number::New(s.isolate, kTextLastError), String::Empty(s.isolate)};
  Local<Value> m;
  if (s.text.Get(s.isolate)->Call(ctx, v8::Undefined(s.isolate), 2, targv).ToLocal(&m) && m->IsString()) {
    String::Utf8Value t(s.isolate, m);
    *err = *t ? *t : "";
  }
}

char* NodeHost::Text(int op, const std::string& arg) {
  State& s = *s_;
  HandleScope hs(s.isolate);
  Local<Context> ctx = s.setup->context();
  Context::Scope cs(ctx);
  TryCatch tc(s.isolate);
  Local<Value> argv[2] = {Number::New(s.isolate, op), String::NewFromUtf8(s.isolate, arg.c_str()).ToLocalChecked()};
  Local<Value> r;
  std::string out;
  if (!s.text.Get(s.isolate)->Call(ctx, v8::Undefined(s.isolate), 2, argv).ToLocal(&r) || !r->IsString()) {
    out = "gmlake allocator: " + Describe(s.isolate, tc);
  } else {
    String::Utf8Value t(s.isolate, r);
    out = *t ? *t : "";
  }
  return strdup(out.c_str());
}

void NodeHost::HoldForGood() {
  // the JS thread's own, never destroyed: it holds the isolate until the process ends
  new Locker(s_->isolate);
  s_->isolate->Enter();
}

// A v8::Locker that is the thread's outermost ("top level") frees the thread's V8 state at
// its end and builds it again at the next (handle blocks malloc'ed and freed, the stack
// guard and thread-local top set up: a third of a round trip, perf on the 2-core VM). A
// Locker inside an Unlocker instead archives the state, lazily, and takes it back at
// once when the same thread comes again. So each calling thread, on its first call, takes
// an outer Locker and an Unlocker and keeps both for good (never destroyed: a thread's
// archived state, a few KiB with no handles and no JS frames, stays until the process
// ends); its per-call Locker is then an inner one. Another thread's call still
// archives and restores the states, as before.
void NodeHost::KeepThreadState() {
  thread_local bool kept = false;
  if (kept) return;
  kept = true;
  new Locker(s_->isolate);
  // Entered for good too (the pattern Locker, Isolate::Scope, Unlocker): a call's
  // Isolate::Scope then only counts an entry, where entering anew looks the thread up in the
  // isolate's table under its mutex.
  s_->isolate->Enter();
  new v8::Unlocker(s_->isolate);
}

void NodeHost::LockedImpl(void (*fn)(void*), void* arg) {
  KeepThreadState();
  Locker locker(s_->isolate);
  Isolate::Scope isolateScope(s_->isolate);
  fn(arg);
}

}  // namespace gmlake
