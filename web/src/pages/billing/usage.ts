// Billing figures in words, apart for unit tests.
import type { Schemas } from "../../api/client";

type Usage = Schemas["CategoryUsageBody"];

/** The share of the cap used, 0..100 (null without a cap). */
export function usedPercent(u: Usage): number | null {
  if (u.limit === null || u.limit === undefined) return null;
  if (u.limit === 0) return 100;
  return Math.min(100, Math.round((u.used / u.limit) * 100));
}

/** "1,200 of 10,000 used (12 %)", or "1,200 used (no cap)". */
export function usageWords(u: Usage): string {
  const pct = usedPercent(u);
  if (pct === null) return `${u.used.toLocaleString()} used (no cap)`;
  return `${u.used.toLocaleString()} of ${u.limit!.toLocaleString()} used (${pct} %)`;
}

/** An amount in the currency's smallest unit, as money. */
export function money(amount: number, currency: string): string {
  try {
    return new Intl.NumberFormat(undefined, { style: "currency", currency: currency.toUpperCase() }).format(amount / 100);
  } catch {
    return `${(amount / 100).toFixed(2)} ${currency.toUpperCase()}`;
  }
}

/** A cap typed in a field: empty is no cap, else a whole number of at least 0. */
export function parseCap(text: string): number | null | "invalid" {
  const t = text.trim().replace(/[\s,_]/g, "");
  if (t === "") return null;
  if (!/^\d+$/.test(t)) return "invalid";
  return Number(t);
}
