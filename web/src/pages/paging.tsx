// Paging through the API's lists: the cursor pages ("Previous page" goes back along the cursors
// of the pages seen before) and the Previous/Next navigation under a list.
import { useState, type DependencyList } from "react";
import { useSearchParams } from "react-router";
import { useRequest, type Answer } from "./loading";

/** Where a list stands: the current page's cursor (`null`: the first page) and the cursors of
 * the pages before it, nearest last. */
export interface Trail {
  cursor: string | null;
  before: (string | null)[];
}

export const FIRST: Trail = { cursor: null, before: [] };

/** On to the page at `cursor`, the current one joining the trail. */
export function forward(t: Trail, cursor: string | null): Trail {
  return { cursor, before: [...t.before, t.cursor] };
}

/** Back to the page before; the first page stays where it is. */
export function back(t: Trail): Trail {
  if (t.before.length === 0) return t;
  return { cursor: t.before[t.before.length - 1] ?? null, before: t.before.slice(0, -1) };
}

/**
 * The cursor pages of a list. The cursor lives in the component, or with `inUrl` in the
 * address's `cursor` parameter (the other parameters kept); `onMove` runs on each move. `previous`
 * and `after(page)` are the moves, `null` where there is nowhere to go; `reset` starts again at
 * the first page (for a new filter, whose parameters the caller sets).
 */
export function useCursorPages({ inUrl = false, onMove }: { inUrl?: boolean; onMove?: () => void } = {}) {
  const [params, setParams] = useSearchParams();
  const [trail, setTrail] = useState<Trail>(FIRST);
  const cursor = inUrl ? params.get("cursor") : trail.cursor;
  const here: Trail = { cursor, before: trail.before };

  function move(to: Trail) {
    setTrail(to);
    onMove?.();
    if (inUrl) {
      setParams((old) => {
        const q = new URLSearchParams(old);
        if (to.cursor) q.set("cursor", to.cursor);
        else q.delete("cursor");
        return q;
      });
    }
  }

  return {
    cursor,
    /** No page before this one. */
    first: trail.before.length === 0,
    previous: trail.before.length > 0 ? () => move(back(here)) : null,
    after: (page: { hasMore: boolean; cursor?: string | null }) => (page.hasMore ? () => move(forward(here, page.cursor ?? null)) : null),
    reset: () => setTrail(FIRST),
  };
}

/** A page of one of the API's lists: its total is counted on the first page only (0 on the others). */
export interface CursorPage {
  hasMore: boolean;
  cursor?: string | null;
  total: number;
}

/** A page as it came, and whether it is the first (the one that counts the total). */
export type Counted<P> = { page: P; first: boolean };

/** The total after `answer`: the first page's, or the one known before (`null`: not known yet). */
export function totalAfter(known: number | null, answer: Counted<CursorPage> | null): number | null {
  return answer?.first ? answer.page.total : known;
}

/**
 * A list of the API's read a page at a time along its cursors (`useCursorPages`, with `inUrl` and
 * `onMove`), each page with `fetchPage(cursor, signal)` (`null`: nothing to ask yet), again when
 * `deps` change or on `reload()`. `total` is the first page's, kept on the pages after it;
 * `reset()` goes back to the first page and reads it again, counting anew (for a new search,
 * whose parameters the caller sets, or after a change to the list). An answer to an older
 * request is thrown away.
 */
export function usePagedList<P extends CursorPage>(
  fetchPage: (cursor: string | null, signal: AbortSignal) => Promise<Answer<P>> | null,
  deps: DependencyList,
  options: { inUrl?: boolean; onMove?: () => void } = {},
) {
  const pages = useCursorPages(options);
  const cursor = pages.cursor;
  const list = useRequest<Counted<P>>(
    (signal) =>
      fetchPage(cursor, signal)?.then(({ data, error }) => ({ data: data && { page: data, first: cursor === null }, error })) ??
      null,
    // The caller's `deps` are checked where it calls (eslint.config.js).
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [...deps, cursor],
  );
  // The total follows each answer (during the render that sees it, as React advises for state
  // kept from earlier renders).
  const [total, setTotal] = useState<number | null>(null);
  const [seen, setSeen] = useState(list.data);
  if (seen !== list.data) {
    setSeen(list.data);
    setTotal(totalAfter(total, list.data));
  }
  const page = list.data?.page ?? null;
  return {
    cursor,
    /** No page before this one. */
    first: pages.first,
    page,
    total,
    error: list.error,
    loading: list.loading,
    reload: list.reload,
    previous: pages.previous,
    next: page ? pages.after(page) : null,
    reset: () => {
      pages.reset();
      setTotal(null);
      list.reload();
    },
  };
}

/** "Previous page" and "Next page" under a list, each off where there is no such page. */
export function Pager({ label, previous, next }: { label: string; previous: (() => void) | null; next: (() => void) | null }) {
  return (
    <nav aria-label={label} className="pager">
      <button type="button" disabled={!previous} onClick={() => previous?.()}>
        Previous page
      </button>
      <button type="button" disabled={!next} onClick={() => next?.()}>
        Next page
      </button>
    </nav>
  );
}
