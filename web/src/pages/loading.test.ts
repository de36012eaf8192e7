import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ask, sameDeps, type Answer, type Outcome } from "./loading";

/** A request whose answer the test gives when it wants, recording the signals it was given. */
function controlled<T>() {
  const signals: AbortSignal[] = [];
  const answers: ((a: Answer<T>) => void)[] = [];
  const failures: ((e: unknown) => void)[] = [];
  const request = (signal: AbortSignal) => {
    signals.push(signal);
    return new Promise<Answer<T>>((resolve, reject) => {
      answers.push(resolve);
      failures.push(reject);
    });
  };
  const nth = <F>(list: F[], i: number): F => {
    const f = list[i];
    if (!f) throw new Error(`request ${i} was not asked`);
    return f;
  };
  return {
    request,
    signals,
    /** Answers request `i` (0: the first asked). */
    answer: (i: number, a: Answer<T>) => nth(answers, i)(a),
    /** Fails request `i` without an answer. */
    fail: (i: number, e: unknown) => nth(failures, i)(e),
  };
}

/** Lets the promise callbacks run. */
const settled = () => new Promise<void>((r) => setTimeout(r, 0));

describe("ask", () => {
  it("asks at once without a delay and hands over the data", async () => {
    const r = controlled<number>();
    const seen: (Outcome<number> | null)[] = [];
    ask(r.request, (o) => seen.push(o));
    expect(r.signals).toHaveLength(1);
    r.answer(0, { data: 7 });
    await settled();
    expect(seen).toEqual([{ data: 7, error: null }]);
  });

  it("puts an API error in words, the data then null", async () => {
    const r = controlled<number>();
    const seen: (Outcome<number> | null)[] = [];
    ask(r.request, (o) => seen.push(o));
    r.answer(0, { error: { success: false, error: { message: "Name is taken" } } });
    await settled();
    expect(seen).toEqual([{ data: null, error: "Name is taken" }]);
  });

  it("uses the given words for an error", async () => {
    const r = controlled<number>();
    const seen: (Outcome<number> | null)[] = [];
    ask(r.request, (o) => seen.push(o), 0, () => "Those conditions cannot be counted.");
    r.answer(0, { error: { error: { message: "422" } } });
    await settled();
    expect(seen).toEqual([{ data: null, error: "Those conditions cannot be counted." }]);
  });

  it("says something went wrong when the request fails without an answer", async () => {
    const r = controlled<number>();
    const seen: (Outcome<number> | null)[] = [];
    ask(r.request, (o) => seen.push(o));
    r.fail(0, new TypeError("Failed to fetch"));
    await settled();
    expect(seen).toEqual([{ data: null, error: "Something went wrong; try again." }]);
  });

  it("hands over null when there is nothing to ask", () => {
    const seen: (Outcome<number> | null)[] = [];
    ask<number>(() => null, (o) => seen.push(o));
    expect(seen).toEqual([null]);
  });

  it("throws away the answer to a request cancelled on its way, and aborts it", async () => {
    const r = controlled<string>();
    const seen: (Outcome<string> | null)[] = [];
    const cancel = ask(r.request, (o) => seen.push(o));
    cancel();
    expect(r.signals[0]?.aborted).toBe(true);
    r.answer(0, { data: "old" });
    await settled();
    expect(seen).toEqual([]);
  });

  it("keeps only the newer of two requests when the older answers last", async () => {
    const r = controlled<string>();
    const seen: (Outcome<string> | null)[] = [];
    const cancelFirst = ask(r.request, (o) => seen.push(o));
    // What the request depends on changed: the hook cancels the first and asks again.
    cancelFirst();
    ask(r.request, (o) => seen.push(o));
    r.answer(1, { data: "new" });
    r.answer(0, { data: "old" });
    await settled();
    expect(seen).toEqual([{ data: "new", error: null }]);
  });

  it("throws away a failure that comes after the cancel", async () => {
    const r = controlled<string>();
    const seen: (Outcome<string> | null)[] = [];
    const cancel = ask(r.request, (o) => seen.push(o));
    cancel();
    r.fail(0, new DOMException("The operation was aborted.", "AbortError"));
    await settled();
    expect(seen).toEqual([]);
  });
});

describe("ask after a pause", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("waits for the pause before asking", async () => {
    const r = controlled<number>();
    const seen: (Outcome<number> | null)[] = [];
    ask(r.request, (o) => seen.push(o), 400);
    vi.advanceTimersByTime(399);
    expect(r.signals).toHaveLength(0);
    vi.advanceTimersByTime(1);
    expect(r.signals).toHaveLength(1);
    r.answer(0, { data: 3 });
    await vi.runAllTimersAsync();
    expect(seen).toEqual([{ data: 3, error: null }]);
  });

  it("never asks when cancelled during the pause (typing went on, or the page went)", () => {
    const r = controlled<number>();
    const seen: (Outcome<number> | null)[] = [];
    const cancel = ask(r.request, (o) => seen.push(o), 400);
    vi.advanceTimersByTime(300);
    cancel();
    vi.advanceTimersByTime(1000);
    expect(r.signals).toHaveLength(0);
    expect(seen).toEqual([]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("asks only for the last of quick changes", async () => {
    const r = controlled<string>();
    const seen: (Outcome<string> | null)[] = [];
    let cancel = () => {};
    for (const text of ["a", "ab", "abc"]) {
      cancel();
      cancel = ask((signal) => (r.request(signal), Promise.resolve({ data: text })), (o) => seen.push(o), 400);
      vi.advanceTimersByTime(100);
    }
    await vi.runAllTimersAsync();
    expect(r.signals).toHaveLength(1);
    expect(seen).toEqual([{ data: "abc", error: null }]);
  });

  it("hands over null once the pause ends with nothing to ask", () => {
    const seen: (Outcome<number> | null)[] = [];
    ask<number>(() => null, (o) => seen.push(o), 400);
    expect(seen).toEqual([]);
    vi.advanceTimersByTime(400);
    expect(seen).toEqual([null]);
  });
});

describe("sameDeps", () => {
  it("compares the values one by one, as React does", () => {
    const filter = { all: [] };
    expect(sameDeps(["p1", filter, 0], ["p1", filter, 0])).toBe(true);
    expect(sameDeps(["p1", filter, 0], ["p1", { all: [] }, 0])).toBe(false);
    expect(sameDeps([NaN], [NaN])).toBe(true);
    expect(sameDeps([1], [1, 2])).toBe(false);
    expect(sameDeps(["a", 1], ["a", 2])).toBe(false);
  });
});
