// The campaign form's state and its translation to and from the API's bodies.
import type { Schemas } from "../../api/client";

export type Campaign = Schemas["CampaignBody"];
export type AudienceType = Schemas["AudienceType"];
type Metric = Schemas["AbWinnerMetric"];

export interface Variant {
  subject: string;
  body: string;
  fromName: string;
}

export interface Draft {
  name: string;
  subject: string;
  body: string;
  from: string;
  fromName: string;
  replyTo: string;
  topicId: string;
  audienceType: AudienceType;
  segmentId: string;
  /** The filter of a `FILTERED` audience, kept as it came (the filter builder edits it). */
  audienceFilter: unknown;
  /** Whether every condition of that filter is filled in (only then is it saved and counted). */
  filterComplete: boolean;
  /** An A/B test: on with 2 to 4 variants. */
  abTest: boolean;
  variants: Variant[];
  /** The test group's share, in percent (1 to 99). */
  testPercent: string;
  winnerMetric: Metric;
  /** Hours until the winner is chosen. */
  testHours: string;
  /** Kept from the loaded campaign: the form does not edit them (yet), a save must not drop them. */
  description: string | null;
  localeVariants: Campaign["localeVariants"];
}

export const emptyDraft: Draft = {
  name: "",
  subject: "",
  body: "",
  from: "",
  fromName: "",
  replyTo: "",
  topicId: "",
  audienceType: "ALL",
  segmentId: "",
  audienceFilter: null,
  filterComplete: true,
  abTest: false,
  variants: [],
  testPercent: "20",
  winnerMetric: "OPEN_RATE",
  testHours: "4",
  description: null,
  localeVariants: {},
};

/** A variant to start from: the campaign's own content. */
export function newVariant(draft: Draft): Variant {
  return { subject: draft.subject, body: draft.body, fromName: draft.fromName };
}

/** The form for a campaign the API answered. */
export function fromCampaign(c: Campaign): Draft {
  const ab = c.abTest;
  return {
    name: c.name,
    subject: c.subject,
    body: c.body,
    from: c.from,
    fromName: c.fromName ?? "",
    replyTo: c.replyTo ?? "",
    topicId: c.topicId ?? "",
    audienceType: c.audienceType,
    segmentId: c.segmentId ?? "",
    audienceFilter: c.audienceFilter ?? null,
    filterComplete: true,
    abTest: !!ab,
    variants: (ab?.variants ?? []).map((v) => ({ subject: v.subject, body: v.body, fromName: v.fromName ?? "" })),
    testPercent: ab ? String(Math.round(ab.testFraction * 1000) / 10) : emptyDraft.testPercent,
    winnerMetric: ab?.winnerMetric ?? emptyDraft.winnerMetric,
    testHours: ab ? String(Math.round((ab.testDuration / 3600) * 100) / 100) : emptyDraft.testHours,
    description: c.description ?? null,
    localeVariants: c.localeVariants,
  };
}

const orNull = (s: string) => (s.trim() === "" ? null : s.trim());

/** The body of `POST /campaigns` and `PUT /campaigns/:id`; the API checks the rest (422 by field). */
export function toRequest(d: Draft): Schemas["CampaignRequest"] {
  const ab = d.abTest && d.variants.length > 0;
  return {
    name: d.name.trim(),
    description: d.description,
    subject: d.subject,
    body: d.body,
    from: d.from.trim(),
    fromName: orNull(d.fromName),
    replyTo: orNull(d.replyTo),
    topicId: orNull(d.topicId),
    audienceType: d.audienceType,
    segmentId: d.audienceType === "SEGMENT" ? orNull(d.segmentId) : null,
    audienceFilter: d.audienceType === "FILTERED" ? d.audienceFilter : null,
    localeVariants: Object.keys(d.localeVariants).length > 0 ? d.localeVariants : null,
    variants: ab ? d.variants.map((v) => ({ subject: v.subject, body: v.body, fromName: orNull(v.fromName) })) : null,
    testFraction: ab ? Number(d.testPercent) / 100 : null,
    winnerMetric: ab ? d.winnerMetric : undefined,
    testDuration: ab ? Math.round(Number(d.testHours) * 3600) : null,
  };
}

/** What the audience preview depends on: a change of it counts again. */
export function audienceKey(d: Draft): string {
  return JSON.stringify([d.audienceType, d.segmentId, d.topicId, d.audienceFilter]);
}

/** The statuses in plain words. */
export const statusLabel: Record<Campaign["status"], string> = {
  DRAFT: "Draft",
  SCHEDULED: "Scheduled",
  SENDING: "Sending",
  PAUSED: "Paused",
  SENT: "Sent",
  CANCELLED: "Cancelled",
  FAILED: "Failed",
};

/** A campaign's content and audience can change only before it starts. */
export function editable(status: Campaign["status"]): boolean {
  return status === "DRAFT" || status === "SCHEDULED";
}

/** The exclusions of an audience preview, in plain words, leaving out the zeros. */
export function exclusionWords(e: Schemas["AudienceExclusions"]): string[] {
  const n = (count: number, one: string, many: string) => `${count.toLocaleString()} ${count === 1 ? one : many}`;
  const out: string[] = [];
  if (e.unsubscribed) out.push(`${n(e.unsubscribed, "contact has", "contacts have")} unsubscribed`);
  if (e.pending) out.push(`${n(e.pending, "contact has", "contacts have")} not yet confirmed their subscription`);
  if (e.notInTopic) out.push(`${n(e.notInTopic, "contact is", "contacts are")} not subscribed to the campaign's topic`);
  if (e.suppressed) out.push(`${n(e.suppressed, "contact is", "contacts are")} on the suppression list`);
  return out;
}

/** A rate (0 to 1) as a percentage with one decimal. */
export function percent(rate: number): string {
  return `${(Math.round(rate * 1000) / 10).toLocaleString()} %`;
}
