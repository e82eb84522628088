import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

export default defineConfig({
  resolve: {
    // examples/my-policy imports the package by name, as a user's package does: here, its source
    alias: {
      "@gmlake/stitch/policy": fileURLToPath(new URL("./src/policy-kit.ts", import.meta.url)),
      "@gmlake/stitch/testing": fileURLToPath(new URL("./src/testing.ts", import.meta.url)),
    },
  },
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    // On a GPU host, test files that compare the device's free memory before and after
    // must not run beside each other: run files one at a time there.
    fileParallelism: !existsSync("/dev/nvidiactl"),
  },
});
