// The filter builder's state, in pure functions (no React): the field and operator catalogue,
// the tree the builder edits (groups of conditions and groups, each matching all or any of its
// items), its edits, and its conversion to and from the API's filter object.
//
// The API's language (the `filter` crate): a filter is `{ logic, groups }`, its groups joined by
// `logic`; a group is `{ filters, conditions? }`, its conditions (`filters`) and its nested
// filter (`conditions`) all ANDed. The builder shows the simpler tree a person thinks in: a
// group matches all (AND) or any (OR) of its items, an item being a condition or a group.
// Each item of a group becomes one API group: a condition `{ filters: [c] }`, a group
// `{ filters: [], conditions: <the group as a filter> }`.

/** A condition as the API takes it. */
export type ApiCondition = {
  field: string;
  operator: string;
  value?: string | number | boolean | null;
  unit?: string;
};
/** A group of the API's filter: its conditions and nested filter, all ANDed. */
export type ApiGroup = { filters?: ApiCondition[]; conditions?: ApiFilter | null };
/** The API's filter object (`condition` of a segment, `audienceFilter` of a campaign). The
 * OpenAPI document leaves it untyped, so its shape is written here from the `filter` crate. */
export type ApiFilter = { logic: Logic; groups: ApiGroup[] };

export type Logic = "AND" | "OR";
export type Unit = "minutes" | "hours" | "days";

/** What a field holds, which decides its operators and value input. */
export type Kind =
  | "string"
  | "email"
  | "number"
  | "boolean"
  | "subscribed"
  | "date"
  | "array"
  | "object"
  | "event"
  | "segment"
  | "topic";

/** A field the builder offers. */
export type FieldChoice = { field: string; label: string; kind: Kind; section: string };

/** The value input an operator needs. */
export type ValueKind = "none" | "text" | "number" | "boolean" | "date" | "duration";

/** A condition being edited: its value as the input holds it (text). */
export type DraftCondition = {
  type: "condition";
  id: string;
  field: string;
  operator: string;
  value: string;
  unit: Unit;
};
/** A group being edited: all (AND) or any (OR) of its items. */
export type DraftGroup = { type: "group"; id: string; logic: Logic; items: DraftItem[] };
export type DraftItem = DraftCondition | DraftGroup;

/** The API's limit on nesting (`MAX_DEPTH`): the top group is level 1. */
export const MAX_DEPTH = 10;

const OPERATORS: Record<Kind, string[]> = {
  string: [
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
  ],
  email: ["equals", "notEquals", "contains", "notContains", "greaterThan", "lessThan", "greaterThanOrEqual", "lessThanOrEqual"],
  number: ["equals", "notEquals", "greaterThan", "lessThan", "greaterThanOrEqual", "lessThanOrEqual", "exists", "notExists"],
  boolean: ["equals", "notEquals", "exists", "notExists"],
  subscribed: ["equals", "notEquals"],
  date: ["within", "olderThan", "greaterThan", "lessThan", "greaterThanOrEqual", "lessThanOrEqual", "exists", "notExists"],
  array: ["contains", "notContains", "exists", "notExists"],
  object: ["exists", "notExists"],
  event: ["triggered", "notTriggered", "triggeredWithin", "notTriggeredWithin"],
  segment: ["memberOf", "notMemberOf"],
  topic: ["subscribed", "notSubscribed"],
};

const WORDS: Record<string, string> = {
  equals: "is",
  notEquals: "is not",
  contains: "contains",
  notContains: "does not contain",
  greaterThan: "is greater than",
  lessThan: "is less than",
  greaterThanOrEqual: "is at least",
  lessThanOrEqual: "is at most",
  exists: "is set",
  notExists: "is not set",
  within: "is within the last",
  olderThan: "is older than",
  triggered: "has done it",
  notTriggered: "has never done it",
  triggeredWithin: "has done it within the last",
  notTriggeredWithin: "has not done it within the last",
  memberOf: "is a member",
  notMemberOf: "is not a member",
  subscribed: "is subscribed",
  notSubscribed: "is not subscribed",
};

const DATE_WORDS: Record<string, string> = {
  greaterThan: "is after",
  lessThan: "is before",
  greaterThanOrEqual: "is on or after",
  lessThanOrEqual: "is on or before",
};

/** The operators a field of this kind takes, in the order the builder lists them. */
export function operatorsFor(kind: Kind): string[] {
  return OPERATORS[kind];
}

/** The operator a new condition on a field of this kind starts with. */
function firstOperator(kind: Kind): string {
  return OPERATORS[kind][0] ?? "exists";
}

/** An operator in plain words, for a field of this kind. */
export function operatorLabel(operator: string, kind: Kind): string {
  return (kind === "date" ? DATE_WORDS[operator] : undefined) ?? WORDS[operator] ?? operator;
}

/** The value input an operator needs on a field of this kind. */
export function valueKind(operator: string, kind: Kind): ValueKind {
  if (["within", "olderThan", "triggeredWithin", "notTriggeredWithin"].includes(operator)) return "duration";
  if (!["equals", "notEquals", "contains", "notContains", "greaterThan", "lessThan", "greaterThanOrEqual", "lessThanOrEqual"].includes(operator)) {
    return "none";
  }
  if (kind === "number") return "number";
  if (kind === "boolean" || kind === "subscribed") return "boolean";
  if (kind === "date") return "date";
  return "text";
}

/** The value a new input of this kind starts with. */
function startValue(kind: ValueKind): string {
  return kind === "boolean" ? "true" : kind === "duration" ? "7" : "";
}

/** The fields every project has; the others come from the API (custom data, events, topics,
 * segments). */
export const BUILT_IN: FieldChoice[] = [
  { field: "email", label: "Email", kind: "email", section: "Contact" },
  { field: "subscribed", label: "Subscribed", kind: "subscribed", section: "Contact" },
  { field: "createdAt", label: "Added", kind: "date", section: "Contact" },
  { field: "updatedAt", label: "Last changed", kind: "date", section: "Contact" },
];

/** The kind of a custom data field from its type in `GET /contacts/fields`. */
export function dataKind(type: string): Kind {
  return (["string", "number", "boolean", "date", "array", "object"] as const).find((k) => k === type) ?? "string";
}

/** The field choices: the built-in ones, then custom data (`data.<key>`), events, topics and
 * segments, as the API lists them. */
export function catalogue(input: {
  data: { field: string; type: string }[];
  events: string[];
  topics: { id: string; name: string }[];
  segments: { id: string; name: string }[];
}): FieldChoice[] {
  const builtIn = new Set(BUILT_IN.map((f) => f.field));
  return [
    ...BUILT_IN,
    ...input.data
      .filter((f) => f.field.startsWith("data.") && !builtIn.has(f.field))
      .map((f) => ({ field: f.field, label: f.field.slice(5), kind: dataKind(f.type), section: "Custom data" })),
    ...input.events.map((name) => ({ field: `event.${name}`, label: name, kind: "event" as const, section: "Events" })),
    ...input.topics.map((t) => ({ field: `topic.${t.id}`, label: t.name, kind: "topic" as const, section: "Topics" })),
    ...input.segments.map((s) => ({ field: `segment.${s.id}`, label: s.name, kind: "segment" as const, section: "Segments" })),
  ];
}

/** The choice for a field name, also for a name no longer listed (a deleted field, an event
 * never tracked yet), its kind guessed from its prefix. */
export function choiceFor(field: string, fields: FieldChoice[]): FieldChoice {
  const known = fields.find((f) => f.field === field);
  if (known) return known;
  const prefix = field.split(".")[0];
  const kind: Kind =
    prefix === "event" ? "event" : prefix === "segment" ? "segment" : prefix === "topic" ? "topic" : "string";
  const label = prefix === "data" ? field.slice(5) : field;
  return { field, label, kind, section: "Not listed" };
}

let counter = 0;
/** A new id for a draft item (unique in the page). */
export function newId(): string {
  counter += 1;
  return `f${counter}`;
}

/** A new condition on a field, with its first operator. */
export function newCondition(field: FieldChoice): DraftCondition {
  const operator = firstOperator(field.kind);
  return { type: "condition", id: newId(), field: field.field, operator, value: startValue(valueKind(operator, field.kind)), unit: "days" };
}

/** A new group holding one condition. */
export function newGroup(field: FieldChoice, logic: Logic = "AND"): DraftGroup {
  return { type: "group", id: newId(), logic, items: [newCondition(field)] };
}

/** The tree with the item `id` replaced by `change(item)` (the same tree when absent). */
function mapItem(group: DraftGroup, id: string, change: (item: DraftItem) => DraftItem): DraftGroup {
  if (group.id === id) return change(group) as DraftGroup;
  return {
    ...group,
    items: group.items.map((item) =>
      item.id === id ? change(item) : item.type === "group" ? mapItem(item, id, change) : item,
    ),
  };
}

/** Adds a condition (or a group holding one) at the end of group `groupId`. */
export function addItem(root: DraftGroup, groupId: string, item: DraftItem): DraftGroup {
  return mapItem(root, groupId, (g) => ({ ...(g as DraftGroup), items: [...(g as DraftGroup).items, item] }));
}

/** Removes the item `id` (a condition or a group) wherever it is. A group left empty stays, so
 * that a person can fill it again; `toApi` reports it. */
export function removeItem(root: DraftGroup, id: string): DraftGroup {
  return {
    ...root,
    items: root.items.filter((i) => i.id !== id).map((i) => (i.type === "group" ? removeItem(i, id) : i)),
  };
}

/** Sets whether group `id` matches all or any of its items. */
export function setLogic(root: DraftGroup, id: string, logic: Logic): DraftGroup {
  return mapItem(root, id, (g) => ({ ...(g as DraftGroup), logic }));
}

/** Changes a condition's field: the operator stays if the new field takes it, else becomes the
 * field's first; the value stays only if its input is of the same kind. */
export function setField(root: DraftGroup, id: string, field: FieldChoice, fields: FieldChoice[]): DraftGroup {
  return mapItem(root, id, (item) => {
    const c = item as DraftCondition;
    const before = valueKind(c.operator, choiceFor(c.field, fields).kind);
    const operators = operatorsFor(field.kind);
    const operator = operators.includes(c.operator) ? c.operator : firstOperator(field.kind);
    const after = valueKind(operator, field.kind);
    return { ...c, field: field.field, operator, value: before === after ? c.value : startValue(after) };
  });
}

/** Changes a condition's operator; a value whose input no longer fits is reset. */
export function setOperator(root: DraftGroup, id: string, operator: string, fields: FieldChoice[]): DraftGroup {
  return mapItem(root, id, (item) => {
    const c = item as DraftCondition;
    const kind = choiceFor(c.field, fields).kind;
    const after = valueKind(operator, kind);
    return { ...c, operator, value: valueKind(c.operator, kind) === after ? c.value : startValue(after) };
  });
}

/** Sets a condition's value (as its input holds it) or unit. */
export function setValue(root: DraftGroup, id: string, value: string, unit?: Unit): DraftGroup {
  return mapItem(root, id, (item) => ({ ...(item as DraftCondition), value, unit: unit ?? (item as DraftCondition).unit }));
}

/** A condition's value as the API takes it, or a message saying what is missing. */
export function apiValue(c: DraftCondition, kind: Kind): { value?: string | number | boolean; problem?: string } {
  const vk = valueKind(c.operator, kind);
  const text = c.value.trim();
  switch (vk) {
    case "none":
      return {};
    case "boolean":
      return { value: c.value === "true" };
    case "number":
    case "duration": {
      const n = Number(text);
      if (text === "" || !Number.isFinite(n)) return { problem: "Enter a number." };
      if (vk === "duration" && n <= 0) return { problem: "Enter a number above 0." };
      return { value: n };
    }
    case "date":
      return /^\d{4}-\d{2}-\d{2}/.test(text) ? { value: text } : { problem: "Choose a date." };
    default:
      // Sent as typed (spaces count), but never empty: an empty value is a condition left unfilled.
      return text === "" ? { problem: "Enter a value." } : { value: c.value };
  }
}

/** Labels of the tree in document order: "Condition 1", "Group 1"… */
export function numbering(root: DraftGroup): Map<string, number> {
  const numbers = new Map<string, number>();
  let conditions = 0;
  let groups = 0;
  const walk = (g: DraftGroup) => {
    for (const item of g.items) {
      if (item.type === "condition") numbers.set(item.id, ++conditions);
      else {
        numbers.set(item.id, ++groups);
        walk(item);
      }
    }
  };
  walk(root);
  return numbers;
}

/** What the builder holds converted for the API, with what is still wrong (each problem with the
 * id of its item) and the API path of each item (`groups[0].conditions.groups[1]`), to put the
 * API's errors on the items they name. */
export function toApi(
  root: DraftGroup,
  fields: FieldChoice[],
): { filter: ApiFilter; problems: { id: string; message: string }[]; paths: Map<string, string> } {
  const problems: { id: string; message: string }[] = [];
  const paths = new Map<string, string>();
  const convert = (g: DraftGroup, path: string): ApiFilter => {
    if (g.items.length === 0) problems.push({ id: g.id, message: "Add a condition to this group or remove it." });
    return {
      logic: g.logic,
      groups: g.items.map((item, i) => {
        const at = `${path}groups[${i}]`;
        if (item.type === "group") {
          paths.set(`${at}.conditions`, item.id);
          return { filters: [], conditions: convert(item, `${at}.conditions.`) };
        }
        paths.set(`${at}.filters[0]`, item.id);
        const kind = choiceFor(item.field, fields).kind;
        const { value, problem } = apiValue(item, kind);
        if (problem) problems.push({ id: item.id, message: problem });
        const c: ApiCondition = { field: item.field, operator: item.operator };
        if (value !== undefined) c.value = value;
        if (valueKind(item.operator, kind) === "duration") c.unit = item.unit;
        return { filters: [c] };
      }),
    };
  };
  const filter = convert(root, "");
  return { filter, problems, paths };
}

/** The builder's tree for an API filter (null: a new one with one condition on `first`). Every
 * API group becomes an item: a lone condition stays one, anything else becomes a group of its
 * conditions (ANDed) and its nested filter. */
export function fromApi(filter: ApiFilter | null | undefined, first: FieldChoice, fields: FieldChoice[]): DraftGroup {
  if (!filter || !Array.isArray(filter.groups)) return { type: "group", id: newId(), logic: "AND", items: [newCondition(first)] };
  const condition = (c: ApiCondition): DraftCondition => {
    const kind = choiceFor(c.field, fields).kind;
    const vk = valueKind(c.operator, kind);
    const value = c.value === undefined || c.value === null ? startValue(vk) : String(c.value);
    const unit = (["minutes", "hours", "days"] as const).find((u) => u === c.unit) ?? "days";
    return { type: "condition", id: newId(), field: c.field, operator: c.operator, value, unit };
  };
  const group = (f: ApiFilter): DraftGroup => ({
    type: "group",
    id: newId(),
    logic: f.logic === "OR" ? "OR" : "AND",
    items: f.groups.map((g): DraftItem => {
      const filters = g.filters ?? [];
      if (filters.length === 1 && !g.conditions) return condition(filters[0]!);
      if (filters.length === 0 && g.conditions) return group(g.conditions);
      const items: DraftItem[] = filters.map(condition);
      if (g.conditions) items.push(group(g.conditions));
      return { type: "group", id: newId(), logic: "AND", items };
    }),
  });
  return group(filter);
}

/** A filter in plain words: `plan is "pro" and (country is "FR" or visits is greater than 3)`. */
export function describe(filter: ApiFilter | null | undefined, fields: FieldChoice[]): string {
  if (!filter || !Array.isArray(filter.groups)) return "No condition.";
  const words = (f: ApiFilter, nested: boolean): string => {
    const parts = f.groups.map((g) => {
      const all = [
        ...(g.filters ?? []).map((c) => {
          const choice = choiceFor(c.field, fields);
          const what = choice.kind === "event" ? `did “${choice.label}”:` : choice.label;
          const value = c.value === undefined || c.value === null ? "" : ` ${JSON.stringify(c.value)}`;
          const unit = c.unit ? ` ${c.unit}` : "";
          return `${what} ${operatorLabel(c.operator, choice.kind)}${value}${unit}`;
        }),
        ...(g.conditions ? [words(g.conditions, true)] : []),
      ];
      return all.length > 1 && f.groups.length > 1 ? `(${all.join(" and ")})` : all.join(" and ");
    });
    const text = parts.join(f.logic === "OR" ? " or " : " and ");
    return nested && parts.length > 1 ? `(${text})` : text;
  };
  return words(filter, false);
}

/** An error the API reported on a part of a filter: its path from the filter's root
 * (`groups[1].filters[0].value`), or "" for the filter itself. */
export type PathError = { path: string; message: string };

/** The API's field errors about the filter under `prefix` (`condition`), with their paths from
 * the filter's root, and the others. */
export function splitErrors(
  errors: { field: string; message: string }[],
  prefix: string,
): { filter: PathError[]; other: { field: string; message: string }[] } {
  const filter: PathError[] = [];
  const other: { field: string; message: string }[] = [];
  for (const e of errors) {
    if (e.field === prefix) filter.push({ path: "", message: e.message });
    else if (e.field.startsWith(`${prefix}.`)) filter.push({ path: e.field.slice(prefix.length + 1), message: e.message });
    else other.push(e);
  }
  return { filter, other };
}

/** Each error put on the item its path names (the longest item path it starts with, from
 * `toApi`'s `paths`); those naming no item (the filter itself) under "". */
export function placeErrors(errors: PathError[], paths: Map<string, string>): Map<string, string[]> {
  const placed = new Map<string, string[]>();
  for (const e of errors) {
    let best = "";
    let id = "";
    for (const [path, item] of paths) {
      if ((e.path === path || e.path.startsWith(`${path}.`)) && path.length > best.length) {
        best = path;
        id = item;
      }
    }
    placed.set(id, [...(placed.get(id) ?? []), e.message]);
  }
  return placed;
}
