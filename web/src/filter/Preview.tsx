// Who an unsaved filter selects now (`POST /segments/preview`): a count said politely to screen
// readers and a few of the contacts, read again a moment after each change.
import { Link } from "react-router";
import { api, errorMessage, type Schemas } from "../api/client";
import { useDebouncedRequest } from "../pages/loading";
import { splitErrors, type ApiFilter, type PathError } from "./model";

/** How long typing pauses before the filter is counted. */
export const PREVIEW_DELAY_MS = 400;
/** How many of the matching contacts are shown. */
const SAMPLE = 5;

type Props = {
  filter: ApiFilter | null;
  /** Whether every condition is complete (an incomplete filter is not sent). */
  complete: boolean;
  /** The API's errors about the filter (422), paths from its root, for the builder's rows. */
  onErrors: (errors: PathError[]) => void;
};

/** The API's errors about the filter's conditions in an error body, for the builder's rows. */
function conditionErrors(error: unknown): PathError[] {
  const fields = (error as Partial<Schemas["ErrorBody"]> | undefined)?.error?.errors ?? [];
  return splitErrors(fields, "condition").filter;
}

/** An error about the filter in words: its conditions' errors are said beside them. */
const describe = (error: unknown) =>
  conditionErrors(error).length ? "These conditions cannot be counted: see the messages beside them." : errorMessage(error);

/** The live count of a filter and a few contacts it selects. */
export function FilterPreview({ filter, complete, onErrors }: Props) {
  const text = filter && complete ? JSON.stringify(filter) : null;
  const answer = useDebouncedRequest(
    (signal) =>
      text
        ? api.POST("/segments/preview", { body: { condition: JSON.parse(text) as ApiFilter, limit: SAMPLE }, signal }).then((answer) => {
            if (answer.error && !signal.aborted) onErrors(conditionErrors(answer.error));
            return answer;
          })
        : null,
    [text, onErrors],
    PREVIEW_DELAY_MS,
    describe,
  );

  // Until the answer about this filter comes, the last count stays, marked as being redone.
  const loading = text !== null && answer.pending;
  const preview = text ? answer.data : null;
  const error = text && !loading ? answer.error : null;
  return (
    <div className="filter-preview">
      <div role="status" aria-live="polite" aria-busy={loading}>
        {!text && <p className="hint">Complete every condition to see how many contacts match.</p>}
        {error && <p className="error">{error}</p>}
        {preview && (
          <p>
            <strong>
              {preview.total.toLocaleString()} {preview.total === 1 ? "contact matches" : "contacts match"} now
            </strong>
            {loading ? " (counting again…)" : "."}
          </p>
        )}
        {!preview && !error && loading && <p>Counting the contacts that match…</p>}
      </div>
      {preview && preview.data.length > 0 && (
        <>
          <p className="hint">{preview.total > preview.data.length ? "The newest of them:" : "They are:"}</p>
          <ul className="list" aria-label="Contacts that match">
            {preview.data.map((c) => (
              <li key={c.id}>
                <Link to={`/contacts/${c.id}`}>{c.email}</Link>
              </li>
            ))}
          </ul>
        </>
      )}
    </div>
  );
}
