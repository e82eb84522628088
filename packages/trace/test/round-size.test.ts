import { describe, expect, it } from "vitest";
import { floorLog2, roundSize } from "../src/index.js";

describe("roundSize (c10 round_size)", () => {
  it("512-byte blocks", () => {
    expect(roundSize(1)).toBe(512);
    expect(roundSize(511)).toBe(512);
    expect(roundSize(512)).toBe(512);
    expect(roundSize(513)).toBe(1024);
    expect(roundSize(3000)).toBe(3072);
    expect(roundSize(10 * 2 ** 20 + 1)).toBe(10486272); // pytorch-allocator.md's example
  });

  it("roundup_power2_divisions: d steps between powers of two, by interval log2(size) - 20", () => {
    const div = new Array<number>(16).fill(0);
    div[0] = 4; // sizes below 2 MiB (index 0 also covers < 1 MiB)
    div[1] = 2; // [2 MiB, 4 MiB)
    // 1.1 MiB with 4 divisions: steps of 256 KiB above 1 MiB -> 1.25 MiB
    expect(roundSize(1.1 * 2 ** 20, div)).toBe(1.25 * 2 ** 20);
    // 2.5 MiB with 2 divisions: steps of 1 MiB above 2 MiB -> 3 MiB
    expect(roundSize(2.5 * 2 ** 20, div)).toBe(3 * 2 ** 20);
    // a power of two stays
    expect(roundSize(2 * 2 ** 20, div)).toBe(2 * 2 ** 20);
    // only when size > 512 * d: 1000 B with d = 4 uses 512-rounding
    expect(roundSize(1000, div)).toBe(1024);
    // 5000 B with 4 divisions: floor 4096, step 1024 -> 5120
    expect(roundSize(5000, div)).toBe(5120);
    // intervals without divisions keep 512-rounding
    expect(roundSize(5 * 2 ** 20 + 1, div)).toBe(5 * 2 ** 20 + 512);
  });

  it("floorLog2 is exact near powers of two where Math.log2 rounds", () => {
    expect(floorLog2(2 ** 47 - 1)).toBe(46);
    expect(floorLog2(2 ** 47)).toBe(47);
    expect(floorLog2(2 ** 52 - 1)).toBe(51);
    expect(floorLog2(1)).toBe(0);
    expect(floorLog2(2 ** 32 + 5)).toBe(32);
  });
});
