import { describe, expect, it } from "vitest";
import { shortId } from "./parts";

describe("a short id", () => {
  it("keeps the start and the last four characters of a long id", () => {
    expect(shortId("cnt_019af1c2a1d07b3e8a9c4f5d6e7b8a9c")).toBe("cnt_019a…8a9c");
  });
  it("leaves a short id whole", () => {
    expect(shortId("cnt_12345")).toBe("cnt_12345");
  });
});
