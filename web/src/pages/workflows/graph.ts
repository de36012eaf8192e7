// The workflow canvas's state, as pure functions: the API's steps and transitions turned into
// React Flow nodes and edges at their stored positions (a top-to-bottom layout for steps with
// none), a new step's place, the ways out each step offers, and the API's 422 field paths
// sorted onto steps, transitions and form fields.
import type { Schemas } from "../../api/client";

export type Step = Schemas["StepBody"];
export type Transition = Schemas["TransitionBody"];
export type StepType = Schemas["StepKind"];
export type FieldError = { field: string; message: string };

/** The step types, in the order the "Add step" form offers them. */
export const STEP_TYPES: StepType[] = [
  "SEND_EMAIL",
  "DELAY",
  "WAIT_FOR_EVENT",
  "CONDITION",
  "WEBHOOK",
  "UPDATE_CONTACT",
  "EXIT",
  "PLUGIN",
];

/** Each type in plain words. */
export const TYPE_NAMES: Record<StepType, string> = {
  SEND_EMAIL: "Send email",
  DELAY: "Delay",
  WAIT_FOR_EVENT: "Wait for event",
  CONDITION: "Condition",
  WEBHOOK: "Webhook",
  UPDATE_CONTACT: "Update contact",
  EXIT: "Exit",
  PLUGIN: "Plugin step",
};

/** A way out of a step: a branch name, or null for the one plain transition. */
export type Way = string | null;

/**
 * The ways out a step of this type offers: `yes`/`no` from a condition, `event`/`timeout` from
 * a wait, none from an exit, one plain way from the others (a plugin step may also name
 * branches of its own; the "Connect" form takes them as text).
 */
export function waysOut(type: StepType): Way[] {
  switch (type) {
    case "CONDITION":
      return ["yes", "no"];
    case "WAIT_FOR_EVENT":
      return ["event", "timeout"];
    case "EXIT":
      return [];
    default:
      return [null];
  }
}

/** The ways out of `step` that no transition uses yet. */
export function freeWays(step: Step, transitions: Transition[]): Way[] {
  const used = new Set(transitions.filter((t) => t.fromStepId === step.id).map((t) => t.branch ?? null));
  return waysOut(step.type).filter((w) => !used.has(w));
}

/** A way in words: "yes", "timeout", or "next" for the plain one. */
export function wayName(way: Way): string {
  return way ?? "next";
}

/** A step's label: its name, else its type, numbered in creation order. */
export function stepLabel(step: Step, index: number): string {
  return `${index + 1}. ${step.name?.trim() || TYPE_NAMES[step.type]}`;
}

/** The label of the step `id` among `steps` (its id when it is not one of them). */
export function labelOf(steps: Step[], id: string): string {
  const i = steps.findIndex((s) => s.id === id);
  return i < 0 ? id : stepLabel(steps[i]!, i);
}

/** A short summary of a step's config, for its node. */
export function summary(step: Step, templates: Record<string, string> = {}): string {
  const c = (step.config ?? {}) as Record<string, unknown>;
  const s = (v: unknown) => (v === undefined || v === null ? "" : String(v));
  switch (step.type) {
    case "SEND_EMAIL":
      return c.templateId ? `template ${templates[s(c.templateId)] ?? s(c.templateId)}${c.to && c.to !== "contact" ? ` to ${s(c.to)}` : ""}` : "no template yet";
    case "DELAY":
      return c.amount !== undefined ? `${s(c.amount)} ${s(c.unit)}` : "no delay set";
    case "WAIT_FOR_EVENT":
      return c.eventName ? `for ${s(c.eventName)}${c.timeoutSeconds ? `, ${s(c.timeoutSeconds)} s at most` : ""}` : "no event set";
    case "CONDITION":
      return c.filter ? "checks a filter" : "no filter yet";
    case "WEBHOOK":
      return c.url ? `${s(c.method ?? "POST")} ${s(c.url)}` : "no address yet";
    case "UPDATE_CONTACT":
      return [c.data ? `sets ${Object.keys(c.data as object).join(", ")}` : "", c.subscribed !== undefined ? `subscribed: ${c.subscribed ? "yes" : "no"}` : ""]
        .filter(Boolean)
        .join("; ") || "changes nothing yet";
    case "EXIT":
      return c.reason ? `reason: ${s(c.reason)}` : "ends the execution";
    case "PLUGIN":
      return c.plugin ? `plugin ${s(c.plugin)}` : "no plugin named";
  }
}

/** The entry steps: those no transition leads to. */
export function entrySteps(steps: Step[], transitions: Transition[]): Step[] {
  const targets = new Set(transitions.map((t) => t.toStepId));
  return steps.filter((s) => !targets.has(s.id));
}

export type Point = { x: number; y: number };
export const COLUMN = 260;
export const ROW = 150;
/** The room a step's node takes on the canvas (13rem wide, three lines high), with a margin. */
export const NODE = { width: 220, height: 110 };

/** Whether nodes at `a` and `b` (their top-left corners) would overlap. */
export function overlaps(a: Point, b: Point): boolean {
  return Math.abs(a.x - b.x) < NODE.width && Math.abs(a.y - b.y) < NODE.height;
}

/**
 * A top-to-bottom layout (for the steps with no stored position): each step's row is the
 * longest path to it from an entry step; within a row steps keep the order of their parents'
 * columns (a condition's `yes` before its `no`), then creation order; rows are centred on x = 0.
 */
export function layout(steps: Step[], transitions: Transition[]): Record<string, Point> {
  const ids = new Set(steps.map((s) => s.id));
  const edges = transitions.filter((t) => ids.has(t.fromStepId) && ids.has(t.toStepId));
  const depth = new Map<string, number>(steps.map((s) => [s.id, 0]));
  // Longest path by relaxing edges at most |steps| times (a cycle, which the API refuses,
  // cannot make it loop forever).
  for (let round = 0; round < steps.length; round++) {
    let changed = false;
    for (const t of edges) {
      const d = depth.get(t.fromStepId)! + 1;
      if (d > depth.get(t.toStepId)! && d < steps.length) {
        depth.set(t.toStepId, d);
        changed = true;
      }
    }
    if (!changed) break;
  }
  const order = new Map(steps.map((s, i) => [s.id, i]));
  const rank = (w: Way) => (w === "no" || w === "timeout" ? 1 : 0);
  const rows = new Map<number, string[]>();
  for (const s of steps) rows.set(depth.get(s.id)!, [...(rows.get(depth.get(s.id)!) ?? []), s.id]);
  const column = new Map<string, number>();
  const positions: Record<string, Point> = {};
  for (const d of [...rows.keys()].sort((a, b) => a - b)) {
    const row = rows.get(d)!;
    const key = (id: string): [number, number, number] => {
      const parent = edges.find((t) => t.toStepId === id && depth.get(t.fromStepId)! < d);
      return parent ? [column.get(parent.fromStepId) ?? 0, rank(parent.branch ?? null), order.get(id)!] : [-Infinity, 0, order.get(id)!];
    };
    row.sort((a, b) => {
      const [ka, kb] = [key(a), key(b)];
      return ka[0] - kb[0] || ka[1] - kb[1] || ka[2] - kb[2];
    });
    row.forEach((id, i) => {
      const x = (i - (row.length - 1) / 2) * COLUMN;
      column.set(id, x);
      positions[id] = { x, y: d * ROW };
    });
  }
  return positions;
}

/** The step `id` follows in the layout: the source of its first transition from a row above. */
function layoutParent(id: string, transitions: Transition[], placed: Record<string, Point>): string | undefined {
  const y = placed[id]?.y ?? 0;
  return transitions.find((t) => t.toStepId === id && placed[t.fromStepId] !== undefined && placed[t.fromStepId]!.y < y)?.fromStepId;
}

/**
 * Where each step is drawn: its stored position; a step without one takes its place in the
 * automatic layout, moved by as much as the step it follows there was moved from its own (so a
 * step with no position under a dragged one stays under it), then down, row by row, until it
 * covers no step drawn before it and none at a stored position (the steps after it follow).
 */
export function positions(steps: Step[], transitions: Transition[]): Record<string, Point> {
  const placed = layout(steps, transitions);
  const out: Record<string, Point> = {};
  const taken: Point[] = steps.flatMap((s) => (s.position ? [{ x: s.position.x, y: s.position.y }] : []));
  // Row by row, so that a step's parent is placed before it.
  const byRow = [...steps].sort((a, b) => (placed[a.id]?.y ?? 0) - (placed[b.id]?.y ?? 0));
  for (const s of byRow) {
    const auto = placed[s.id] ?? { x: 0, y: 0 };
    if (s.position) {
      out[s.id] = { x: s.position.x, y: s.position.y };
      continue;
    }
    const parent = layoutParent(s.id, transitions, placed);
    const from = parent ? out[parent] : undefined;
    const home = parent ? placed[parent] : undefined;
    let spot = from && home ? { x: auto.x + from.x - home.x, y: auto.y + from.y - home.y } : auto;
    // Each move goes below a node in the way (one row under its top, more than a node's
    // height): y only grows, so this ends once past the lowest.
    for (let blocker = taken.find((q) => overlaps(spot, q)); blocker; blocker = taken.find((q) => overlaps(spot, q))) {
      spot = { x: spot.x, y: blocker.y + ROW };
    }
    out[s.id] = spot;
    taken.push(spot);
  }
  return out;
}

/**
 * The place of a new step: under the step it follows (a way of several to its side: `yes`
 * left, `no` right), else right of every step at the top; moved right past any step already
 * there.
 */
export function placeNew(steps: Step[], transitions: Transition[], after: { from: string; way: Way } | null): Point {
  const at = positions(steps, transitions);
  const all = Object.values(at);
  if (all.length === 0) return { x: 0, y: 0 };
  const source = after ? steps.find((s) => s.id === after.from) : undefined;
  let spot: Point;
  if (source && after && at[source.id]) {
    const ways = waysOut(source.type);
    const i = ways.indexOf(after.way);
    const side = ways.length > 1 && i >= 0 ? (i - (ways.length - 1) / 2) * COLUMN : 0;
    spot = { x: at[source.id]!.x + side, y: at[source.id]!.y + ROW };
  } else {
    spot = { x: Math.max(...all.map((p) => p.x)) + COLUMN, y: Math.min(...all.map((p) => p.y)) };
  }
  const taken = (p: Point) => all.some((q) => overlaps(p, q));
  while (taken(spot)) spot = { x: spot.x + COLUMN, y: spot.y };
  return spot;
}

/** The data a step's node shows. */
export type StepData = {
  label: string;
  type: StepType;
  summary: string;
  ways: Way[];
  problems: string[];
  entry: boolean;
};

export type StepNode = {
  id: string;
  type: "step";
  position: Point;
  data: StepData;
  ariaLabel: string;
};

export type StepEdge = {
  id: string;
  source: string;
  target: string;
  sourceHandle: string | null;
  label?: string;
  ariaLabel: string;
};

/**
 * The canvas of a workflow: a node per step (at `moved` positions where the user just dragged
 * them, else where `positions` puts them), an edge per transition from the handle of its branch.
 */
export function toCanvas(
  steps: Step[],
  transitions: Transition[],
  problems: Record<string, string[]> = {},
  moved: Record<string, Point> = {},
  templates: Record<string, string> = {},
): { nodes: StepNode[]; edges: StepEdge[] } {
  const placed = positions(steps, transitions);
  const labels = new Map(steps.map((s, i) => [s.id, stepLabel(s, i)]));
  const entries = new Set(entrySteps(steps, transitions).map((s) => s.id));
  const nodes = steps.map((s, i): StepNode => {
    const label = stepLabel(s, i);
    const info = summary(s, templates);
    const trouble = problems[s.id] ?? [];
    return {
      id: s.id,
      type: "step",
      position: moved[s.id] ?? placed[s.id] ?? { x: 0, y: 0 },
      data: { label, type: s.type, summary: info, ways: s.type === "PLUGIN" ? pluginWays(s, transitions) : waysOut(s.type), problems: trouble, entry: entries.has(s.id) },
      ariaLabel: `Step ${label}: ${TYPE_NAMES[s.type]}, ${info}${trouble.length ? `; ${trouble.length} problem${trouble.length > 1 ? "s" : ""}` : ""}`,
    };
  });
  const edges = transitions
    .filter((t) => labels.has(t.fromStepId) && labels.has(t.toStepId))
    .map((t): StepEdge => ({
      id: t.id,
      source: t.fromStepId,
      target: t.toStepId,
      sourceHandle: handleOf(t.branch ?? null),
      label: t.branch ?? undefined,
      ariaLabel: `From ${labels.get(t.fromStepId)} ${t.branch ? `(${t.branch}) ` : ""}to ${labels.get(t.toStepId)}`,
    }));
  return { nodes, edges };
}

/** A plugin step's handles: the plain one and each branch its transitions already name. */
function pluginWays(step: Step, transitions: Transition[]): Way[] {
  const named = transitions.filter((t) => t.fromStepId === step.id && t.branch).map((t) => t.branch!);
  return [null, ...new Set(named)];
}

/** The id of the handle a way leaves by ("next" for the plain way). */
export function handleOf(way: Way): string {
  return way ?? "next";
}

/** The way a handle stands for. */
export function wayOfHandle(handle: string | null | undefined): Way {
  return !handle || handle === "next" ? null : handle;
}

/**
 * Whether a new transition from `from` by `way` to `to` may be drawn: both steps exist and
 * differ, the way is offered and free, and it would close no loop.
 */
export function canConnect(steps: Step[], transitions: Transition[], from: string, way: Way, to: string): boolean {
  const source = steps.find((s) => s.id === from);
  if (!source || from === to || !steps.some((s) => s.id === to)) return false;
  const used = transitions.some((t) => t.fromStepId === from && (t.branch ?? null) === way);
  if (used) return false;
  if (source.type !== "PLUGIN" && !waysOut(source.type).includes(way)) return false;
  if (source.type === "PLUGIN" && way !== null && !/^[a-z0-9_-]{1,64}$/.test(way)) return false;
  return !reaches(transitions, to, from);
}

/** Whether `start` leads to `target` along transitions. */
export function reaches(transitions: Transition[], start: string, target: string): boolean {
  const seen = new Set<string>();
  const stack = [start];
  while (stack.length) {
    const at = stack.pop()!;
    if (at === target) return true;
    if (seen.has(at)) continue;
    seen.add(at);
    for (const t of transitions) if (t.fromStepId === at) stack.push(t.toStepId);
  }
  return false;
}

/** The 422 errors of an API error body (empty when it has none). */
export function fieldErrors(body: unknown): FieldError[] {
  const errors = (body as { error?: { errors?: FieldError[] } } | undefined)?.error?.errors;
  return Array.isArray(errors) ? errors.map((e) => ({ field: e.field, message: e.message })) : [];
}

/**
 * The errors of a step's config by field, from the paths of a step request
 * (`config.amount`) or of enabling (`steps[2].config.amount`, given the step's index):
 * `{ "amount": [...], "": [...] }` ("" for the whole config).
 */
export function configErrors(errors: FieldError[], index?: number): Record<string, string[]> {
  const prefix = index === undefined ? "" : `steps[${index}].`;
  const out: Record<string, string[]> = {};
  for (const e of errors) {
    if (!e.field.startsWith(`${prefix}config`)) continue;
    const rest = e.field.slice(`${prefix}config`.length).replace(/^\./, "");
    (out[rest] ??= []).push(e.message);
  }
  return out;
}

/** The messages at `key` or under it (`filter` gathers `filter.groups[0]…`). */
export function errorsAt(errors: Record<string, string[]>, key: string): string[] {
  return Object.entries(errors)
    .filter(([k]) => k === key || k.startsWith(`${key}.`) || k.startsWith(`${key}[`))
    .flatMap(([, m]) => m);
}

/**
 * The problems enabling reported, sorted: those of a step (`steps[i]…`, by the step's id) and
 * of a transition (`transitions[i]…`, on the step it leaves), and the others (the graph's).
 */
export function sortProblems(
  errors: FieldError[],
  steps: Step[],
  transitions: Transition[],
): { byStep: Record<string, string[]>; general: FieldError[] } {
  const byStep: Record<string, string[]> = {};
  const general: FieldError[] = [];
  for (const e of errors) {
    const m = /^(steps|transitions)\[(\d+)\]/.exec(e.field);
    const step =
      m?.[1] === "steps" ? steps[Number(m[2])]?.id : m?.[1] === "transitions" ? transitions[Number(m[2])]?.fromStepId : undefined;
    if (step) (byStep[step] ??= []).push(e.message);
    else general.push(e);
  }
  return { byStep, general };
}

/** A message of the API with the step and transition ids it names replaced by their labels. */
export function withLabels(message: string, steps: Step[], transitions: Transition[]): string {
  return message
    .replace(/\btrn_[0-9a-z]+/g, (id) => {
      const t = transitions.find((x) => x.id === id);
      return t ? `the transition from ${labelOf(steps, t.fromStepId)} to ${labelOf(steps, t.toStepId)}` : id;
    })
    .replace(/\bstp_[0-9a-z]+/g, (id) => (steps.some((s) => s.id === id) ? `“${labelOf(steps, id)}”` : id));
}
