import { expect, it } from "vitest";
import { addresses } from "./addresses";

it("reads pasted addresses one per line or separated, each once", () => {
  expect(addresses(" a@x.com\nb@x.com, c@x.com;a@x.com \n\n")).toEqual(["a@x.com", "b@x.com", "c@x.com"]);
  expect(addresses("  \n ")).toEqual([]);
});
