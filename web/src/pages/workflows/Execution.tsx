import { useCallback, useEffect, useState } from "react";
import { Link, useParams } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { Alert } from "../parts";
import { stepLabel, TYPE_NAMES, type StepType } from "./graph";
import { statusName, when } from "./Executions";

/** One execution: its facts and the timeline of its step runs (input, output, error); cancel it. */
export function Execution() {
  const { id = "", executionId = "" } = useParams();
  const { project } = useSession();
  const [flow, setFlow] = useState<Schemas["WorkflowDetail"] | null>(null);
  const [run, setRun] = useState<Schemas["ExecutionBody"] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [said, setSaid] = useState("");

  const load = useCallback(async () => {
    const [w, e] = await Promise.all([
      api.GET("/workflows/{id}", { params: { path: { id } } }),
      api.GET("/workflows/{id}/executions/{executionId}", { params: { path: { id, executionId } } }),
    ]);
    setFlow(w.data ?? null);
    setRun(e.data ?? null);
    setError(e.error ? errorMessage(e.error) : w.error ? errorMessage(w.error) : null);
    return e.data;
  }, [id, executionId]);

  const active = run?.status === "RUNNING" || run?.status === "WAITING";
  useEffect(() => {
    if (!project) return;
    let live = true;
    let timer = 0;
    // While it runs, look again every two seconds.
    const tick = () =>
      void load().then((x) => {
        if (live && (x?.status === "RUNNING" || x?.status === "WAITING")) timer = window.setTimeout(tick, 2000);
      });
    tick();
    return () => {
      live = false;
      window.clearTimeout(timer);
    };
  }, [project, load]);

  async function cancel() {
    const { error } = await api.DELETE("/workflows/{id}/executions/{executionId}", { params: { path: { id, executionId } } });
    if (error) setError(errorMessage(error));
    else setSaid("The execution is cancelled.");
    await load();
  }

  const steps = new Map((flow?.steps ?? []).map((s, i) => [s.id, stepLabel(s, i)]));
  const name = (stepId: string) => steps.get(stepId) ?? `${stepId} (deleted)`;
  return (
    <section>
      <p>
        <Link to={`/workflows/${id}/executions`}>Back to the executions</Link>
      </p>
      <h1>Execution {executionId}</h1>
      <p role="status">{said}</p>
      <Alert message={error} />
      {run && (
        <>
          <dl className="facts">
            <dt>Workflow</dt>
            <dd>
              <Link to={`/workflows/${id}`}>{flow?.name ?? id}</Link>
            </dd>
            <dt>Status</dt>
            <dd>{statusName(run.status)}</dd>
            <dt>Contact</dt>
            <dd>
              <Link to={`/contacts/${run.contactId}`}>{run.contactId}</Link>
            </dd>
            <dt>Started</dt>
            <dd>{when(run.createdAt)}</dd>
            <dt>Ended</dt>
            <dd>{when(run.finishedAt)}</dd>
            {run.currentStepId && (
              <>
                <dt>At step</dt>
                <dd>{name(run.currentStepId)}</dd>
              </>
            )}
            {run.waitingForEvent && (
              <>
                <dt>Waiting for</dt>
                <dd>{run.waitingForEvent}</dd>
              </>
            )}
            {run.exitReason && (
              <>
                <dt>Exit reason</dt>
                <dd>{run.exitReason}</dd>
              </>
            )}
            {run.error && (
              <>
                <dt>Error</dt>
                <dd className="error">{run.error}</dd>
              </>
            )}
          </dl>
          {Object.keys(run.context).length > 0 && (
            <details>
              <summary>Context</summary>
              <pre className="block">{JSON.stringify(run.context, null, 2)}</pre>
            </details>
          )}
          {active && (
            <p>
              <button type="button" className="danger" onClick={() => void cancel()}>
                Cancel this execution
              </button>
            </p>
          )}
          <h2>Timeline</h2>
          {(run.stepRuns ?? []).length === 0 ? (
            <p>No step has run yet.</p>
          ) : (
            <ol className="wf-timeline">
              {(run.stepRuns ?? []).map((r) => (
                <li key={r.id} className="card">
                  <h3>
                    {name(r.stepId)}: {statusName(r.status)}
                  </h3>
                  <p>
                    {TYPE_NAMES[r.stepType as StepType] ?? r.stepType}
                    {r.branch ? `, continued along “${r.branch}”` : ""}
                    {`, ${r.attempts} ${r.attempts === 1 ? "attempt" : "attempts"}`}
                    {r.startedAt ? `, started ${when(r.startedAt)}` : ""}
                    {r.finishedAt ? `, finished ${when(r.finishedAt)}` : ""}
                  </p>
                  {r.error && <p className="error">Error: {r.error}</p>}
                  {r.input != null && (
                    <details>
                      <summary>Input of {name(r.stepId)}</summary>
                      <pre className="block">{JSON.stringify(r.input, null, 2)}</pre>
                    </details>
                  )}
                  {r.output != null && (
                    <details>
                      <summary>Output of {name(r.stepId)}</summary>
                      <pre className="block">{JSON.stringify(r.output, null, 2)}</pre>
                    </details>
                  )}
                </li>
              ))}
            </ol>
          )}
        </>
      )}
    </section>
  );
}
