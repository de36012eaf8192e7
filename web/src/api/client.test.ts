import { describe, expect, it } from "vitest";
import { errorMessage } from "./client";

describe("errorMessage", () => {
  it("says the message, each invalid field and the suggestion", () => {
    const body = {
      success: false,
      timestamp: "2026-01-01T00:00:00Z",
      error: {
        code: "VALIDATION_ERROR",
        message: "the request is invalid",
        statusCode: 422,
        requestId: "req_1",
        errors: [{ field: "email", message: "not an address", code: "invalid" }],
        suggestion: "fix the address",
      },
    };
    expect(errorMessage(body)).toBe(
      "the request is invalid (email: not an address). fix the address",
    );
  });

  it("says /v1/send's message and its fields", () => {
    const body = { code: 422, error: "VALIDATION_ERROR", message: "the send request has 1 problem(s)", time: 0, requestId: "r",
      errors: [{ field: "from", code: "required", message: "`from` is required" }] };
    expect(errorMessage(body)).toBe("the send request has 1 problem(s) (from: `from` is required)");
  });

  it("falls back to plain words without an error body", () => {
    expect(errorMessage(undefined)).toBe("Something went wrong; try again.");
    expect(errorMessage("Bad Gateway")).toBe("Something went wrong; try again.");
    expect(errorMessage(null)).toBe("Something went wrong; try again.");
  });
});
