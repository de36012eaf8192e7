import { describe, expect, it } from "vitest";
import { parseAddresses, reasonWords } from "./words";

describe("parseAddresses", () => {
  it("splits on commas, semicolons and white space and drops repeats", () => {
    expect(parseAddresses(" a@x.test, b@x.test;\nc@x.test  a@x.test ")).toEqual(["a@x.test", "b@x.test", "c@x.test"]);
    expect(parseAddresses(" \n ")).toEqual([]);
  });
});

describe("reasonWords", () => {
  it("says each reason in words", () => {
    expect(reasonWords("HARD_BOUNCE")).toBe("Bounced");
    expect(reasonWords("COMPLAINT")).toBe("Reported as spam");
    expect(reasonWords("MANUAL")).toBe("Added by hand");
  });
});
