import { describe, expect, it } from "vitest";
import { back, FIRST, forward } from "./paging";

describe("cursor trail", () => {
  it("goes forward and back along the cursors seen", () => {
    const second = forward(FIRST, "c2");
    expect(second).toEqual({ cursor: "c2", before: [null] });
    const third = forward(second, "c3");
    expect(third).toEqual({ cursor: "c3", before: [null, "c2"] });
    expect(back(third)).toEqual(second);
    expect(back(back(third))).toEqual(FIRST);
  });

  it("stays on the first page when there is none before", () => {
    expect(back(FIRST)).toBe(FIRST);
  });

  it("leaves the trail it was given as it was", () => {
    const t = forward(FIRST, "c2");
    forward(t, "c3");
    back(t);
    expect(t).toEqual({ cursor: "c2", before: [null] });
  });
});
