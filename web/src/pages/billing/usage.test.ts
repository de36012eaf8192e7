import { describe, expect, it } from "vitest";
import { parseCap, usageWords, usedPercent } from "./usage";

describe("usage", () => {
  it("gives the share of the cap used", () => {
    expect(usedPercent({ used: 50, limit: 200 })).toBe(25);
    expect(usedPercent({ used: 500, limit: 200 })).toBe(100);
    expect(usedPercent({ used: 5, limit: null })).toBeNull();
    expect(usedPercent({ used: 0, limit: 0 })).toBe(100);
  });

  it("says the figures in words", () => {
    expect(usageWords({ used: 1200, limit: 10000 })).toBe("1,200 of 10,000 used (12 %)");
    expect(usageWords({ used: 3 })).toBe("3 used (no cap)");
  });

  it("reads a cap", () => {
    expect(parseCap("")).toBeNull();
    expect(parseCap(" 10,000 ")).toBe(10000);
    expect(parseCap("-1")).toBe("invalid");
    expect(parseCap("ten")).toBe("invalid");
  });
});
