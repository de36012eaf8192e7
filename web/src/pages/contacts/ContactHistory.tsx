// What happened to one contact: the emails sent to it (each one's history on demand) and its
// executions of every workflow, each list newest first and paged with the API's cursors.
import { useEffect, useId, useRef, useState, type ReactNode } from "react";
import { Link } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import type { Answer } from "../loading";
import { Pager, usePagedList } from "../paging";
import { Alert } from "../parts";
import { statusName, when } from "../workflows/Executions";

const PAGE = 20;

type Page<T> = { data: T[]; cursor?: string | null; hasMore: boolean; total: number };
type FetchPage<T> = (id: string, cursor: string | null, signal: AbortSignal) => Promise<Answer<Page<T>>>;

/** A list of the contact's, a page at a time (the total comes with the first page). */
function usePages<T>(contactId: string, fetchPage: FetchPage<T>) {
  return usePagedList((cursor, signal) => fetchPage(contactId, cursor, signal), [contactId, fetchPage]);
}

type Pages<T> = ReturnType<typeof usePages<T>>;

/** A section of the contact's page: its title, how many in all, a page of the list (each entry
 * drawn by `entry`) and the pages' navigation. */
function HistoryList<T extends { id: string }>(props: {
  title: string;
  pages: Pages<T>;
  /** Said when there is none. */
  none: string;
  /** The thing listed, one and many: ["email", "emails"]. */
  noun: [string, string];
  entry: (x: T) => ReactNode;
}) {
  const { title, pages, none, noun, entry } = props;
  const { page, total, error, previous, next } = pages;
  const id = useId();
  return (
    <section aria-labelledby={id}>
      <h2 id={id}>{title}</h2>
      <Alert message={error} />
      {total !== null && <p>{total === 0 ? none : `${count(total, ...noun)}, newest first.`}</p>}
      {page && page.data.length > 0 && (
        <ol className="list timeline">
          {page.data.map((x) => (
            <li key={x.id}>{entry(x)}</li>
          ))}
        </ol>
      )}
      {(previous || next) && <Pager label={`Pages of ${noun[1]}`} previous={previous} next={next} />}
    </section>
  );
}

/** The names of the things `ids` are of (campaigns, workflows), each asked for once; an id
 * whose name is not known (yet, or deleted) has none here. */
function useNames(ids: string[], fetchName: (id: string) => Promise<string | null>): Record<string, string> {
  const [names, setNames] = useState<Record<string, string>>({});
  const asked = useRef(new Set<string>());
  const key = [...new Set(ids)].sort().join(" ");
  useEffect(() => {
    const fresh = key.split(" ").filter((id) => id && !asked.current.has(id));
    for (const id of fresh) {
      asked.current.add(id);
      void fetchName(id).then((name) => {
        if (name) setNames((old) => ({ ...old, [id]: name }));
      });
    }
  }, [key, fetchName]);
  return names;
}

const emailsPage = (id: string, cursor: string | null, signal: AbortSignal) =>
  api.GET("/contacts/{id}/emails", { params: { path: { id }, query: { limit: PAGE, cursor: cursor ?? undefined } }, signal });
const executionsPage = (id: string, cursor: string | null, signal: AbortSignal) =>
  api.GET("/contacts/{id}/executions", { params: { path: { id }, query: { limit: PAGE, cursor: cursor ?? undefined } }, signal });
const campaignName = async (id: string) => (await api.GET("/campaigns/{id}", { params: { path: { id } } })).data?.name ?? null;
const workflowName = async (id: string) => (await api.GET("/workflows/{id}", { params: { path: { id } } })).data?.name ?? null;

/** A state of an email or an entry of its history in words: "Soft bounced". */
export function emailWords(state: string): string {
  const words = state.replace(/_/g, " ");
  return words.charAt(0).toUpperCase() + words.slice(1);
}

/** How many, in words: "1 open", "3 clicks". */
const count = (n: number, one: string, many: string) => `${n.toLocaleString()} ${n === 1 ? one : many}`;

/** The emails sent to the contact, newest first; an email's history is read when asked for. */
export function ContactEmails({ contactId }: { contactId: string }) {
  const pages = usePages(contactId, emailsPage);
  const campaigns = useNames((pages.page?.data ?? []).flatMap((e) => (e.campaignId ? [e.campaignId] : [])), campaignName);
  return (
    <HistoryList
      title="Emails"
      pages={pages}
      none="No email sent to this contact yet."
      noun={["email", "emails"]}
      entry={(e) => (
        <>
          <strong>{e.subject || "(no subject)"}</strong> {emailWords(e.status)},{" "}
          <time dateTime={e.sentAt ?? e.createdAt}>{when(e.sentAt ?? e.createdAt)}</time>
          <br />
          <small>
            {e.type === "marketing" ? "Marketing" : "Transactional"}, {count(e.opens, "open", "opens")},{" "}
            {count(e.clicks, "click", "clicks")}
            {e.campaignId && (
              <>
                , campaign <Link to={`/campaigns/${e.campaignId}`}>{campaigns[e.campaignId] ?? e.campaignId}</Link>
              </>
            )}
          </small>
          {e.error && <p className="error">{e.error}</p>}
          <EmailHistory email={e} />
        </>
      )}
    />
  );
}

/** An email's history (`GET /emails/:id`), read the first time it is shown. */
function EmailHistory({ email }: { email: Schemas["EmailSummaryBody"] }) {
  const [open, setOpen] = useState(false);
  const [history, setHistory] = useState<Schemas["EmailHistoryBody"][] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const id = useId();

  async function toggle() {
    setOpen(!open);
    if (open || history) return;
    const { data, error } = await api.GET("/emails/{id}", { params: { path: { id: email.id } } });
    setHistory(data?.history ?? null);
    setError(error ? errorMessage(error) : null);
  }

  return (
    <>
      {" "}
      <button type="button" className="link" aria-expanded={open} aria-controls={id} onClick={() => void toggle()}>
        {open ? "Hide history" : "Show history"}
        <span className="visually-hidden"> of “{email.subject}”, {when(email.createdAt)}</span>
      </button>
      <div id={id} hidden={!open}>
        <Alert message={open ? error : null} />
        {open && !history && !error && <p role="status">Loading…</p>}
        {history && (
          <ol className="list">
            {history.map((h, i) => (
              <li key={i}>
                {emailWords(h.type)}, <time dateTime={h.createdAt}>{new Date(h.createdAt).toLocaleString()}</time>
                {h.detail && <small className="hint"> ({h.detail})</small>}
              </li>
            ))}
          </ol>
        )}
      </div>
    </>
  );
}

/** The contact's executions of every workflow, newest first, each linking to its page. */
export function ContactExecutions({ contactId }: { contactId: string }) {
  const pages = usePages(contactId, executionsPage);
  const workflows = useNames((pages.page?.data ?? []).map((x) => x.workflowId), workflowName);
  return (
    <HistoryList
      title="Workflow executions"
      pages={pages}
      none="No workflow has run for this contact yet."
      noun={["execution", "executions"]}
      entry={(x) => (
        <>
          <strong>
            <Link to={`/workflows/${x.workflowId}`}>{workflows[x.workflowId] ?? x.workflowId}</Link>
          </strong>{" "}
          {statusName(x.status)}, started <time dateTime={x.createdAt}>{when(x.createdAt)}</time>
          {x.finishedAt && (
            <>
              , ended <time dateTime={x.finishedAt}>{when(x.finishedAt)}</time>
            </>
          )}
          {x.exitReason && <>, exit reason: {x.exitReason}</>}
          <br />
          <Link to={`/workflows/${x.workflowId}/executions/${x.id}`}>Execution {x.id}</Link>
          {x.error && <p className="error">{x.error}</p>}
        </>
      )}
    />
  );
}
