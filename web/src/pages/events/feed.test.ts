import { describe, expect, it } from "vitest";
import { announcement, kindName, merge } from "./feed";

const e = (id: string) => ({ id, createdAt: "2026-01-01T00:00:00Z" });

describe("the live activity feed", () => {
  it("puts new entries on top and keeps older pages", () => {
    const shown = [e("c"), e("b"), e("a")];
    expect(merge(shown, [e("e"), e("d"), e("c"), e("b")])).toEqual({
      entries: [e("e"), e("d"), e("c"), e("b"), e("a")],
      added: 2,
    });
  });

  it("changes nothing and says nothing when nothing came", () => {
    const shown = [e("b"), e("a")];
    const result = merge(shown, [e("b"), e("a")]);
    expect(result.entries).toBe(shown);
    expect(result.added).toBe(0);
    expect(announcement(0, 2)).toBe("");
    expect(announcement(1, 3)).toBe("1 new entry in the activity feed (3 shown).");
    expect(announcement(3, 1200)).toBe("3 new entries in the activity feed (1,200 shown).");
  });

  it("names kinds in plain words", () => {
    expect(kindName("soft_bounced")).toBe("Soft bounce");
    expect(kindName("some_new_kind")).toBe("some new kind");
  });
});
