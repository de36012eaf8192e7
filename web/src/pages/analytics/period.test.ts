import { describe, expect, it } from "vitest";
import { isPeriod, percent, rangeOf } from "./period";

describe("analytics periods", () => {
  const now = new Date("2026-12-07T19:45:31.250Z");

  it("ends after the current minute with the period's buckets", () => {
    expect(rangeOf("24h", now)).toEqual({
      from: "2026-12-06T19:46:00.000Z",
      to: "2026-12-07T19:46:00.000Z",
      interval: "hour",
    });
    expect(rangeOf("7d", now)).toEqual({
      from: "2026-11-30T19:46:00.000Z",
      to: "2026-12-07T19:46:00.000Z",
      interval: "day",
    });
    expect(rangeOf("90d", now).from).toBe("2026-09-08T19:46:00.000Z");
  });

  it("knows its periods and says rates as percentages", () => {
    expect(isPeriod("30d")).toBe(true);
    expect(isPeriod("1y")).toBe(false);
    expect(isPeriod(null)).toBe(false);
    expect(percent(0.4567)).toBe("45.7%");
    expect(percent(0)).toBe("0.0%");
  });
});
