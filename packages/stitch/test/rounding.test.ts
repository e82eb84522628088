import { describe, expect, it } from "vitest";
import { allocationSize, roundSize, roundupPower2NextDivision } from "../src/index.js";

const MiB = 1 << 20;

describe("PyTorch rounding", () => {
  it("rounds to 512 B with a 512 B minimum", () => {
    expect(roundSize(0, null)).toBe(512);
    expect(roundSize(1, null)).toBe(512);
    expect(roundSize(512, null)).toBe(512);
    expect(roundSize(513, null)).toBe(1024);
    expect(roundSize(10 * MiB + 1, null)).toBe(10486272);
  });

  it("picks segment sizes: 2 MiB, 20 MiB, or a multiple of 2 MiB", () => {
    expect(allocationSize(512)).toBe(2 * MiB);
    expect(allocationSize(MiB)).toBe(2 * MiB);
    expect(allocationSize(MiB + 512)).toBe(20 * MiB);
    expect(allocationSize(10 * MiB - 512)).toBe(20 * MiB);
    expect(allocationSize(10 * MiB)).toBe(10 * MiB);
    expect(allocationSize(11 * MiB)).toBe(12 * MiB);
    expect(allocationSize(10486272)).toBe(12 * MiB);
  });

  it("applies roundup_power2_divisions by size interval", () => {
    const table = new Array<number>(16).fill(0);
    table[0] = 4; // sizes < 2 MiB: 4 steps per power of two
    table[3] = 8; // [8 MiB, 16 MiB)
    expect(roundSize(1200 * 1024, table)).toBe(1280 * 1024); // 1 MiB + 4 steps of 256 KiB
    expect(roundSize(1024 * 1024, table)).toBe(MiB); // a power of two stays
    expect(roundSize(9 * MiB + 1, table)).toBe(10 * MiB); // steps of 1 MiB
    expect(roundSize(1000, table)).toBe(1024); // below 512 * 4: plain 512 rounding
    expect(roundSize(5 * MiB + 1, table)).toBe(5 * MiB + 512); // no divisions for [4, 8) MiB
    expect(roundupPower2NextDivision(3 * MiB, 2)).toBe(3 * MiB);
    expect(roundupPower2NextDivision(3 * MiB + 1, 2)).toBe(4 * MiB);
  });
});
