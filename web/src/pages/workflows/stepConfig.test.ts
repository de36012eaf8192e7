import { describe, expect, it } from "vitest";
import { configOf, draftOf, filterOf, ruleOfPath, rulesOf, ruleValue } from "./stepConfig";

describe("condition rules", () => {
  it("round-trip through a filter of one group (all) or one group per rule (any)", () => {
    const all = filterOf("all", [
      { field: "data.plan", operator: "equals", value: "pro", unit: "days" },
      { field: "createdAt", operator: "within", value: "7", unit: "days" },
      { field: "event.signed_up", operator: "triggered", value: "", unit: "days" },
    ]);
    expect(all).toEqual({
      logic: "AND",
      groups: [
        {
          filters: [
            { field: "data.plan", operator: "equals", value: "pro" },
            { field: "createdAt", operator: "within", value: 7, unit: "days" },
            { field: "event.signed_up", operator: "triggered" },
          ],
        },
      ],
    });
    expect(rulesOf(all)?.rules.map((r) => r.value)).toEqual(["pro", "7", ""]);
    const any = filterOf("any", [{ field: "email", operator: "contains", value: "@x.org", unit: "days" }]);
    expect(any).toEqual({ logic: "OR", groups: [{ filters: [{ field: "email", operator: "contains", value: "@x.org" }] }] });
    expect(rulesOf(any)?.match).toBe("any");
    const two = filterOf("any", [
      { field: "a", operator: "exists", value: "", unit: "days" },
      { field: "b", operator: "exists", value: "", unit: "days" },
    ]);
    expect(rulesOf(two)?.match).toBe("any");
  });

  it("leaves nested filters to the JSON editor", () => {
    expect(rulesOf({ logic: "AND", groups: [{ conditions: { logic: "OR", groups: [] } }] })).toBeNull();
    expect(rulesOf({ logic: "OR", groups: [{ filters: [{}, {}] }, { filters: [{}] }] })).toBeNull();
    expect(rulesOf(undefined)?.rules).toHaveLength(1);
  });

  it("types values: numbers, booleans and quoted strings as JSON, other text as a string", () => {
    expect(ruleValue("30")).toBe(30);
    expect(ruleValue("true")).toBe(true);
    expect(ruleValue('"30"')).toBe("30");
    expect(ruleValue("pro")).toBe("pro");
    expect(rulesOf({ groups: [{ filters: [{ field: "f", operator: "equals", value: "30" }] }] })?.rules[0]?.value).toBe('"30"');
  });

  it("finds the rule of an error path", () => {
    expect(ruleOfPath("filter.groups[0].filters[2].value", "all")).toEqual({ rule: 2, part: "value" });
    expect(ruleOfPath("filter.groups[3].filters[0].field", "any")).toEqual({ rule: 3, part: "field" });
    expect(ruleOfPath("filter.logic", "all")).toBeNull();
  });
});

describe("drafts and configs", () => {
  it("round-trip each type's config", () => {
    const configs = {
      SEND_EMAIL: { templateId: "tpl_1", to: "boss@example.com" },
      DELAY: { amount: 2, unit: "hours" },
      WAIT_FOR_EVENT: { eventName: "paid", timeoutSeconds: 3600 },
      WEBHOOK: { url: "https://example.com/h", method: "PUT", headers: { "X-A": "1" }, body: { a: 1 } },
      UPDATE_CONTACT: { data: { plan: "pro" }, subscribed: false },
      EXIT: { reason: "done" },
      PLUGIN: { plugin: "hello-step", greeting: "hi" },
    } as const;
    for (const [type, config] of Object.entries(configs)) {
      const t = type as keyof typeof configs;
      expect(configOf(t, draftOf(t, config))).toEqual({ config });
    }
  });

  it("leaves out empty optional fields and keeps a bad number for the API to report", () => {
    expect(configOf("SEND_EMAIL", draftOf("SEND_EMAIL", {}))).toEqual({ config: {} });
    const d = draftOf("DELAY", {});
    d.values.amount = "two";
    expect(configOf("DELAY", d)).toEqual({ config: { amount: "two", unit: "days" } });
  });

  it("reports JSON that does not parse on its field", () => {
    const d = draftOf("WEBHOOK", { url: "https://example.com" });
    d.values.headers = "{nope";
    expect(configOf("WEBHOOK", d)).toEqual({ errors: { headers: ["this is not valid JSON"] } });
    const p = draftOf("PLUGIN", {});
    p.values.settings = "[1]";
    expect(configOf("PLUGIN", p)).toEqual({ errors: { settings: ["give a JSON object"] } });
  });

  it("edits a nested condition as JSON", () => {
    const filter = { logic: "AND", groups: [{ conditions: { logic: "OR", groups: [] } }] };
    const d = draftOf("CONDITION", { filter });
    expect(d.rules).toBeNull();
    expect(configOf("CONDITION", d)).toEqual({ config: { filter } });
  });
});
