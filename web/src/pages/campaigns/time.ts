// Dates and time zones for scheduling: the API's `scheduledFor` is an instant in UTC, the form
// a local date and time (an <input type="datetime-local"> value, "2026-12-08T09:00") in a
// chosen IANA time zone.

/** The time zones the browser knows, with UTC first (what the API speaks). */
export function timeZones(): string[] {
  const all = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
  return ["UTC", ...all.filter((z) => z !== "UTC")];
}

/** The browser's own time zone (UTC when it does not say). */
export function browserTimeZone(): string {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
}

const LOCAL = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})$/;

/** The parts of a datetime-local value as if it were UTC, in milliseconds; null when malformed. */
function wallMillis(local: string): number | null {
  const m = LOCAL.exec(local);
  if (!m) return null;
  const [y = 0, mo = 1, d = 1, h = 0, mi = 0] = m.slice(1).map(Number);
  return Date.UTC(y, mo - 1, d, h, mi);
}

/** How far `zone`'s wall clock is ahead of UTC at the instant `at`, in milliseconds. */
export function zoneOffset(at: Date, zone: string): number {
  const parts = new Intl.DateTimeFormat("en-US", {
    timeZone: zone,
    hourCycle: "h23",
    year: "numeric",
    month: "2-digit",
    day: "2-digit",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
  }).formatToParts(at);
  const get = (type: string) => Number(parts.find((p) => p.type === type)?.value);
  const wall = Date.UTC(get("year"), get("month") - 1, get("day"), get("hour"), get("minute"), get("second"));
  return wall - Math.floor(at.getTime() / 1000) * 1000;
}

/**
 * The instant a local date and time in `zone` means; null when malformed. A time skipped by a
 * change to summer time is read with the offset before the change (02:30 becomes 03:30).
 */
export function zonedToUtc(local: string, zone: string): Date | null {
  const wall = wallMillis(local);
  if (wall === null) return null;
  // The instant is the wall time less the zone's offset then; the offset is one of those at
  // the instants the two offsets around `wall` give. The one that reads back as `wall` wins
  // (the earlier when a clock set back makes two); in a skipped hour neither does.
  const offsets = [...new Set([wall - 86_400_000, wall, wall + 86_400_000].map((t) => zoneOffset(new Date(t), zone)))];
  const fits = offsets
    .map((offset) => wall - offset)
    .filter((t) => t + zoneOffset(new Date(t), zone) === wall)
    .sort((a, b) => a - b);
  if (fits[0] !== undefined) return new Date(fits[0]);
  return new Date(wall - Math.min(...offsets));
}

/** An instant as a datetime-local value in `zone` ("2026-12-08T09:00"). */
export function utcToZoned(at: Date, zone: string): string {
  const wall = new Date(at.getTime() + zoneOffset(at, zone));
  return wall.toISOString().slice(0, 16);
}

/** The local date and time written as UTC: what `inContactTimeZone` sends. */
export function wallAsUtc(local: string): Date | null {
  const wall = wallMillis(local);
  return wall === null ? null : new Date(wall);
}

/** "8 Dec 2026, 09:00 UTC" style, in plain words, for a zone. */
export function formatIn(at: Date | string, zone: string): string {
  const date = typeof at === "string" ? new Date(at) : at;
  return `${new Intl.DateTimeFormat(undefined, {
    timeZone: zone,
    dateStyle: "medium",
    timeStyle: "short",
  }).format(date)} ${zone === "UTC" ? "UTC" : `(${zone})`}`;
}

const HOUR = 3_600_000;

/**
 * The range of the chart: from the hour sending started to now (opens and clicks go on after
 * sending), in hours up to two days, then in days (at most a year, the newest).
 */
export function chartRange(startedAt: string | null, now: Date): { from: string; to: string; interval: "hour" | "day" } | null {
  if (!startedAt) return null;
  const start = Math.floor(new Date(startedAt).getTime() / HOUR) * HOUR;
  const until = Math.max(start + HOUR, Math.ceil(now.getTime() / HOUR) * HOUR);
  if (until - start <= 48 * HOUR) return { from: iso(start), to: iso(until), interval: "hour" };
  const day = 24 * HOUR;
  const to = Math.ceil(until / day) * day;
  // 365 UTC days at most: in the browser's time zone they touch 366 calendar days, the most
  // the API's daily series holds.
  return { from: iso(Math.max(Math.floor(start / day) * day, to - 365 * day)), to: iso(to), interval: "day" };
}

const iso = (ms: number) => new Date(ms).toISOString();
