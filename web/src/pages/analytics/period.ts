// The analytics page's periods: each a range ending now, with the width of the time series'
// buckets.

export type Period = "24h" | "7d" | "30d" | "90d";

export const PERIODS: { id: Period; label: string; hours: number; interval: "hour" | "day" }[] = [
  { id: "24h", label: "Last 24 hours", hours: 24, interval: "hour" },
  { id: "7d", label: "Last 7 days", hours: 7 * 24, interval: "day" },
  { id: "30d", label: "Last 30 days", hours: 30 * 24, interval: "day" },
  { id: "90d", label: "Last 90 days", hours: 90 * 24, interval: "day" },
];

export interface Range {
  from: string;
  to: string;
  interval: "hour" | "day";
}

/** The range of a period ending at `now`, as the API's `from` and `to` (RFC 3339, UTC). */
export function rangeOf(period: Period, now: Date): Range {
  const p = PERIODS.find((x) => x.id === period) ?? { hours: 30 * 24, interval: "day" as const };
  // The end of the current minute (the end is exclusive): what happened just now counts, and
  // loads within a minute ask for the same range.
  const to = new Date((Math.floor(now.getTime() / 60_000) + 1) * 60_000);
  const from = new Date(to.getTime() - p.hours * 3_600_000);
  return { from: from.toISOString(), to: to.toISOString(), interval: p.interval };
}

export function isPeriod(v: string | null): v is Period {
  return PERIODS.some((p) => p.id === v);
}

/** A rate between 0 and 1 as a percentage. */
export function percent(rate: number): string {
  return `${(rate * 100).toFixed(1)}%`;
}
