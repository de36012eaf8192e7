import { useCallback, useEffect, useState } from "react";
import { Link, useParams, useSearchParams } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { Pager, useCursorPages } from "../paging";
import { Alert, IdLink } from "../parts";
import { stepLabel } from "./graph";

type Status = Schemas["ExecutionStatus"];
export const STATUSES: Status[] = ["RUNNING", "WAITING", "COMPLETED", "EXITED", "FAILED", "CANCELLED"];
const ACTIVE: Status[] = ["RUNNING", "WAITING"];
const PAGE = 50;

/** A status in plain words. */
export function statusName(s: string): string {
  return s.charAt(0) + s.slice(1).toLowerCase();
}

/** When something happened, for a person. */
export const when = (t?: string | null) => (t ? new Date(t).toLocaleString() : "–");

/** A workflow's executions, newest first, filtered by status; cancel all active ones. */
export function Executions() {
  const { id = "" } = useParams();
  const { project } = useSession();
  const [params, setParams] = useSearchParams();
  const status = (params.get("status") ?? "") as Status | "";
  const pages = useCursorPages();
  const [flow, setFlow] = useState<Schemas["WorkflowDetail"] | null>(null);
  const [page, setPage] = useState<Schemas["ExecutionPage"] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [said, setSaid] = useState("");
  const [confirming, setConfirming] = useState(false);
  const cursor = pages.cursor;

  const load = useCallback(async () => {
    const [w, e] = await Promise.all([
      api.GET("/workflows/{id}", { params: { path: { id } } }),
      api.GET("/workflows/{id}/executions", {
        params: { path: { id }, query: { limit: PAGE, cursor: cursor ?? undefined, status: status ? [status] : [] } },
      }),
    ]);
    setFlow(w.data ?? null);
    setPage(e.data ?? null);
    setError(w.error ? errorMessage(w.error) : e.error ? errorMessage(e.error) : null);
  }, [id, status, cursor]);

  useEffect(() => {
    if (!project) return;
    let live = true;
    const tick = () => {
      if (live) void load();
    };
    tick();
    // Active executions move on by themselves: look again every few seconds.
    const timer = window.setInterval(tick, 2000);
    return () => {
      live = false;
      window.clearInterval(timer);
    };
  }, [project, load]);

  async function cancelAll() {
    setConfirming(false);
    const { data, error } = await api.POST("/workflows/{id}/executions/cancel-all", { params: { path: { id } } });
    if (error) setError(errorMessage(error));
    else setSaid(`Cancelled ${data.cancelled} ${data.cancelled === 1 ? "execution" : "executions"}.`);
    await load();
  }

  const steps = new Map((flow?.steps ?? []).map((s, i) => [s.id, stepLabel(s, i)]));
  return (
    <section>
      <p>
        <Link to={`/workflows/${id}`}>Back to the workflow</Link>
      </p>
      <h1>Executions{flow ? ` of ${flow.name}` : ""}</h1>
      <div className="inline">
        <div className="field">
          <label htmlFor="execution-status">Status</label>
          <select
            id="execution-status"
            value={status}
            onChange={(e) => {
              pages.reset();
              setParams(e.target.value ? { status: e.target.value } : {});
            }}
          >
            <option value="">All statuses</option>
            {STATUSES.map((s) => (
              <option key={s} value={s}>
                {statusName(s)}
              </option>
            ))}
          </select>
        </div>
        {!confirming ? (
          <button type="button" className="danger" onClick={() => setConfirming(true)}>
            Cancel all active executions
          </button>
        ) : (
          <span role="group" aria-label="Confirm cancelling" className="actions">
            <span>Every running or waiting execution stops at once.</span>
            <button type="button" className="danger" onClick={() => void cancelAll()}>
              Yes, cancel them all
            </button>
            <button type="button" className="secondary" onClick={() => setConfirming(false)}>
              Keep them
            </button>
          </span>
        )}
      </div>
      <p role="status">{said}</p>
      <Alert message={error} />
      {page && (
        <>
          <p>
            {pages.first && `${page.total} ${page.total === 1 ? "execution" : "executions"}${status ? ` ${statusName(status).toLowerCase()}` : ""}.`}
          </p>
          {page.data.length > 0 && (
            <div className="scroll" tabIndex={0} role="region" aria-label="Executions table">
              <table>
                <caption className="visually-hidden">Executions</caption>
                <thead>
                  <tr>
                    <th scope="col">Execution</th>
                    <th scope="col">Status</th>
                    <th scope="col">Contact</th>
                    <th scope="col">At step</th>
                    <th scope="col">Started</th>
                    <th scope="col">Ended</th>
                  </tr>
                </thead>
                <tbody>
                  {page.data.map((x) => (
                    <tr key={x.id}>
                      <td>
                        <IdLink to={`/workflows/${id}/executions/${x.id}`} id={x.id} />
                      </td>
                      <td>{statusName(x.status)}</td>
                      <td>
                        <IdLink to={`/contacts/${x.contactId}`} id={x.contactId} what="Contact" />
                      </td>
                      <td>{x.currentStepId ? (steps.get(x.currentStepId) ?? x.currentStepId) : "–"}</td>
                      <td>{when(x.createdAt)}</td>
                      <td>{ACTIVE.includes(x.status) ? "–" : when(x.finishedAt)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
          <Pager label="Pages of executions" previous={pages.previous} next={pages.after(page)} />
        </>
      )}
    </section>
  );
}
