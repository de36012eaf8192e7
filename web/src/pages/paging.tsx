// Paging through the API's lists: the cursor pages ("Previous page" goes back along the cursors
// of the pages seen before) and the Previous/Next navigation under a list.
import { useState } from "react";
import { useSearchParams } from "react-router";

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
