import { describe, expect, it } from "vitest";
import { chartRange } from "./time";

const started = (startedAt: string | null) => startedAt;

describe("the chart's range", () => {
  it("is empty before sending starts", () => {
    expect(chartRange(started(null), new Date())).toBeNull();
  });
  it("runs in hours from the hour sending started to now", () => {
    expect(chartRange(started("2026-12-07T19:42:10Z"), new Date("2026-12-07T19:45:00Z"))).toEqual({
      from: "2026-12-07T19:00:00.000Z",
      to: "2026-12-07T20:00:00.000Z",
      interval: "hour",
    });
    expect(chartRange(started("2026-12-07T19:42:10Z"), new Date("2026-12-08T21:10:00Z"))?.to).toBe("2026-12-08T22:00:00.000Z");
  });
  it("runs in days after two days, at most a year", () => {
    expect(chartRange(started("2026-12-01T19:42:10Z"), new Date("2026-12-07T10:00:00Z"))).toEqual({
      from: "2026-12-01T00:00:00.000Z",
      to: "2026-12-08T00:00:00.000Z",
      interval: "day",
    });
    const old = chartRange(started("2020-01-01T00:00:00Z"), new Date("2026-12-07T10:00:00Z"))!;
    expect((Date.parse(old.to) - Date.parse(old.from)) / 86_400_000).toBe(365);
  });
});
