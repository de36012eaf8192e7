import { describe, expect, it } from "vitest";
import {
  canConnect,
  COLUMN,
  configErrors,
  errorsAt,
  fieldErrors,
  freeWays,
  layout,
  NODE,
  overlaps,
  placeNew,
  positions,
  ROW,
  sortProblems,
  toCanvas,
  waysOut,
  wayOfHandle,
  withLabels,
  type Point,
  type Step,
  type StepType,
  type Transition,
} from "./graph";

const at = "2026-01-01T00:00:00Z";
const step = (id: string, type: StepType, config: unknown = {}, name?: string, position: Point | null = null): Step => ({
  id,
  workflowId: "wfl_1",
  type,
  name: name ?? null,
  config,
  position,
  createdAt: at,
  updatedAt: at,
});
const link = (id: string, from: string, to: string, branch?: string): Transition => ({
  id,
  workflowId: "wfl_1",
  fromStepId: from,
  toStepId: to,
  branch: branch ?? null,
  createdAt: at,
});

// signed_up → condition → yes: send / no: exit
const steps = [
  step("c", "CONDITION", { filter: {} }, "Pro?"),
  step("s", "SEND_EMAIL", { templateId: "tpl_1" }),
  step("e", "EXIT", { reason: "not pro" }),
  step("d", "DELAY", { amount: 1, unit: "days" }),
];
const transitions = [link("t1", "c", "s", "yes"), link("t2", "c", "e", "no"), link("t3", "s", "d")];

describe("ways out of a step", () => {
  it("are the branches of conditions and waits, none for an exit, one plain way otherwise", () => {
    expect(waysOut("CONDITION")).toEqual(["yes", "no"]);
    expect(waysOut("WAIT_FOR_EVENT")).toEqual(["event", "timeout"]);
    expect(waysOut("EXIT")).toEqual([]);
    expect(waysOut("SEND_EMAIL")).toEqual([null]);
  });

  it("leave out the ways already taken", () => {
    expect(freeWays(steps[0]!, [transitions[0]!])).toEqual(["no"]);
    expect(freeWays(steps[0]!, transitions)).toEqual([]);
    expect(freeWays(steps[3]!, transitions)).toEqual([null]);
    expect(freeWays(steps[1]!, transitions)).toEqual([]);
  });

  it("map to handles and back", () => {
    expect(wayOfHandle("next")).toBeNull();
    expect(wayOfHandle(null)).toBeNull();
    expect(wayOfHandle("yes")).toBe("yes");
  });
});

describe("layout", () => {
  it("puts each step one row below the longest way to it, yes left of no", () => {
    const p = layout(steps, transitions);
    expect(p.c!.y).toBe(0);
    expect(p.s!.y).toBe(p.e!.y);
    expect(p.s!.y).toBeGreaterThan(p.c!.y);
    expect(p.s!.x).toBeLessThan(p.e!.x);
    expect(p.d!.y).toBeGreaterThan(p.s!.y);
    expect(p.c!.x).toBe(0);
  });

  it("survives a loop (which the API refuses) and unconnected steps", () => {
    const p = layout([step("a", "DELAY"), step("b", "DELAY"), step("x", "EXIT")], [link("1", "a", "b"), link("2", "b", "a")]);
    expect(Object.keys(p).sort()).toEqual(["a", "b", "x"]);
  });
});

describe("positions", () => {
  it("are the layout's when no step has one", () => {
    expect(positions(steps, transitions)).toEqual(layout(steps, transitions));
  });

  it("are the stored ones; a step without one moves with the step it follows", () => {
    const placed = layout(steps, transitions);
    const moved = steps.map((s) => (s.id === "s" ? { ...s, position: { x: 1000, y: 2000 } } : s));
    const p = positions(moved, transitions);
    expect(p.s).toEqual({ x: 1000, y: 2000 });
    // The delay follows the send email: moved by as much.
    expect(p.d).toEqual({ x: placed.d!.x + 1000 - placed.s!.x, y: placed.d!.y + 2000 - placed.s!.y });
    // The others stay in the layout.
    expect(p.c).toEqual(placed.c);
    expect(p.e).toEqual(placed.e);
  });
});

describe("positions of steps without one", () => {
  const none = (p: Record<string, Point>) =>
    Object.entries(p).flatMap(([a, pa]) => Object.entries(p).filter(([b, pb]) => a < b && overlaps(pa, pb)).map(([b]) => `${a}/${b}`));

  it("step down below a stored step on their spot", () => {
    // Unconnected, a and b share the top row; b was dragged onto a's spot.
    const placed = layout([step("a", "DELAY"), step("b", "DELAY")], []);
    const p = positions([step("a", "DELAY"), step("b", "DELAY", {}, undefined, { x: placed.a!.x + 30, y: 20 })], []);
    expect(p.b).toEqual({ x: placed.a!.x + 30, y: 20 });
    expect(p.a).toEqual({ x: placed.a!.x, y: 20 + ROW });
    expect(none(p)).toEqual([]);
  });

  it("step past several stored steps in a column, and the steps after them follow", () => {
    // The exit was dragged onto the send email's spot, another step just under it (stored
    // steps take part in the layout as any other, but keep their place).
    const withX = [...steps, step("x", "EXIT")];
    const placed = layout(withX, transitions);
    const s = placed.s!;
    const crowded = withX.map((x) =>
      x.id === "e" ? { ...x, position: { x: s.x + 10, y: s.y + 10 } } : x.id === "x" ? { ...x, position: { x: s.x - 10, y: s.y + 10 + ROW - 20 } } : x,
    );
    const p = positions(crowded, transitions);
    expect(p.c).toEqual(placed.c);
    expect(p.s).toEqual({ x: s.x, y: s.y + 10 + ROW - 20 + ROW });
    // The delay after the send email moves by as much.
    expect(p.d).toEqual({ x: placed.d!.x, y: placed.d!.y + p.s!.y - s.y });
    expect(none(p)).toEqual([]);
  });

  it("leave stored steps where they are, even on one another", () => {
    const p = positions([step("a", "DELAY", {}, undefined, { x: 0, y: 0 }), step("b", "DELAY", {}, undefined, { x: 5, y: 5 })], []);
    expect(p).toEqual({ a: { x: 0, y: 0 }, b: { x: 5, y: 5 } });
  });
});

describe("placeNew", () => {
  const placedAt = (id: string, type: StepType, position: Point) => step(id, type, {}, undefined, position);

  it("puts the first step at the origin", () => {
    expect(placeNew([], [], null)).toEqual({ x: 0, y: 0 });
  });

  it("puts a step under the one it follows, yes to the left and no to the right", () => {
    const c = [placedAt("c", "CONDITION", { x: 100, y: 50 })];
    expect(placeNew(c, [], { from: "c", way: "yes" })).toEqual({ x: 100 - COLUMN / 2, y: 50 + ROW });
    expect(placeNew(c, [], { from: "c", way: "no" })).toEqual({ x: 100 + COLUMN / 2, y: 50 + ROW });
    const d = [placedAt("d", "DELAY", { x: 10, y: 20 })];
    expect(placeNew(d, [], { from: "d", way: null })).toEqual({ x: 10, y: 20 + ROW });
  });

  it("puts an unconnected step right of every step, at the top", () => {
    const two = [placedAt("a", "DELAY", { x: 0, y: 40 }), placedAt("b", "DELAY", { x: 300, y: 400 })];
    expect(placeNew(two, [], null)).toEqual({ x: 300 + COLUMN, y: 40 });
  });

  it("moves right past a step already in the place", () => {
    const busy = [placedAt("a", "DELAY", { x: 0, y: 0 }), placedAt("b", "EXIT", { x: 10, y: ROW })];
    expect(placeNew(busy, [], { from: "a", way: null })).toEqual({ x: COLUMN, y: ROW });
    // A step half a node to the side still covers the place.
    const near = [placedAt("a", "DELAY", { x: 0, y: 0 }), placedAt("b", "EXIT", { x: NODE.width / 2, y: ROW + NODE.height / 2 })];
    const spot = placeNew(near, [], { from: "a", way: null });
    expect(overlaps(spot, near[1]!.position!)).toBe(false);
    expect(spot).toEqual({ x: 2 * COLUMN, y: ROW });
  });

  it("follows the layout for steps without a position", () => {
    const p = layout(steps, transitions);
    expect(placeNew(steps, transitions, { from: "d", way: null })).toEqual({ x: p.d!.x, y: p.d!.y + ROW });
  });
});

describe("toCanvas", () => {
  it("gives a node per step and an edge per transition from its branch's handle", () => {
    const { nodes, edges } = toCanvas(steps, transitions, { s: ["no sender"] }, { d: { x: 5, y: 6 } });
    expect(nodes.map((n) => n.id)).toEqual(["c", "s", "e", "d"]);
    expect(nodes[0]!.data.ways).toEqual(["yes", "no"]);
    expect(nodes[0]!.data.entry).toBe(true);
    expect(nodes[1]!.data.entry).toBe(false);
    expect(nodes[0]!.data.label).toBe("1. Pro?");
    expect(nodes[1]!.data.label).toBe("2. Send email");
    expect(nodes[1]!.ariaLabel).toContain("1 problem");
    expect(nodes[3]!.position).toEqual({ x: 5, y: 6 });
    expect(edges.map((e) => [e.source, e.sourceHandle, e.target, e.label])).toEqual([
      ["c", "yes", "s", "yes"],
      ["c", "no", "e", "no"],
      ["s", "next", "d", undefined],
    ]);
    expect(edges[0]!.ariaLabel).toBe("From 1. Pro? (yes) to 2. Send email");
  });

  it("summarises each step's settings, with the template's name when it is known", () => {
    const named = toCanvas(steps, transitions, {}, {}, { tpl_1: "Welcome" }).nodes.map((n) => n.data.summary);
    expect(named).toEqual(["checks a filter", "template Welcome", "reason: not pro", "1 days"]);
    expect(toCanvas(steps, transitions).nodes[1]!.data.summary).toBe("template tpl_1");
  });
});

describe("canConnect", () => {
  it("refuses a taken way, a way the step does not offer, itself and a loop", () => {
    expect(canConnect(steps, transitions, "c", "yes", "d")).toBe(false);
    expect(canConnect(steps, [transitions[0]!], "c", "no", "d")).toBe(true);
    expect(canConnect(steps, [], "c", null, "d")).toBe(false);
    expect(canConnect(steps, [], "e", null, "d")).toBe(false);
    expect(canConnect(steps, [], "d", null, "d")).toBe(false);
    expect(canConnect(steps, transitions, "d", null, "c")).toBe(false);
    expect(canConnect(steps, [], "d", null, "c")).toBe(true);
  });
});

describe("errors from the API", () => {
  it("name steps and transitions by their labels", () => {
    expect(withLabels("2 steps have no incoming transition (s, e)", steps, transitions)).toBe("2 steps have no incoming transition (s, e)");
    const real = [step("stp_01ab", "DELAY"), step("stp_02cd", "EXIT")];
    const t = [link("trn_09ff", "stp_01ab", "stp_02cd")];
    expect(withLabels("steps (stp_01ab, stp_02cd); via trn_09ff; stp_99 unknown", real, t)).toBe(
      "steps (“1. Delay”, “2. Exit”); via the transition from 1. Delay to 2. Exit; stp_99 unknown",
    );
  });

  const body = {
    error: {
      errors: [
        { field: "steps", message: "2 steps have no incoming transition", code: "several_entries" },
        { field: "steps[1].config.templateId", message: "no sender", code: "no_sender" },
        { field: "transitions[2].branch", message: "bad branch", code: "invalid" },
      ],
    },
  };

  it("reads the field errors of a body", () => {
    expect(fieldErrors(body)).toHaveLength(3);
    expect(fieldErrors(undefined)).toEqual([]);
  });

  it("sorts enabling's problems onto steps (transitions onto the step they leave)", () => {
    const { byStep, general } = sortProblems(fieldErrors(body), steps, transitions);
    expect(byStep).toEqual({ s: ["no sender", "bad branch"] });
    expect(general.map((g) => g.field)).toEqual(["steps"]);
  });

  it("puts config paths on form fields", () => {
    const errs = configErrors(
      [
        { field: "config.unit", message: "bad unit" },
        { field: "config", message: "whole" },
        { field: "config.filter.groups[0].filters[1].operator", message: "bad op" },
        { field: "name", message: "too long" },
      ],
    );
    expect(errs).toEqual({ unit: ["bad unit"], "": ["whole"], "filter.groups[0].filters[1].operator": ["bad op"] });
    expect(errorsAt(errs, "filter")).toEqual(["bad op"]);
    expect(errorsAt(errs, "unit")).toEqual(["bad unit"]);
    expect(configErrors([{ field: "steps[1].config.templateId", message: "no sender" }], 1)).toEqual({ templateId: ["no sender"] });
    expect(configErrors([{ field: "steps[1].config.templateId", message: "no sender" }], 0)).toEqual({});
  });
});
