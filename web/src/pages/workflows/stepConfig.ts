// A step's config as its form edits it (a draft of strings and condition rules) and back, as
// pure functions; the API checks the result and its 422 paths come back onto the fields.
import type { StepType } from "./graph";

/** One rule of a condition: `field operator value [unit]`. */
export type Rule = { field: string; operator: string; value: string; unit: string };

/** A form's draft: text fields by name; a condition's rules ("all" or "any" of them). */
export type Draft = { values: Record<string, string>; match: "all" | "any"; rules: Rule[] | null };

export const OPERATORS = [
  "equals",
  "notEquals",
  "contains",
  "notContains",
  "greaterThan",
  "lessThan",
  "greaterThanOrEqual",
  "lessThanOrEqual",
  "exists",
  "notExists",
  "within",
  "olderThan",
  "triggered",
  "notTriggered",
  "triggeredWithin",
  "notTriggeredWithin",
  "memberOf",
  "notMemberOf",
  "subscribed",
  "notSubscribed",
];

/** The operators that compare with no value. */
const NO_VALUE = new Set(["exists", "notExists", "triggered", "notTriggered", "memberOf", "notMemberOf", "subscribed", "notSubscribed"]);
/** The operators counted in time units. */
export const TIMED = new Set(["within", "olderThan", "triggeredWithin", "notTriggeredWithin"]);

export function needsValue(operator: string): boolean {
  return !NO_VALUE.has(operator);
}

export const emptyRule = (): Rule => ({ field: "", operator: "equals", value: "", unit: "days" });

const text = (v: unknown) => (v === undefined || v === null ? "" : typeof v === "string" ? v : JSON.stringify(v));
const json = (v: unknown) => (v === undefined || v === null ? "" : JSON.stringify(v, null, 2));

type Filter = { logic?: string; groups?: { filters?: Record<string, unknown>[]; conditions?: unknown }[] };

/**
 * The rules of a filter the simple form can show: one group of filters ("all"), or groups of
 * one filter each joined by OR ("any"); null for any other filter (edited as JSON).
 */
export function rulesOf(filter: unknown): { match: "all" | "any"; rules: Rule[] } | null {
  if (filter === undefined || filter === null) return { match: "all", rules: [emptyRule()] };
  const f = filter as Filter;
  if (typeof f !== "object" || !Array.isArray(f.groups) || f.groups.some((g) => g.conditions || !Array.isArray(g.filters))) {
    return null;
  }
  const rule = (r: Record<string, unknown>): Rule => ({
    field: text(r.field),
    operator: text(r.operator),
    value: r.value === undefined ? "" : typeof r.value === "string" && !/^(true|false|-?\d+(\.\d+)?|".*"|\[.*\])$/.test(r.value) ? r.value : JSON.stringify(r.value),
    unit: text(r.unit) || "days",
  });
  if (f.groups.length === 1 && (f.logic ?? "AND") === "AND") return { match: "all", rules: f.groups[0]!.filters!.map(rule) };
  if (f.groups.every((g) => g.filters!.length === 1)) {
    return { match: f.logic === "OR" ? "any" : "all", rules: f.groups.map((g) => rule(g.filters![0]!)) };
  }
  return null;
}

/** A rule's value as JSON: a number, `true`/`false`, a quoted string or a list as written; other text as a string. */
export function ruleValue(value: string): unknown {
  const v = value.trim();
  if (/^(true|false|-?\d+(\.\d+)?|".*"|\[.*\])$/.test(v)) {
    try {
      return JSON.parse(v);
    } catch {
      return value;
    }
  }
  return value;
}

/** The filter of rules: all of them in one group, or any of them in a group each. */
export function filterOf(match: "all" | "any", rules: Rule[]): unknown {
  const filters = rules.map((r) => {
    const f: Record<string, unknown> = { field: r.field.trim(), operator: r.operator };
    if (needsValue(r.operator)) f.value = ruleValue(r.value);
    if (TIMED.has(r.operator)) f.unit = r.unit;
    return f;
  });
  return match === "all" ? { logic: "AND", groups: [{ filters }] } : { logic: "OR", groups: filters.map((f) => ({ filters: [f] })) };
}

/**
 * The rule an error path of the filter is about (`filter.groups[0].filters[2].value` → rule 2
 * and `value` with "all"; `filter.groups[2].filters[0].value` with "any"); null otherwise.
 */
export function ruleOfPath(path: string, match: "all" | "any"): { rule: number; part: string } | null {
  const m = /^filter\.groups\[(\d+)\]\.filters\[(\d+)\]\.?(.*)$/.exec(path);
  if (!m) return null;
  return { rule: Number(match === "all" ? m[2] : m[1]), part: m[3] ?? "" };
}

/** The draft of a step's config. */
export function draftOf(type: StepType, config: unknown): Draft {
  const c = (config && typeof config === "object" ? config : {}) as Record<string, unknown>;
  const draft: Draft = { values: {}, match: "all", rules: null };
  const v = draft.values;
  switch (type) {
    case "SEND_EMAIL":
      v.templateId = text(c.templateId);
      v.to = c.to === "contact" ? "" : text(c.to);
      break;
    case "DELAY":
      v.amount = text(c.amount);
      v.unit = text(c.unit) || "days";
      break;
    case "WAIT_FOR_EVENT":
      v.eventName = text(c.eventName);
      v.timeoutSeconds = text(c.timeoutSeconds);
      break;
    case "CONDITION": {
      const simple = rulesOf(c.filter);
      if (simple) {
        draft.match = simple.match;
        draft.rules = simple.rules;
      } else v.filter = json(c.filter);
      break;
    }
    case "WEBHOOK":
      v.url = text(c.url);
      v.method = text(c.method) || "POST";
      v.headers = json(c.headers);
      v.body = json(c.body);
      break;
    case "UPDATE_CONTACT":
      v.data = json(c.data);
      v.subscribed = c.subscribed === undefined || c.subscribed === null ? "" : String(c.subscribed);
      break;
    case "EXIT":
      v.reason = text(c.reason);
      break;
    case "PLUGIN": {
      const rest = Object.fromEntries(Object.entries(c).filter(([k]) => k !== "plugin"));
      v.plugin = text(c.plugin);
      v.settings = Object.keys(rest).length ? json(rest) : "";
      break;
    }
  }
  return draft;
}

/** A number as typed (the API reports what is wrong with it), or left out when empty. */
function number(s: string): unknown {
  const t = s.trim();
  if (!t) return undefined;
  return /^-?\d+(\.\d+)?$/.test(t) ? Number(t) : t;
}

/**
 * The config of a draft, or the fields whose JSON does not parse (checked here, since they
 * cannot be sent at all; everything else is for the API to check).
 */
export function configOf(type: StepType, draft: Draft): { config: Record<string, unknown> } | { errors: Record<string, string[]> } {
  const v = draft.values;
  const errors: Record<string, string[]> = {};
  const parsed = (key: string): unknown => {
    const s = (v[key] ?? "").trim();
    if (!s) return undefined;
    try {
      return JSON.parse(s);
    } catch {
      errors[key] = ["this is not valid JSON"];
      return undefined;
    }
  };
  const config: Record<string, unknown> = {};
  const put = (key: string, value: unknown) => {
    if (value !== undefined && value !== "") config[key] = value;
  };
  switch (type) {
    case "SEND_EMAIL":
      put("templateId", v.templateId?.trim());
      put("to", v.to?.trim());
      break;
    case "DELAY":
      put("amount", number(v.amount ?? ""));
      put("unit", v.unit);
      break;
    case "WAIT_FOR_EVENT":
      put("eventName", v.eventName?.trim());
      put("timeoutSeconds", number(v.timeoutSeconds ?? ""));
      break;
    case "CONDITION":
      put("filter", draft.rules ? filterOf(draft.match, draft.rules) : parsed("filter"));
      break;
    case "WEBHOOK":
      put("url", v.url?.trim());
      put("method", v.method);
      put("headers", parsed("headers"));
      put("body", parsed("body"));
      break;
    case "UPDATE_CONTACT":
      put("data", parsed("data"));
      if (v.subscribed) config.subscribed = v.subscribed === "true";
      break;
    case "EXIT":
      put("reason", v.reason?.trim());
      break;
    case "PLUGIN": {
      const rest = parsed("settings");
      if (rest !== undefined && (typeof rest !== "object" || rest === null || Array.isArray(rest))) {
        errors.settings = ["give a JSON object"];
      } else Object.assign(config, rest);
      put("plugin", v.plugin?.trim());
      break;
    }
  }
  return Object.keys(errors).length ? { errors } : { config };
}
