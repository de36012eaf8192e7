import { useEffect, useState, type FormEvent } from "react";
import { Link, useNavigate } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { Pager, usePagedList } from "../paging";
import { Alert, Field } from "../parts";

const PAGE = 25;

/** The workflows, newest first, with their trigger, status and counts; and a form to create one. */
export function Workflows() {
  const { project } = useSession();
  const navigate = useNavigate();
  const list = usePagedList(
    (cursor, signal) => (project ? api.GET("/workflows", { params: { query: { limit: PAGE, cursor: cursor ?? undefined } }, signal }) : null),
    [project],
  );
  const { page, error } = list;
  const [createError, setCreateError] = useState<string | null>(null);

  async function create(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    const { data, error } = await api.POST("/workflows", {
      body: {
        name: String(form.get("name")).trim(),
        eventName: String(form.get("eventName")).trim(),
        description: String(form.get("description")).trim() || undefined,
        allowReentry: form.get("allowReentry") === "on",
      },
    });
    if (error || !data) {
      setCreateError(errorMessage(error));
      return;
    }
    navigate(`/workflows/${data.id}`);
  }

  return (
    <section>
      <h1>Workflows</h1>
      <Alert message={error} />
      {page && (
        <>
          <p role="status">
            {list.first && `${page.total} ${page.total === 1 ? "workflow" : "workflows"}.`}
          </p>
          {page.data.length > 0 && (
            <div className="scroll" tabIndex={0} role="region" aria-label="Workflows table">
              <table className="workflows">
                <caption className="visually-hidden">Workflows</caption>
                <thead>
                  <tr>
                    <th scope="col">Name</th>
                    <th scope="col">Status</th>
                    <th scope="col">Trigger event</th>
                    <th scope="col">Steps</th>
                    <th scope="col">Executions</th>
                  </tr>
                </thead>
                <tbody>
                  {page.data.map((w) => (
                    <Row key={w.id} workflow={w} />
                  ))}
                </tbody>
              </table>
            </div>
          )}
          <Pager label="Pages of workflows" previous={list.previous} next={list.next} />
        </>
      )}
      <h2>Create a workflow</h2>
      <form onSubmit={(e) => void create(e)} className="card narrow">
        <Field label="Workflow name" name="name" required maxLength={200} />
        <Field
          label="Trigger event"
          name="eventName"
          required
          hint="Each event of this name (tracked with /v1/track, or one Herald records, such as contact.subscribed) starts an execution for its contact."
        />
        <Field label="Description (optional)" name="description" maxLength={2000} />
        <label className="check">
          <input type="checkbox" name="allowReentry" /> Let a contact enter again once its previous execution is over
        </label>
        <Alert message={createError} />
        <button type="submit">Create workflow</button>
      </form>
    </section>
  );
}

/** One workflow of the list, with its step and execution counts read from the API. */
function Row({ workflow: w }: { workflow: Schemas["WorkflowBody"] }) {
  const [counts, setCounts] = useState<{ steps: number; executions: number; active: number } | null>(null);
  useEffect(() => {
    let live = true;
    const path = { id: w.id };
    void Promise.all([
      api.GET("/workflows/{id}", { params: { path } }),
      api.GET("/workflows/{id}/executions", { params: { path, query: { limit: 1, status: [] } } }),
      api.GET("/workflows/{id}/executions", { params: { path, query: { limit: 1, status: ["RUNNING", "WAITING"] } } }),
    ]).then(([d, all, active]) => {
      if (live && d.data && all.data && active.data) {
        setCounts({ steps: d.data.steps.length, executions: all.data.total, active: active.data.total });
      }
    });
    return () => {
      live = false;
    };
  }, [w.id]);
  return (
    <tr>
      <td>
        <Link to={`/workflows/${w.id}`}>{w.name}</Link>
      </td>
      <td>{w.enabled ? "Enabled" : "Disabled"}</td>
      <td>
        <code>{w.triggerConfig.eventName}</code>
      </td>
      <td>{counts?.steps ?? "…"}</td>
      <td>
        {counts ? (
          <Link to={`/workflows/${w.id}/executions`}>
            {counts.executions} in all, {counts.active} active
          </Link>
        ) : (
          "…"
        )}
      </td>
    </tr>
  );
}
