// The templates area's logic, apart from React: the variables a template may use, where a
// variable is being typed, the field errors of an answer, and what changed in a draft.
import type { Schemas } from "../../api/client";

/** The variables every send sets besides the contact's data (docs/sending.md, engagement.md). */
export const BUILT_IN_VARIABLES: { name: string; detail: string }[] = [
  { name: "email", detail: "the contact's address" },
  { name: "id", detail: "the contact's id" },
  { name: "unsubscribeUrl", detail: "signed unsubscribe link" },
  { name: "subscribeUrl", detail: "signed subscribe link" },
  { name: "manageUrl", detail: "the preference page" },
  { name: "viewInBrowserUrl", detail: "the email on the web" },
];

/**
 * The contact data keys a template may name, from `GET /contacts/fields`: the custom fields
 * (`data.firstName` → `firstName`, with `\.` and `\\` read back as `.` and `\`), by name.
 */
export function dataVariables(fields: Schemas["FieldDescriptor"][]): string[] {
  return fields
    .filter((f) => f.isCustom && f.field.startsWith("data."))
    .map((f) => f.field.slice("data.".length).replace(/\\(.)/g, "$1"))
    .sort((a, b) => a.localeCompare(b));
}

/**
 * Where a variable name being typed starts, when the text before the cursor ends inside `{{`
 * (or `{{{`, or a block such as `{{#if `) with only a name so far: the offset of the name's first character in `before`, and
 * what was typed of it. `null` outside braces.
 */
export function variableAt(before: string): { from: number; typed: string } | null {
  const m = /\{\{\{?\s*(?:#(?:if|unless|each|with)\s+)?([\w.]*)$/.exec(before);
  if (!m) return null;
  const typed = m[1] ?? "";
  return { from: before.length - typed.length, typed };
}

/** How many `}` close the variable opened at the end of `before`: 3 after `{{{`, else 2. */
export function closingBraces(before: string): number {
  return /\{\{\{[^{}]*$/.test(before) ? 3 : 2;
}

/** The field errors of an API error body, by field path (`subject`, `variants.fr.body`). */
export function fieldErrors(error: unknown): Record<string, string> {
  const body = error as Partial<Schemas["ErrorBody"]> | undefined;
  const out: Record<string, string> = {};
  for (const e of body?.error?.errors ?? []) {
    out[e.field] = out[e.field] ? `${out[e.field]}; ${e.message}` : e.message;
  }
  return out;
}

export type Variants = Record<string, Schemas["LocaleVariant"]>;

/** The editable parts of a template. */
export interface Draft {
  name: string;
  type: Schemas["TemplateKind"];
  subject: string;
  body: string;
  variants: Variants;
}

export function draftOf(t: Schemas["TemplateBody"]): Draft {
  return { name: t.name, type: t.type, subject: t.subject, body: t.body, variants: t.variants };
}

/** The `PATCH` body of what `draft` changes in `saved`; `null` when nothing changed. */
export function changes(saved: Draft, draft: Draft): Schemas["UpdateTemplate"] | null {
  const patch: Schemas["UpdateTemplate"] = {};
  if (draft.name !== saved.name) patch.name = draft.name;
  if (draft.type !== saved.type) patch.type = draft.type;
  if (draft.subject !== saved.subject) patch.subject = draft.subject;
  if (draft.body !== saved.body) patch.body = draft.body;
  if (JSON.stringify(draft.variants) !== JSON.stringify(saved.variants)) patch.variants = draft.variants;
  return Object.keys(patch).length > 0 ? patch : null;
}

/**
 * Checks a new language tag against the ones there: the problem in plain words, or null. The
 * server checks the tag too (BCP 47); this catches an empty or repeated one at once.
 */
export function tagProblem(tag: string, existing: string[]): string | null {
  const t = tag.trim();
  if (!t) return "Type a language tag such as fr or pt-BR.";
  if (!/^[A-Za-z]{2,8}([-_][A-Za-z0-9]{1,8})*$/.test(t)) return `“${t}” is not a language tag; use one such as fr, pt-BR or zh-Hant.`;
  const norm = (s: string) => s.replace(/_/g, "-").toLowerCase();
  if (existing.some((e) => norm(e) === norm(t))) return `There is already a ${t} version.`;
  return null;
}
