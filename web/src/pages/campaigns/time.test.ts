import { describe, expect, it } from "vitest";
import { utcToZoned, wallAsUtc, zonedToUtc } from "./time";

describe("zonedToUtc", () => {
  it("reads UTC as itself", () => {
    expect(zonedToUtc("2026-12-08T09:00", "UTC")?.toISOString()).toBe("2026-12-08T09:00:00.000Z");
  });
  it("follows winter and summer time", () => {
    expect(zonedToUtc("2026-12-08T09:00", "Europe/Paris")?.toISOString()).toBe("2026-12-08T08:00:00.000Z");
    expect(zonedToUtc("2026-07-08T09:00", "Europe/Paris")?.toISOString()).toBe("2026-07-08T07:00:00.000Z");
    expect(zonedToUtc("2026-07-08T09:00", "America/New_York")?.toISOString()).toBe("2026-07-08T13:00:00.000Z");
  });
  it("handles zones with half hours and across the date line", () => {
    expect(zonedToUtc("2026-12-08T09:00", "Asia/Kolkata")?.toISOString()).toBe("2026-12-08T03:30:00.000Z");
    expect(zonedToUtc("2026-12-08T09:00", "Pacific/Kiritimati")?.toISOString()).toBe("2026-12-07T19:00:00.000Z");
    expect(zonedToUtc("2026-12-08T09:00", "Pacific/Pago_Pago")?.toISOString()).toBe("2026-12-08T20:00:00.000Z");
  });
  it("settles the hours around a change of summer time", () => {
    // 29 March 2026: Paris goes from 02:00 (UTC+1) to 03:00 (UTC+2).
    expect(zonedToUtc("2026-03-29T01:30", "Europe/Paris")?.toISOString()).toBe("2026-03-29T00:30:00.000Z");
    expect(zonedToUtc("2026-03-29T03:30", "Europe/Paris")?.toISOString()).toBe("2026-03-29T01:30:00.000Z");
    // 02:30 does not exist: read with the offset before the change.
    expect(zonedToUtc("2026-03-29T02:30", "Europe/Paris")?.toISOString()).toBe("2026-03-29T01:30:00.000Z");
  });
  it("refuses what is not a date and time", () => {
    expect(zonedToUtc("", "UTC")).toBeNull();
    expect(zonedToUtc("2026-12-08", "UTC")).toBeNull();
  });
});

describe("utcToZoned", () => {
  it("is the inverse of zonedToUtc", () => {
    for (const zone of ["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata", "Australia/Sydney"]) {
      const at = zonedToUtc("2026-10-04T18:45", zone)!;
      expect(utcToZoned(at, zone)).toBe("2026-10-04T18:45");
    }
  });
});

describe("wallAsUtc", () => {
  it("writes the local date and time as UTC", () => {
    expect(wallAsUtc("2026-12-08T09:00")?.toISOString()).toBe("2026-12-08T09:00:00.000Z");
  });
});
