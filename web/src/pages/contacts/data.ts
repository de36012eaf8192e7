// The typed editor of a contact's custom data: rows of name, type and value, turned into the
// patch `PATCH /contacts/:id` takes (`null` deletes a key; keys not sent keep their values).

export type Kind = "string" | "number" | "boolean" | "date" | "other";

export const KINDS: { kind: Exclude<Kind, "other">; label: string }[] = [
  { kind: "string", label: "Text" },
  { kind: "number", label: "Number" },
  { kind: "boolean", label: "Yes or no" },
  { kind: "date", label: "Date" },
];

/** Keys the service never stores (content/src/custom_data.rs RESERVED_KEYS). */
const RESERVED = ["id", "svc_id", "svc_email", "email", "unsubscribeUrl", "subscribeUrl", "manageUrl"];

export interface Row {
  /** Stable across edits, for React keys. */
  uid: number;
  key: string;
  kind: Kind;
  /** The value as typed: text, a number's digits, "true"/"false", "YYYY-MM-DD". */
  value: string;
  /** The key it had when loaded (none for a new row). */
  from?: string;
}

const DATE = /^\d{4}-\d{2}-\d{2}(T.*Z)?$/;

/** A stored value's kind, as the service infers it: dates are `YYYY-MM-DD` or RFC 3339 in UTC. */
export function kindOf(v: unknown): Kind {
  if (typeof v === "boolean") return "boolean";
  if (typeof v === "number") return "number";
  if (typeof v === "string") return DATE.test(v) ? "date" : "string";
  return "other";
}

function shown(v: unknown, kind: Kind): string {
  if (kind === "other") return JSON.stringify(v);
  if (kind === "date") return String(v).slice(0, 10);
  return String(v);
}

let next = 1;
export function newRow(): Row {
  return { uid: next++, key: "", kind: "string", value: "" };
}

/** The rows of a contact's data, by name. */
export function rowsOf(data: Record<string, unknown>): Row[] {
  return Object.keys(data)
    .sort()
    .map((key) => {
      const kind = kindOf(data[key]);
      return { uid: next++, key, kind, value: shown(data[key], kind), from: key };
    });
}

/** A row's value in its type, or what is wrong with it. */
export function valueOf(row: Row): { value: unknown } | { error: string } {
  const text = row.value.trim();
  switch (row.kind) {
    case "number": {
      const n = Number(text);
      return text !== "" && Number.isFinite(n) ? { value: n } : { error: "Enter a number, such as 42 or 3.5." };
    }
    case "boolean":
      return text === "true" || text === "false" ? { value: text === "true" } : { error: "Choose yes or no." };
    case "date": {
      const ok = /^\d{4}-\d{2}-\d{2}$/.test(text) && !Number.isNaN(Date.parse(`${text}T00:00:00Z`));
      return ok ? { value: text } : { error: "Enter a date." };
    }
    case "string":
      // The service ignores an empty string: say so rather than seem to save it.
      return row.value === "" ? { error: "Enter some text, or remove the field." } : { value: row.value };
    default:
      return { value: undefined };
  }
}

export interface Patch {
  patch: Record<string, unknown>;
  /** What is wrong, by the row's uid. */
  errors: Record<number, string>;
}

/** The patch that turns `original` into the rows, with the rows' problems. An unchanged row is
 * not sent (a date stored with a time keeps it); a renamed row deletes its old key. */
export function patchOf(original: Record<string, unknown>, rows: Row[]): Patch {
  const patch: Record<string, unknown> = {};
  const errors: Record<number, string> = {};
  const seen = new Set<string>();
  for (const row of rows) {
    const key = row.key.trim();
    if (!key) errors[row.uid] = "Give the field a name.";
    else if (seen.has(key)) errors[row.uid] = `There is another field named ${key}.`;
    else if (RESERVED.includes(key)) errors[row.uid] = `${key} is reserved and cannot be stored in data.`;
    seen.add(key);
    if (errors[row.uid]) continue;
    const was = row.from !== undefined ? original[row.from] : undefined;
    if (row.kind === "other") {
      // Nested values are shown, kept, renamed or removed, not edited.
      if (row.from !== undefined && key !== row.from) patch[key] = was;
      continue;
    }
    const typed = valueOf(row);
    if ("error" in typed) {
      errors[row.uid] = typed.error;
      continue;
    }
    const unchanged =
      row.from === key && kindOf(was) === row.kind && shown(was, row.kind) === row.value;
    if (!unchanged) patch[key] = typed.value;
  }
  for (const key of Object.keys(original)) {
    if (!rows.some((r) => r.key.trim() === key)) patch[key] = null;
  }
  return { patch, errors };
}

/** The 422 field errors of a data patch, by row uid: `data.<key>` names the row; `data` alone
 * (too many keys) is returned under 0. */
export function fieldErrors(
  rows: Row[],
  errors: { field: string; message: string }[],
): Record<number, string> {
  const out: Record<number, string> = {};
  for (const e of errors) {
    if (e.field === "data") out[0] = e.message;
    if (!e.field.startsWith("data.")) continue;
    const key = e.field.slice("data.".length);
    const row = rows.find((r) => r.key.trim() === key);
    if (row) out[row.uid] = e.message;
    else out[0] = `${key}: ${e.message}`;
  }
  return out;
}
