// The dashboard's areas, each tested in the logged-in page the first session leaves (1,280 px):
// `export default async function (t)` with t = { page, context, base, run, secret, call, errors }.
// Checks and the accessibility scan come from ../lib.mjs. One line per area here.
export const areas = [
  ["members", (await import("./members.mjs")).default],
  ["settings", (await import("./settings.mjs")).default],
  ["domains", (await import("./domains.mjs")).default],
  ["suppressions", (await import("./suppressions.mjs")).default],
  ["topics", (await import("./topics.mjs")).default],
  ["billing", (await import("./billing.mjs")).default],
  ["contacts", (await import("./contacts.mjs")).default],
  ["events", (await import("./events.mjs")).default],
  ["workflows", (await import("./workflows.mjs")).default],
  ["segments", (await import("./segments.mjs")).default],
  ["campaigns", (await import("./campaigns.mjs")).default],
  ["templates", (await import("./templates.mjs")).default],
];
