import { describe, expect, it } from "vitest";
import { deleteError, topicDefaultWords } from "./words";

describe("topic words", () => {
  it("explains the default subscription", () => {
    expect(topicDefaultWords("OPT_IN")).toBe("Contacts are subscribed until they opt out.");
    expect(topicDefaultWords("OPT_OUT")).toBe("Contacts are subscribed only once they opt in.");
  });

  it("says a 409 in plain words and keeps other messages", () => {
    expect(deleteError("News", 409, "conflict")).toMatch(/^“News” is still used by a template/);
    expect(deleteError("News", 404, "not found")).toBe("not found");
  });
});
