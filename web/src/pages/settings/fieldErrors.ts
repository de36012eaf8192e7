// The API's 422 field errors placed on the form's fields: `{ field: "defaultFrom.email", … }`
// goes on the field named `defaultFrom.email`, or on `defaultFrom` when the form names only
// that; what no field takes is said in the form's general message.
import type { Schemas } from "../../api/client";

export interface PlacedErrors {
  /** Message per form field name. */
  fields: Record<string, string>;
  /** The general message (with the errors no field took), or null when every error was placed. */
  general: string | null;
}

/** Places the error body's field errors on `names` (the form's field names). */
export function placeErrors(error: unknown, names: string[]): PlacedErrors {
  const detail = (error as Partial<Schemas["ErrorBody"]> | undefined)?.error;
  if (!detail) return { fields: {}, general: "Something went wrong; try again." };
  const fields: Record<string, string> = {};
  const rest: string[] = [];
  for (const e of detail.errors ?? []) {
    const path = e.field ?? "";
    // The most precise name: the path itself, else the longest name the path starts with, else
    // a name that starts with the path (the error on `defaultFrom` shown on its email).
    const name =
      names.find((n) => n === path) ??
      names
        .filter((n) => path.startsWith(`${n}.`) || path.startsWith(`${n}[`))
        .sort((a, b) => b.length - a.length)[0] ??
      names.find((n) => n.startsWith(`${path}.`));
    if (name && path) {
      fields[name] = fields[name] ? `${fields[name]}; ${e.message}` : e.message;
    } else {
      rest.push(path ? `${path}: ${e.message}` : e.message);
    }
  }
  const placed = Object.keys(fields).length > 0;
  let general: string | null = detail.message;
  if (rest.length > 0) general = `${detail.message} (${rest.join("; ")})`;
  else if (placed) general = "Please correct the marked fields.";
  if (general && detail.suggestion) general = `${general} ${detail.suggestion}`;
  return { fields, general };
}
