import { describe, expect, it } from "vitest";
import { jobResult, jobSummary } from "./jobResult";

describe("jobResult", () => {
  it("reads an import's result with its row errors", () => {
    const r = jobResult({
      total: 3,
      succeeded: 2,
      failed: 1,
      created: 2,
      updated: 0,
      errors: [{ row: 3, email: "not-an-address", error: "invalid email" }],
    });
    expect(r).toEqual({
      total: 3,
      succeeded: 2,
      failed: 1,
      created: 2,
      updated: 0,
      errors: [{ row: 3, contactId: undefined, email: "not-an-address", error: "invalid email" }],
    });
    expect(jobSummary(r, true)).toBe("2 of 3 done, 2 added, 0 updated, 1 failed.");
  });

  it("reads a bulk action's result and nothing before the job starts", () => {
    expect(jobResult(null)).toBeNull();
    expect(jobSummary(null, false)).toBe("Waiting to start…");
    const r = jobResult({ total: 2, succeeded: 1, failed: 1, errors: [{ contactId: "cnt_x", error: "not found" }, 7] });
    expect(r?.errors).toEqual([{ row: undefined, contactId: "cnt_x", email: undefined, error: "not found" }]);
    expect(jobSummary(r, false)).toBe("1 of 2 done, 1 failed…");
  });
});
