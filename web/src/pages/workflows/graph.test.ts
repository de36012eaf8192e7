import { describe, expect, it } from "vitest";
import {
  canConnect,
  configErrors,
  errorsAt,
  fieldErrors,
  freeWays,
  layout,
  sortProblems,
  toCanvas,
  waysOut,
  wayOfHandle,
  withLabels,
  type Step,
  type StepType,
  type Transition,
} from "./graph";

const at = "2026-01-01T00:00:00Z";
const step = (id: string, type: StepType, config: unknown = {}, name?: string): Step => ({
  id,
  workflowId: "wfl_1",
  type,
  name: name ?? null,
  config,
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
