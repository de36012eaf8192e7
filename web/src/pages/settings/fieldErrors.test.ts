import { describe, expect, it } from "vitest";
import { placeErrors } from "./fieldErrors";

function body(errors: { field: string; message: string }[], suggestion?: string) {
  return {
    success: false,
    timestamp: "2026-01-01T00:00:00Z",
    error: {
      code: "VALIDATION_ERROR",
      message: "the request is invalid",
      statusCode: 422,
      requestId: "req_1",
      errors: errors.map((e) => ({ ...e, code: "invalid" })),
      suggestion,
    },
  };
}

describe("placeErrors", () => {
  const names = ["name", "defaultFrom.email", "defaultFrom.name", "transport"];

  it("puts each error on its field, the general message pointing at them", () => {
    const placed = placeErrors(body([{ field: "name", message: "too long" }]), names);
    expect(placed.fields).toEqual({ name: "too long" });
    expect(placed.general).toBe("Please correct the marked fields.");
  });

  it("puts an error on an object on its first field, and a deeper one on its parent", () => {
    const names2 = ["defaultFrom", "doubleOptIn"];
    expect(placeErrors(body([{ field: "defaultFrom.email", message: "unverified domain" }]), names2).fields).toEqual({
      defaultFrom: "unverified domain",
    });
    expect(placeErrors(body([{ field: "defaultFrom", message: "no domain" }]), names).fields).toEqual({
      "defaultFrom.email": "no domain",
    });
  });

  it("says the errors no field takes, with the suggestion", () => {
    const placed = placeErrors(
      body([{ field: "other", message: "bad" }, { field: "transport", message: "unknown" }], "check it"),
      names,
    );
    expect(placed.fields).toEqual({ transport: "unknown" });
    expect(placed.general).toBe("the request is invalid (other: bad) check it");
  });

  it("joins two errors on one field and falls back without a body", () => {
    const placed = placeErrors(
      body([{ field: "name", message: "empty" }, { field: "name", message: "too short" }]),
      names,
    );
    expect(placed.fields.name).toBe("empty; too short");
    expect(placeErrors(undefined, names)).toEqual({ fields: {}, general: "Something went wrong; try again." });
  });
});
