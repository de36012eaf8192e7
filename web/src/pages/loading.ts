// Reading from the API in a page: the answer to the latest request, its error in words, whether
// one is on its way, and reading again. `ask` is the part without React (a pause, the request,
// stale answers thrown away); the hooks run it again each time what the request depends on changes.
import { useCallback, useEffect, useState, type DependencyList } from "react";
import { errorMessage } from "../api/client";

/** What openapi-fetch answers: the data, or the API's error body. */
export type Answer<T> = { data?: T; error?: unknown };

/** A request to the API, stopped by `signal` when its answer is no longer wanted; `null` when
 * there is nothing to ask (no project chosen yet, an incomplete filter). */
export type Request<T> = (signal: AbortSignal) => Promise<Answer<T>> | null;

/** An answer as a page shows it: the data, or the error in words (the data then `null`). */
export type Outcome<T> = { data: T | null; error: string | null };

/** What a request that failed without an answer (no network, a body that is no JSON) says. */
const UNANSWERED = errorMessage(undefined);

/**
 * Asks `request` after `delay` ms (at once for 0) and hands its outcome to `settle`, or `null`
 * when the request had nothing to ask. The returned function cancels: the pause ends without
 * asking, a request on its way is aborted, and `settle` is not called any more, so an answer that
 * comes after a newer request started is never shown.
 */
export function ask<T>(
  request: Request<T>,
  settle: (outcome: Outcome<T> | null) => void,
  delay = 0,
  describe: (error: unknown) => string = errorMessage,
): () => void {
  const controller = new AbortController();
  const { signal } = controller;
  const go = () => {
    const asking = request(signal);
    if (!asking) return settle(null);
    void asking
      .then(
        ({ data, error }): Outcome<T> => ({ data: data ?? null, error: error ? describe(error) : null }),
        (): Outcome<T> => ({ data: null, error: UNANSWERED }),
      )
      .then((outcome) => {
        if (!signal.aborted) settle(outcome);
      });
  };
  const timer = delay > 0 ? setTimeout(go, delay) : undefined;
  if (delay <= 0) go();
  return () => {
    clearTimeout(timer);
    controller.abort();
  };
}

/** Whether two lists of dependencies hold the same values (compared as React compares them). */
export function sameDeps(a: DependencyList, b: DependencyList): boolean {
  return a.length === b.length && a.every((x, i) => Object.is(x, b[i]));
}

type State<T> = Outcome<T> & { pending: boolean };

/** The answer to `request`, asked again `delay` ms after each change of `deps` (or of `version`). */
function useAnswer<T>(request: Request<T>, deps: DependencyList, delay: number, describe?: (error: unknown) => string) {
  const [state, setState] = useState<State<T>>({ data: null, error: null, pending: true });
  const [version, setVersion] = useState(0);
  const key = [...deps, version];
  // A change is pending from the render that sees it (not an effect later): the page never
  // shows an older answer as the answer to what it now asks.
  const [asked, setAsked] = useState<DependencyList>(key);
  if (!sameDeps(asked, key)) {
    setAsked(key);
    if (!state.pending) setState({ ...state, pending: true });
  }
  useEffect(
    () =>
      ask(
        request,
        (outcome) => setState((s) => (outcome ? { ...outcome, pending: false } : { ...s, pending: false })),
        delay,
        describe,
      ),
    // The request is of the render whose `deps` changed: they are checked where the hook is
    // called (eslint.config.js names these hooks to react-hooks/exhaustive-deps).
    // eslint-disable-next-line react-hooks/exhaustive-deps
    key,
  );
  const reload = useCallback(() => setVersion((v) => v + 1), []);
  return { ...state, reload };
}

/**
 * The answer to `request`, asked when the page shows and again when `deps` change or on
 * `reload()`: `data` (`null` until it comes and after an error; kept while the next is asked),
 * `error` in words (`errorMessage`), `loading` while a request is on its way. An answer to an
 * older request is thrown away. A `request` that returns `null` asks nothing and leaves the
 * last answer as it is.
 */
export function useRequest<T>(request: Request<T>, deps: DependencyList) {
  const { data, error, pending, reload } = useAnswer(request, deps, 0);
  return { data, error, loading: pending, reload };
}

/**
 * The answer to `request` asked once `deps` have stayed the same for `delay` ms (typing has
 * paused): the latest answer only, the pause's timer cleared when the page goes. `pending` is
 * true from a change until its answer (or until the pause ends with nothing to ask); `describe`
 * puts an error body in words (`errorMessage` unless given; a function of the error alone).
 * Work on the answer (field errors for a form) goes in `request`, once `signal.aborted` says the
 * answer is still wanted.
 */
export function useDebouncedRequest<T>(
  request: Request<T>,
  deps: DependencyList,
  delay: number,
  describe?: (error: unknown) => string,
) {
  const { data, error, pending } = useAnswer(request, deps, delay, describe);
  return { data, error, pending };
}
