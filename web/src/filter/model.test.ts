import { describe as suite, expect, it } from "vitest";
import {
  addItem,
  catalogue,
  choiceFor,
  describe,
  fromApi,
  newCondition,
  newGroup,
  numbering,
  placeErrors,
  splitErrors,
  operatorsFor,
  removeItem,
  setField,
  setLogic,
  setOperator,
  setValue,
  toApi,
  valueKind,
  type ApiFilter,
  type DraftCondition,
  type DraftGroup,
  type Kind,
} from "./model";

const fields = catalogue({
  data: [
    { field: "data.plan", type: "string" },
    { field: "data.visits", type: "number" },
    { field: "data.vip", type: "boolean" },
    { field: "data.renewsAt", type: "date" },
    { field: "data.tags", type: "array" },
    { field: "data.address", type: "object" },
  ],
  events: ["signed_up"],
  topics: [{ id: "top_1", name: "News" }],
  segments: [{ id: "seg_1", name: "Trial" }],
});
const field = (name: string) => choiceFor(name, fields);

/** A condition row of `root` by its number ("Condition 2" is `row(root, 2)`). */
function row(root: DraftGroup, n: number): DraftCondition {
  const numbers = numbering(root);
  const found: DraftCondition[] = [];
  const walk = (g: DraftGroup) =>
    g.items.forEach((i) => (i.type === "group" ? walk(i) : numbers.get(i.id) === n && found.push(i)));
  walk(root);
  return found[0]!;
}

// plan = "pro" AND (country = "FR" OR visits > 3), built by the builder's edits.
function nested(): DraftGroup {
  let root: DraftGroup = { type: "group", id: "root", logic: "AND", items: [] };
  root = addItem(root, "root", newCondition(field("data.plan")));
  root = setValue(root, row(root, 1).id, "pro");
  const group = newGroup(field("data.plan"), "AND");
  root = addItem(root, "root", group);
  root = setLogic(root, group.id, "OR");
  root = setField(root, row(root, 2).id, field("data.country"), fields);
  root = setValue(root, row(root, 2).id, "FR");
  root = addItem(root, group.id, newCondition(field("data.visits")));
  root = setOperator(root, row(root, 3).id, "greaterThan", fields);
  root = setValue(root, row(root, 3).id, "3");
  return root;
}

const expected: ApiFilter = {
  logic: "AND",
  groups: [
    { filters: [{ field: "data.plan", operator: "equals", value: "pro" }] },
    {
      filters: [],
      conditions: {
        logic: "OR",
        groups: [
          { filters: [{ field: "data.country", operator: "equals", value: "FR" }] },
          { filters: [{ field: "data.visits", operator: "greaterThan", value: 3 }] },
        ],
      },
    },
  ],
};

suite("the filter builder's state", () => {
  it("builds a nested group into the API's filter, values typed by field", () => {
    const root = nested();
    const { filter, problems, paths } = toApi(root, fields);
    expect(problems).toEqual([]);
    expect(filter).toEqual(expected);
    // Each API path names the item the API's errors are about.
    expect(paths.get("groups[1].conditions.groups[1].filters[0]")).toBe(row(root, 3).id);
    expect(paths.get("groups[1].conditions")).toBe(root.items[1]!.id);
    expect([...paths.keys()]).toEqual([
      "groups[0].filters[0]",
      "groups[1].conditions",
      "groups[1].conditions.groups[0].filters[0]",
      "groups[1].conditions.groups[1].filters[0]",
    ]);
  });

  it("reads an API filter back into the same filter", () => {
    const back = fromApi(expected, field("email"), fields);
    expect(toApi(back, fields).filter).toEqual(expected);
    expect(back.items.map((i) => i.type)).toEqual(["condition", "group"]);
  });

  it("reads groups of several conditions and a nested filter as groups matching all", () => {
    const api: ApiFilter = {
      logic: "OR",
      groups: [
        {
          filters: [
            { field: "email", operator: "contains", value: "@example.com" },
            { field: "subscribed", operator: "equals", value: true },
          ],
          conditions: { logic: "AND", groups: [{ filters: [{ field: "event.signed_up", operator: "triggeredWithin", value: 7, unit: "hours" }] }] },
        },
      ],
    };
    const back = fromApi(api, field("email"), fields);
    const group = back.items[0]! as DraftGroup;
    expect(group.logic).toBe("AND");
    expect(group.items.map((i) => i.type)).toEqual(["condition", "condition", "group"]);
    // The conversion is a fixed point from then on, and means the same: OR of one AND group.
    const once = toApi(back, fields).filter;
    expect(toApi(fromApi(once, field("email"), fields), fields).filter).toEqual(once);
    expect(once.groups[0]?.conditions?.groups[0]?.filters?.[0]).toEqual({ field: "email", operator: "contains", value: "@example.com" });
    expect(JSON.stringify(once)).toContain('"unit":"hours"');
  });

  it("starts a new filter with one condition and reads junk as a new filter", () => {
    const fresh = fromApi(null, field("data.plan"), fields);
    expect(fresh.items).toHaveLength(1);
    expect(fromApi({} as ApiFilter, field("email"), fields).items).toHaveLength(1);
  });

  it("removes conditions and groups, and reports a group left empty", () => {
    let root = nested();
    const group = root.items[1]! as DraftGroup;
    root = removeItem(root, row(root, 2).id);
    root = removeItem(root, row(root, 2).id);
    expect(numbering(root).size).toBe(2);
    const { problems } = toApi(root, fields);
    expect(problems).toEqual([{ id: group.id, message: "Add a condition to this group or remove it." }]);
    root = removeItem(root, group.id);
    expect(toApi(root, fields).filter).toEqual({ logic: "AND", groups: [expected.groups[0]] });
  });

  it("numbers conditions and groups in document order", () => {
    const root = nested();
    const numbers = numbering(root);
    expect(numbers.get(root.items[1]!.id)).toBe(1);
    expect(row(root, 3).field).toBe("data.visits");
  });

  it("resets a value an operator change makes unfit, and keeps one that still fits", () => {
    let root = nested();
    const visits = row(root, 3).id;
    root = setOperator(root, visits, "lessThanOrEqual", fields);
    expect(row(root, 3).value).toBe("3");
    root = setOperator(root, visits, "exists", fields);
    expect(row(root, 3).value).toBe("");
    expect(toApi(root, fields).filter.groups[1]?.conditions?.groups[1]?.filters?.[0]).toEqual({ field: "data.visits", operator: "exists" });
    root = setOperator(root, visits, "equals", fields);
    expect(toApi(root, fields).problems).toEqual([{ id: visits, message: "Enter a number." }]);
  });

  it("keeps an operator the new field takes and changes one it does not", () => {
    let root = nested();
    const plan = row(root, 1).id;
    root = setField(root, plan, field("email"), fields);
    expect(row(root, 1)).toMatchObject({ operator: "equals", value: "pro" });
    root = setValue(root, plan, " ");
    expect(toApi(root, fields).problems).toEqual([{ id: plan, message: "Enter a value." }]);
    root = setField(root, plan, field("event.signed_up"), fields);
    expect(row(root, 1)).toMatchObject({ operator: "triggered", value: "" });
    root = setOperator(root, plan, "notTriggeredWithin", fields);
    root = setValue(root, plan, "30", "days");
    expect(toApi(root, fields).filter.groups[0]?.filters?.[0]).toEqual({ field: "event.signed_up", operator: "notTriggeredWithin", value: 30, unit: "days" });
    root = setField(root, plan, field("data.vip"), fields);
    expect(row(root, 1)).toMatchObject({ operator: "equals", value: "true" });
    root = setValue(root, plan, "false");
    expect(toApi(root, fields).filter.groups[0]?.filters?.[0]).toEqual({ field: "data.vip", operator: "equals", value: false });
  });

  it("refuses a duration that is not above zero and a missing date", () => {
    let root: DraftGroup = { type: "group", id: "r", logic: "AND", items: [newCondition(field("createdAt"))] };
    const id = root.items[0]!.id;
    expect(row(root, 1)).toMatchObject({ operator: "within", value: "7" });
    root = setValue(root, id, "0");
    expect(toApi(root, fields).problems).toEqual([{ id, message: "Enter a number above 0." }]);
    root = setOperator(root, id, "greaterThan", fields);
    expect(toApi(root, fields).problems).toEqual([{ id, message: "Choose a date." }]);
    root = setValue(root, id, "2026-01-31");
    expect(toApi(root, fields).filter.groups[0]?.filters?.[0]).toEqual({ field: "createdAt", operator: "greaterThan", value: "2026-01-31" });
  });

  it("offers every operator of the filter language, each with a fitting input", () => {
    const all = new Set(Object.values(["string", "email", "number", "boolean", "subscribed", "date", "array", "object", "event", "segment", "topic"] as Kind[]).flatMap(operatorsFor));
    expect([...all].sort()).toEqual(
      [
        "equals", "notEquals", "contains", "notContains", "greaterThan", "lessThan", "greaterThanOrEqual",
        "lessThanOrEqual", "exists", "notExists", "within", "olderThan", "triggered", "notTriggered",
        "triggeredWithin", "notTriggeredWithin", "memberOf", "notMemberOf", "subscribed", "notSubscribed",
      ].sort(),
    );
    expect(valueKind("memberOf", "segment")).toBe("none");
    expect(valueKind("olderThan", "date")).toBe("duration");
    expect(valueKind("greaterThan", "number")).toBe("number");
    expect(valueKind("contains", "array")).toBe("text");
  });

  it("lists fields by section and guesses the kind of one no longer listed", () => {
    expect(fields.map((f) => f.section)).toContain("Custom data");
    expect(field("topic.top_1")).toMatchObject({ label: "News", kind: "topic" });
    expect(field("segment.seg_9")).toMatchObject({ kind: "segment", section: "Not listed" });
    expect(field("data.gone")).toMatchObject({ kind: "string" });
  });

  it("says a filter in plain words", () => {
    expect(describe(expected, fields)).toBe('plan is "pro" and (country is "FR" or visits is greater than 3)');
    expect(describe(null, fields)).toBe("No condition.");
  });
});

suite("the API's errors on a filter", () => {
  it("puts each error on the condition or group its path names", () => {
    const root = nested();
    const { paths } = toApi(root, fields);
    const { filter, other } = splitErrors(
      [
        { field: "name", message: "is required" },
        { field: "condition.groups[1].conditions.groups[1].filters[0].value", message: "must be a number" },
        { field: "condition.groups[1].conditions.logic", message: "must be AND or OR" },
        { field: "condition", message: "is required" },
      ],
      "condition",
    );
    expect(other).toEqual([{ field: "name", message: "is required" }]);
    const placed = placeErrors(filter, paths);
    expect(placed.get(row(root, 3).id)).toEqual(["must be a number"]);
    expect(placed.get(root.items[1]!.id)).toEqual(["must be AND or OR"]);
    expect(placed.get("")).toEqual(["is required"]);
  });
});
