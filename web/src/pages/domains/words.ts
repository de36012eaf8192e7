// Plain words for a domain's and a record's state (kept apart from the pages for unit tests).
import type { Schemas } from "../../api/client";

type Domain = Schemas["DomainBody"];
type DnsRecord = Schemas["DnsRecordBody"];

/** A domain's status in words. */
export function domainStatus(status: string): string {
  switch (status) {
    case "verified":
      return "Verified";
    case "failed":
      return "Failed";
    default:
      return "Waiting for DNS records";
  }
}

/** A record's live status in words, with what DNS answered when it differs. */
export function recordStatus(r: DnsRecord): string {
  if (r.status === "verified") return "Found";
  if (r.status === "failed") {
    return r.found.length > 0 ? `Wrong value (DNS has: ${r.found.join(", ")})` : "Wrong value";
  }
  return "Not found yet";
}

/** What a check found, in one sentence. */
export function checkSummary(d: Domain): string {
  const required = d.records.filter((r) => r.required);
  const found = required.filter((r) => r.status === "verified").length;
  if (d.status === "verified") {
    return `${d.domain} is verified: all ${required.length} required records are found.`;
  }
  const why = d.failureReason ? ` ${d.failureReason}` : "";
  return `${d.domain} is not verified yet: ${found} of ${required.length} required records found.${why}`;
}

/** A rate (0..1) as a percentage with up to two decimals. */
export function percent(rate: number): string {
  return `${(rate * 100).toLocaleString(undefined, { maximumFractionDigits: 2 })} %`;
}
