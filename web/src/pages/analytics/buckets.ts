// The buckets of a time series labelled for people, the one way every chart and its table
// says them: an hour as "14:00" (with its date, "Dec 8, 14:00", when the series spans days), a
// day as "Dec 8" (with the year when the series spans years), in the browser's locale and in
// the series' time zone (the buckets follow it: a day bucket starts at its midnight there).

export type Interval = "hour" | "day";

/** Labels the buckets `times` (their starts, RFC 3339) of a series of `interval` in `timeZone`
 * (the browser's when not given); `locale` is the browser's when not given. */
export function bucketLabels(times: readonly string[], interval: Interval, timeZone?: string, locale?: string): (time: string) => string {
  const zone = timeZone ? { timeZone } : {};
  const key = (options: Intl.DateTimeFormatOptions) => {
    const f = new Intl.DateTimeFormat("en-US", { ...zone, ...options });
    return new Set(times.map((t) => f.format(new Date(t)))).size > 1;
  };
  const manyYears = key({ year: "numeric" });
  let format: Intl.DateTimeFormat;
  if (interval === "day") {
    format = new Intl.DateTimeFormat(locale, { ...zone, month: "short", day: "numeric", ...(manyYears ? { year: "numeric" } : {}) });
  } else {
    const manyDays = key({ year: "numeric", month: "numeric", day: "numeric" });
    // A 24-hour clock reads "02:00", a 12-hour one "2:00 AM".
    const cycle = new Intl.DateTimeFormat(locale, { hour: "numeric" }).resolvedOptions().hourCycle;
    format = new Intl.DateTimeFormat(locale, {
      ...zone,
      ...(manyDays ? { month: "short", day: "numeric" } : {}),
      ...(manyYears ? { year: "numeric" } : {}),
      hour: cycle === "h23" || cycle === "h24" ? "2-digit" : "numeric",
      minute: "2-digit",
    });
  }
  return (time: string) => {
    const at = new Date(time);
    return Number.isNaN(at.getTime()) ? time : format.format(at);
  };
}
