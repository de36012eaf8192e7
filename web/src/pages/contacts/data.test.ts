import { describe, expect, it } from "vitest";
import { fieldErrors, kindOf, newRow, patchOf, rowsOf, valueOf } from "./data";

describe("the typed data editor", () => {
  const original = { plan: "pro", seats: 5, trial: true, renews: "2026-03-01T10:00:00Z", tags: ["a"] };

  it("infers the kinds the service does", () => {
    expect(kindOf("2026-01-31")).toBe("date");
    expect(kindOf("2026-01-31T10:00:00Z")).toBe("date");
    expect(kindOf("31/01/2026")).toBe("string");
    expect(kindOf(1.5)).toBe("number");
    expect(kindOf(false)).toBe("boolean");
    expect(kindOf({ a: 1 })).toBe("other");
  });

  it("sends nothing when nothing changed (a date keeps its time)", () => {
    const rows = rowsOf(original);
    expect(rows.map((r) => [r.key, r.kind, r.value])).toEqual([
      ["plan", "string", "pro"],
      ["renews", "date", "2026-03-01"],
      ["seats", "number", "5"],
      ["tags", "other", '["a"]'],
      ["trial", "boolean", "true"],
    ]);
    expect(patchOf(original, rows)).toEqual({ patch: {}, errors: {} });
  });

  it("sends changed values in their types, new keys, and null for removed ones", () => {
    const rows = rowsOf(original).filter((r) => r.key !== "trial");
    rows.find((r) => r.key === "seats")!.value = "12";
    rows.find((r) => r.key === "renews")!.value = "2027-01-01";
    const plan = rows.find((r) => r.key === "plan")!;
    plan.key = "tier"; // renamed
    const added = { ...newRow(), key: "vip", kind: "boolean" as const, value: "false" };
    expect(patchOf(original, [...rows, added])).toEqual({
      patch: { seats: 12, renews: "2027-01-01", tier: "pro", plan: null, trial: null, vip: false },
      errors: {},
    });
  });

  it("changing a value's type sends the new type", () => {
    const rows = rowsOf({ zip: 1234 });
    rows[0]!.kind = "string";
    expect(patchOf({ zip: 1234 }, rows).patch).toEqual({ zip: "1234" });
  });

  it("says what is wrong with a row, and keeps a renamed nested value", () => {
    const rows = rowsOf(original);
    rows.find((r) => r.key === "tags")!.key = "labels";
    const blank = newRow();
    const dup = { ...newRow(), key: "seats", kind: "number" as const, value: "x" };
    const reserved = { ...newRow(), key: "email", value: "a@b.c" };
    const bad = { ...newRow(), key: "n", kind: "number" as const, value: "ten" };
    const { patch, errors } = patchOf(original, [...rows, blank, dup, reserved, bad]);
    expect(patch).toEqual({ labels: ["a"], tags: null });
    expect(errors).toEqual({
      [blank.uid]: "Give the field a name.",
      [dup.uid]: "There is another field named seats.",
      [reserved.uid]: "email is reserved and cannot be stored in data.",
      [bad.uid]: "Enter a number, such as 42 or 3.5.",
    });
    expect(valueOf({ ...newRow(), kind: "date", value: "2026-13-45" })).toEqual({ error: "Enter a date." });
    expect(valueOf({ ...newRow(), kind: "string", value: "" })).toEqual({
      error: "Enter some text, or remove the field.",
    });
  });

  it("puts the API's field errors on their rows", () => {
    const rows = rowsOf({ plan: "pro" });
    expect(
      fieldErrors(rows, [
        { field: "data.plan", message: "bad key" },
        { field: "data", message: "too many keys" },
        { field: "email", message: "ignored here" },
      ]),
    ).toEqual({ [rows[0]!.uid]: "bad key", 0: "too many keys" });
  });
});
