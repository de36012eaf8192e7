import { describe, expect, it } from "vitest";
import { bucketLabels } from "./buckets";

const hours = (from: string, n: number) => Array.from({ length: n }, (_, i) => new Date(Date.parse(from) + i * 3_600_000).toISOString());

describe("bucket labels", () => {
  it("say an hour as its time when the series stays within a day", () => {
    const times = hours("2026-12-08T02:00:00Z", 12);
    const label = bucketLabels(times, "hour", "UTC", "en-GB");
    expect(label("2026-12-08T02:00:00Z")).toBe("02:00");
    expect(label("2026-12-08T13:00:00Z")).toBe("13:00");
    expect(bucketLabels(times, "hour", "UTC", "en-US")("2026-12-08T13:00:00Z")).toBe("1:00 PM");
  });

  it("add the date to hours when the series spans days", () => {
    const times = hours("2026-12-07T20:00:00Z", 24);
    expect(bucketLabels(times, "hour", "UTC", "en-US")("2026-12-08T14:00:00Z")).toBe("Dec 8, 2:00 PM");
    expect(bucketLabels(times, "hour", "UTC", "en-GB")("2026-12-08T14:00:00Z")).toBe("8 Dec, 14:00");
  });

  it("count days in the series' time zone, not UTC's", () => {
    // 02:00 to 13:00 UTC is one day in UTC but two in New York (21:00 the day before).
    const times = hours("2026-12-08T02:00:00Z", 12);
    expect(bucketLabels(times, "hour", "America/New_York", "en-US")("2026-12-08T02:00:00Z")).toBe("Dec 7, 9:00 PM");
    expect(bucketLabels(times, "hour", "Asia/Kolkata", "en-GB")(times[0]!)).toBe("07:30");
  });

  it("say a day as its date in the zone the buckets follow", () => {
    const days = ["2026-12-07T05:00:00Z", "2026-12-08T05:00:00Z"];
    const label = bucketLabels(days, "day", "America/New_York", "en-US");
    expect(label(days[0]!)).toBe("Dec 7");
    expect(label(days[1]!)).toBe("Dec 8");
    expect(bucketLabels(["2026-12-08T00:00:00Z"], "day", "UTC", "en-GB")("2026-12-08T00:00:00Z")).toBe("8 Dec");
  });

  it("add the year when the series spans years", () => {
    const days = ["2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z"];
    expect(bucketLabels(days, "day", "UTC", "en-US")(days[1]!)).toBe("Jan 1, 2027");
  });

  it("leave a time it cannot read as it is", () => {
    expect(bucketLabels([], "hour", "UTC", "en-US")("soon")).toBe("soon");
  });
});
