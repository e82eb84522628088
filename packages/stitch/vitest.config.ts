import { existsSync } from "node:fs";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    // On a GPU host, test files that compare the device's free memory before and after
    // must not run beside each other: run files one at a time there.
    fileParallelism: !existsSync("/dev/nvidiactl"),
  },
});
