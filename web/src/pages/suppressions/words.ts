// The suppression page's logic, apart for unit tests.
import type { Schemas } from "../../api/client";

/** The addresses typed into the box: split on commas, semicolons and white space, repeats once. */
export function parseAddresses(text: string): string[] {
  const all = text
    .split(/[\s,;]+/)
    .map((s) => s.trim())
    .filter(Boolean);
  return [...new Set(all)];
}

/** Why an address is listed, in words. */
export function reasonWords(reason: Schemas["ReasonBody"]): string {
  switch (reason) {
    case "HARD_BOUNCE":
      return "Bounced";
    case "COMPLAINT":
      return "Reported as spam";
    default:
      return "Added by hand";
  }
}
