"use strict";
// Run by the Node embedded in libgmlake_embed.so (native/embed.cc): imports the bridge
// (ESM) and hands back its call/text functions, or { error } when it cannot start. A
// CommonJS module, because import() from the embedder's own script fails in Node 18.20
// ("Invalid host defined options"). Never a rejected promise: Node would end the process.
const { pathToFileURL } = require("node:url");
const { join } = require("node:path");

// A stray asynchronous error in a policy must not end the host process (PyTorch's).
process.on("uncaughtException", (e) => console.error("gmlake: uncaught exception in the allocator:", e));
process.on("unhandledRejection", (e) => console.error("gmlake: unhandled rejection in the allocator:", e));

module.exports = async function boot(configJson) {
  try {
    const { createBridge } = await import(pathToFileURL(join(__dirname, "..", "dist", "bridge.js")).href);
    return await createBridge(JSON.parse(configJson));
  } catch (e) {
    return { error: e instanceof Error ? e.message : String(e) };
  }
};
