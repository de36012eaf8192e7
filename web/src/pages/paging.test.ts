import { describe, expect, it } from "vitest";
import { back, FIRST, forward, totalAfter } from "./paging";

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

describe("total of a paged list", () => {
  const page = (total: number) => ({ hasMore: true, cursor: "c", total });

  it("takes the first page's total", () => {
    expect(totalAfter(null, { page: page(120), first: true })).toBe(120);
    expect(totalAfter(120, { page: page(118), first: true })).toBe(118);
  });

  it("keeps the known total on the later pages, which count 0", () => {
    expect(totalAfter(120, { page: page(0), first: false })).toBe(120);
    expect(totalAfter(null, { page: page(0), first: false })).toBe(null);
  });

  it("keeps the known total when a page fails", () => {
    expect(totalAfter(120, null)).toBe(120);
  });
});
