// The dashboard's areas, each tested in the logged-in page the first session leaves (1,280 px):
// `export default async function (t)` with t = { page, context, base, run, secret, call, errors }.
// Checks and the accessibility scan come from ../lib.mjs. One line per area here.
export const areas = [
  ["templates", (await import("./templates.mjs")).default],
];
