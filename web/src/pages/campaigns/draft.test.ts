import { describe, expect, it } from "vitest";
import { emptyDraft, exclusionWords, fromCampaign, newVariant, percent, toRequest, type Campaign } from "./draft";

const campaign: Campaign = {
  id: "cmp_1",
  name: "December news",
  description: "kept",
  subject: "Hello {{ contact.firstName }}",
  body: "<p>Hi</p>",
  from: "news@example.com",
  fromName: "News",
  replyTo: null,
  audienceType: "SEGMENT",
  type: "SEGMENT",
  segmentId: "seg_1",
  audienceFilter: null,
  status: "DRAFT",
  localeVariants: { fr: { subject: "Bonjour", body: "<p>Salut</p>" } },
  topicId: null,
  recipientCount: 0,
  createdAt: "2026-12-01T00:00:00Z",
  updatedAt: "2026-12-01T00:00:00Z",
  abTest: {
    status: "PENDING",
    variants: [
      { subject: "A", body: "<p>A</p>", fromName: null },
      { subject: "B", body: "<p>B</p>", fromName: "Bea" },
    ],
    testFraction: 0.25,
    winnerMetric: "CLICK_RATE",
    testDuration: 7200,
  },
};

describe("the campaign form", () => {
  it("round-trips a campaign, keeping what it does not edit", () => {
    const request = toRequest(fromCampaign(campaign));
    expect(request).toMatchObject({
      name: "December news",
      description: "kept",
      subject: campaign.subject,
      from: "news@example.com",
      fromName: "News",
      replyTo: null,
      audienceType: "SEGMENT",
      segmentId: "seg_1",
      audienceFilter: null,
      localeVariants: campaign.localeVariants,
      testFraction: 0.25,
      winnerMetric: "CLICK_RATE",
      testDuration: 7200,
    });
    expect(request.variants).toEqual([
      { subject: "A", body: "<p>A</p>", fromName: null },
      { subject: "B", body: "<p>B</p>", fromName: "Bea" },
    ]);
  });

  it("sends no segment for another audience and no test when it is off", () => {
    const d = { ...fromCampaign(campaign), audienceType: "ALL" as const, abTest: false };
    const request = toRequest(d);
    expect(request.segmentId).toBeNull();
    expect(request.variants).toBeNull();
    expect(request.testFraction).toBeNull();
    expect(request.testDuration).toBeNull();
  });

  it("keeps a filter only for a filtered audience", () => {
    const filter = { logic: "AND", groups: [] };
    expect(toRequest({ ...emptyDraft, audienceType: "FILTERED", audienceFilter: filter }).audienceFilter).toBe(filter);
    expect(toRequest({ ...emptyDraft, audienceFilter: filter }).audienceFilter).toBeNull();
  });

  it("starts a variant from the campaign's content", () => {
    expect(newVariant({ ...emptyDraft, subject: "S", body: "B", fromName: "F" })).toEqual({ subject: "S", body: "B", fromName: "F" });
  });
});

describe("words", () => {
  it("says why contacts are left out, without the zeros", () => {
    expect(exclusionWords({ unsubscribed: 1, pending: 0, notInTopic: 3, suppressed: 0 })).toEqual([
      "1 contact has unsubscribed",
      "3 contacts are not subscribed to the campaign's topic",
    ]);
    expect(exclusionWords({ unsubscribed: 0, pending: 0, notInTopic: 0, suppressed: 0 })).toEqual([]);
  });
  it("writes rates as percentages", () => {
    expect(percent(0.5)).toBe("50 %");
    expect(percent(0.12345)).toBe("12.3 %");
  });
});
