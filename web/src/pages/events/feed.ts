// The live activity feed: each poll fetches the newest page; entries not yet shown are put on
// top, and only then is anything announced.

export interface Entry {
  id: string;
  createdAt: string;
}

/** The fresh page's entries not yet shown, put before the shown ones (both newest first). The
 * shown list keeps what older pages added. */
export function merge<T extends Entry>(shown: T[], fresh: T[]): { entries: T[]; added: number } {
  const known = new Set(shown.map((e) => e.id));
  const newer = fresh.filter((e) => !known.has(e.id));
  if (newer.length === 0) return { entries: shown, added: 0 };
  return { entries: [...newer, ...shown], added: newer.length };
}

/** What the polite live region says after a poll: nothing when nothing came. */
export function announcement(added: number, shown: number): string {
  if (added === 0) return "";
  // The count shown makes two announcements in a row differ, so both are read.
  const what = added === 1 ? "1 new entry" : `${added.toLocaleString()} new entries`;
  return `${what} in the activity feed (${shown.toLocaleString()} shown).`;
}

const KINDS: Record<string, string> = {
  sent: "Sent",
  deferred: "Deferred",
  delivered: "Delivered",
  opened: "Opened",
  clicked: "Clicked",
  bounced: "Bounced",
  soft_bounced: "Soft bounce",
  complained: "Complaint",
  failed: "Failed",
  suppressed: "Suppressed",
  inbound: "Reply received",
};

/** A kind of entry in plain words. */
export function kindName(type: string): string {
  return KINDS[type] ?? type.replace(/_/g, " ");
}
