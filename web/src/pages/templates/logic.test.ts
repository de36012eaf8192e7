import { describe, expect, it } from "vitest";
import { changes, closingBraces, dataVariables, fieldErrors, tagProblem, variableAt, type Draft } from "./logic";

describe("dataVariables", () => {
  it("keeps the custom fields, without the prefix and escapes, by name", () => {
    const fields = [
      { field: "email", type: "string", isCustom: false, coverage: 1 },
      { field: "data.plan", type: "string", isCustom: true, coverage: 0.5 },
      { field: "data.firstName", type: "string", isCustom: true, coverage: 0.9 },
      { field: "data.utm\\.source", type: "string", isCustom: true, coverage: 0.1 },
    ];
    expect(dataVariables(fields)).toEqual(["firstName", "plan", "utm.source"]);
  });
});

describe("variableAt", () => {
  it("finds the name being typed inside braces", () => {
    expect(variableAt("Hi {{fir")).toEqual({ from: 5, typed: "fir" });
    expect(variableAt("Hi {{ ")).toEqual({ from: 6, typed: "" });
    expect(variableAt("<a href=\"{{{unsub")).toEqual({ from: 12, typed: "unsub" });
    expect(variableAt("{{#if pl")).toEqual({ from: 6, typed: "pl" });
    expect(variableAt("{{#pl")).toBeNull();
  });

  it("is nothing outside braces or after a closed variable", () => {
    expect(variableAt("Hello fir")).toBeNull();
    expect(variableAt("{{firstName}} and")).toBeNull();
    expect(variableAt("{ single")).toBeNull();
  });
});

describe("closingBraces", () => {
  it("closes a raw variable with three braces, others with two", () => {
    expect(closingBraces("<a href=\"{{{")).toBe(3);
    expect(closingBraces("Hi {{")).toBe(2);
    expect(closingBraces("{{{a}}} and {{#if ")).toBe(2);
  });
});

describe("fieldErrors", () => {
  it("maps each field path to its messages", () => {
    const body = {
      error: {
        code: "VALIDATION_ERROR",
        message: "2 fields are invalid",
        errors: [
          { field: "variants.fr.body", code: "invalid_template", message: "line 1, column 3: …" },
          { field: "subject", code: "too_long", message: "too long" },
          { field: "subject", code: "invalid", message: "one line" },
        ],
      },
    };
    expect(fieldErrors(body)).toEqual({
      "variants.fr.body": "line 1, column 3: …",
      subject: "too long; one line",
    });
    expect(fieldErrors(undefined)).toEqual({});
  });
});

describe("changes", () => {
  const saved: Draft = {
    name: "Welcome",
    type: "TRANSACTIONAL",
    subject: "Hi",
    body: "<p>Hi</p>",
    variants: { fr: { subject: "Salut", body: "<p>Salut</p>" } },
  };

  it("is null when nothing changed", () => {
    expect(changes(saved, { ...saved, variants: { ...saved.variants } })).toBeNull();
  });

  it("sends only what changed, the variants whole", () => {
    const draft = { ...saved, subject: "Hello", variants: { ...saved.variants, de: { subject: "Hallo", body: "<p>Hallo</p>" } } };
    expect(changes(saved, draft)).toEqual({ subject: "Hello", variants: draft.variants });
  });
});

describe("tagProblem", () => {
  it("refuses an empty, malformed or repeated tag", () => {
    expect(tagProblem("fr", [])).toBeNull();
    expect(tagProblem("pt-BR", ["fr"])).toBeNull();
    expect(tagProblem(" ", [])).toMatch(/Type a language tag/);
    expect(tagProblem("not a tag", [])).toMatch(/not a language tag/);
    expect(tagProblem("FR", ["fr"])).toMatch(/already/);
    expect(tagProblem("pt_br", ["pt-BR"])).toMatch(/already/);
  });
});
