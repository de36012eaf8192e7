import { describe, expect, it } from "vitest";
import type { Schemas } from "../../api/client";
import { checkSummary, percent, recordStatus } from "./words";

const record = (over: Partial<Schemas["DnsRecordBody"]>): Schemas["DnsRecordBody"] => ({
  type: "TXT",
  name: "acme.test",
  value: "v=spf1 a ~all",
  status: "pending",
  required: true,
  found: [],
  ...over,
});

const domain = (records: Schemas["DnsRecordBody"][], status = "pending"): Schemas["DomainBody"] => ({
  id: "dom_1",
  domain: "acme.test",
  status,
  records,
  allowSubdomains: false,
  dkimSelector: "s1",
  dkimEd25519: false,
  inbound: false,
  receiving: false,
  createdAt: "2026-01-01T00:00:00Z",
});

describe("recordStatus", () => {
  it("says what DNS has when the value is wrong", () => {
    expect(recordStatus(record({ status: "failed", found: ["v=spf1 -all"] }))).toBe("Wrong value (DNS has: v=spf1 -all)");
    expect(recordStatus(record({ status: "verified" }))).toBe("Found");
    expect(recordStatus(record({}))).toBe("Not found yet");
  });
});

describe("checkSummary", () => {
  it("counts only the required records", () => {
    const d = domain([record({ status: "verified" }), record({ required: false }), record({ type: "MX" })]);
    expect(checkSummary(d)).toBe("acme.test is not verified yet: 1 of 2 required records found.");
    expect(checkSummary(domain([record({ status: "verified" })], "verified"))).toBe(
      "acme.test is verified: all 1 required records are found.",
    );
  });
});

describe("percent", () => {
  it("shows a rate as a percentage", () => {
    expect(percent(0.0123)).toBe("1.23 %");
    expect(percent(0)).toBe("0 %");
  });
});
