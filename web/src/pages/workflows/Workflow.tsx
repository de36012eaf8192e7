import { useCallback, useEffect, useMemo, useState, type FormEvent } from "react";
import { Link, useParams } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { Alert, Field } from "../parts";
import { Canvas } from "./Canvas";
import { configErrors, fieldErrors, labelOf, placeNew, sortProblems, stepLabel, TYPE_NAMES, withLabels, type FieldError, type Point, type Way } from "./graph";
import { StepForm, type Lists } from "./StepForm";
import { Steps } from "./Steps";

/** A workflow: its trigger, enabling with the problems listed, the canvas, the steps list and a step's form. */
export function Workflow() {
  const { id = "" } = useParams();
  const { project } = useSession();
  const [flow, setFlow] = useState<Schemas["WorkflowDetail"] | null>(null);
  const [lists, setLists] = useState<Lists>({ templates: [], fields: [] });
  const [error, setError] = useState<string | null>(null);
  const [status, setStatus] = useState("");
  const [problems, setProblems] = useState<FieldError[]>([]);
  const [selected, setSelected] = useState<string | null>(null);

  const load = useCallback(async () => {
    const { data, error } = await api.GET("/workflows/{id}", { params: { path: { id } } });
    setFlow(data ?? null);
    if (error) setError(errorMessage(error));
    return data;
  }, [id]);

  useEffect(() => {
    if (!project) return;
    let live = true;
    void Promise.all([
      api.GET("/workflows/{id}", { params: { path: { id } } }),
      api.GET("/templates", { params: { query: { limit: 100 } } }),
      api.GET("/workflows/fields", { params: { query: { workflowId: id } } }),
    ]).then(([w, t, f]) => {
      if (!live) return;
      setFlow(w.data ?? null);
      setError(w.error ? errorMessage(w.error) : null);
      const fields = f.data ? [...f.data.contact, ...f.data.data, ...f.data.event].map((x) => x.field) : [];
      setLists({ templates: t.data?.data ?? [], fields });
    });
    return () => {
      live = false;
    };
  }, [project, id]);

  const sorted = useMemo(
    () => (flow ? sortProblems(problems, flow.steps, flow.transitions) : { byStep: {}, general: [] }),
    [flow, problems],
  );

  /** Runs a change; on success reloads the graph and says `done`; answers the 422 field errors. */
  async function act(call: Promise<{ error?: unknown }>, done: string): Promise<FieldError[] | null> {
    const { error } = await call;
    if (error) {
      setError(errorMessage(error));
      setStatus("");
      return fieldErrors(error);
    }
    await load();
    setError(null);
    setStatus(done);
    return null;
  }

  const templateNames = useMemo(() => Object.fromEntries(lists.templates.map((t) => [t.id, t.name])), [lists.templates]);

  if (!flow) {
    return (
      <section>
        <p>
          <Link to="/workflows">Back to workflows</Link>
        </p>
        <Alert message={error} />
        {!error && <p role="status">Loading…</p>}
      </section>
    );
  }

  const path = { id };
  const frozen = flow.enabled;
  const step = flow.steps.find((s) => s.id === selected) ?? null;
  const index = step ? flow.steps.indexOf(step) : -1;
  const label = (stepId: string) => labelOf(flow.steps, stepId);

  async function toggle() {
    const enabling = !flow!.enabled;
    const { error } = await api.PATCH("/workflows/{id}", { params: { path }, body: { enabled: enabling } });
    if (error) {
      setProblems(fieldErrors(error));
      setError(enabling ? "The workflow cannot be enabled yet: fix the problems listed." : errorMessage(error));
      setStatus("");
      return;
    }
    await load();
    setProblems([]);
    setError(null);
    setStatus(enabling ? "The workflow is enabled: each trigger event starts an execution." : "The workflow is disabled.");
  }

  const connect = (from: string, way: Way, to: string) =>
    act(api.POST("/workflows/{id}/transitions", { params: { path }, body: { fromStepId: from, toStepId: to, branch: way } }), `Connected ${label(from)}${way ? ` (${way})` : ""} to ${label(to)}.`);

  const deleteStep = (stepId: string) => {
    const name = label(stepId);
    // Joins the step's neighbours when it has a single way out.
    const splice = flow.transitions.filter((t) => t.fromStepId === stepId).length <= 1;
    if (selected === stepId) setSelected(null);
    return act(api.DELETE("/workflows/{id}/steps/{stepId}", { params: { path: { id, stepId }, query: { splice } } }), `Deleted step ${name}.`);
  };

  const deleteTransition = (transitionId: string) => {
    const t = flow.transitions.find((x) => x.id === transitionId);
    return act(
      api.DELETE("/workflows/{id}/transitions/{transitionId}", { params: { path: { id, transitionId } } }),
      t ? `Deleted the transition from ${label(t.fromStepId)} to ${label(t.toStepId)}.` : "Deleted the transition.",
    );
  };

  const addStep = async (type: Schemas["StepKind"], name: string | null, config: Record<string, unknown>, after: { from: string; way: Way } | null) => {
    const position = placeNew(flow.steps, flow.transitions, after);
    const { data, error } = await api.POST("/workflows/{id}/steps", { params: { path }, body: { type, name, config, position } });
    if (error || !data) {
      setError(errorMessage(error));
      return fieldErrors(error);
    }
    let done = `Added step ${stepLabel(data, flow.steps.length)}.`;
    if (after) {
      const linked = await api.POST("/workflows/{id}/transitions", { params: { path }, body: { fromStepId: after.from, toStepId: data.id, branch: after.way } });
      if (linked.error) {
        await load();
        setError(`The step was added but not connected: ${errorMessage(linked.error)}`);
        return null;
      }
      done += ` It follows ${label(after.from)}${after.way ? ` (${after.way})` : ""}.`;
    }
    await load();
    setError(null);
    setStatus(done);
    return null;
  };

  // Only the position changes (allowed while the workflow is enabled). The step keeps the rest
  // as it was here, so that an open form of it is not started afresh.
  const moveStep = async (stepId: string, position: Point) => {
    const { data, error } = await api.PATCH("/workflows/{id}/steps/{stepId}", { params: { path: { id, stepId } }, body: { position } });
    if (error || !data) {
      setError(`The step’s new place was not saved: ${errorMessage(error)}`);
      return;
    }
    setFlow((f) => (f ? { ...f, steps: f.steps.map((s) => (s.id === stepId ? { ...s, position: data.position } : s)) } : f));
    setStatus(`Placed step ${label(stepId)}.`);
  };

  return (
    <section>
      <p>
        <Link to="/workflows">Back to workflows</Link>
      </p>
      <h1>{flow.name}</h1>
      <dl className="facts">
        <dt>Status</dt>
        <dd>{flow.enabled ? "Enabled" : "Disabled"}</dd>
        <dt>Trigger event</dt>
        <dd>
          <code>{flow.triggerConfig.eventName}</code>
        </dd>
        <dt>Re-entry</dt>
        <dd>{flow.allowReentry ? "A contact may enter again once its execution is over" : "A contact enters once"}</dd>
      </dl>
      <p className="actions">
        <button type="button" onClick={() => void toggle()}>
          {flow.enabled ? "Disable workflow" : "Enable workflow"}
        </button>
        <Link to={`/workflows/${id}/executions`}>Executions</Link>
      </p>
      <p role="status">{status}</p>
      <Alert message={error} />
      {problems.length > 0 && (
        <div className="card">
          <h2>Problems to fix before enabling</h2>
          <p className="hint">As found at the last try to enable; “Enable workflow” checks again.</p>
          <ul className="list">
            {sorted.general.map((p, i) => (
              <li key={`g${i}`}>{withLabels(p.message, flow.steps, flow.transitions)}</li>
            ))}
            {Object.entries(sorted.byStep).flatMap(([stepId, ms]) =>
              ms.map((m, i) => (
                <li key={`${stepId}${i}`}>
                  Step {label(stepId)}: {withLabels(m, flow.steps, flow.transitions)}
                </li>
              )),
            )}
          </ul>
        </div>
      )}
      {frozen && <p>The workflow is enabled, so its steps and transitions cannot be added or removed; disable it to change them. Step settings can still be changed.</p>}
      <div className="wf-editor">
        <section aria-labelledby="canvas-title" className="wf-main">
          <h2 id="canvas-title">Canvas</h2>
          <p className="hint">
            Drag from a step’s way out (bottom) to another step to connect them; drag a step to move it (its place is kept); select a step to edit it; Delete removes the selected step or transition. Tab moves between steps.
          </p>
          <Canvas
            steps={flow.steps}
            transitions={flow.transitions}
            problems={sorted.byStep}
            templates={templateNames}
            frozen={frozen}
            selected={selected}
            onSelect={setSelected}
            onConnect={(f, w, t) => void connect(f, w, t)}
            onDeleteStep={(s) => void deleteStep(s)}
            onDeleteTransition={(t) => void deleteTransition(t)}
            onMoveStep={(s, p) => void moveStep(s, p)}
          />
        </section>
        {step && (
          <aside aria-labelledby="step-title" className="wf-panel card">
            <h2 id="step-title">
              Step {stepLabel(step, index)} ({TYPE_NAMES[step.type]})
            </h2>
            <StepForm
              key={`${step.id}:${step.updatedAt}:${problems.length}`}
              type={step.type}
              name={step.name}
              config={step.config}
              errors={configErrors(problems, index)}
              lists={lists}
              submit="Save step"
              onSubmit={(name, config) =>
                act(api.PATCH("/workflows/{id}/steps/{stepId}", { params: { path: { id, stepId: step.id } }, body: { name, config } }), `Saved step ${stepLabel({ ...step, name }, index)}.`)
              }
            />
            <p className="actions">
              <button type="button" className="secondary" onClick={() => setSelected(null)}>
                Close step
              </button>
              <button type="button" className="danger" disabled={frozen} onClick={() => void deleteStep(step.id)}>
                Delete this step
              </button>
            </p>
          </aside>
        )}
      </div>
      <Steps
        flow={flow}
        lists={lists}
        frozen={frozen}
        problems={sorted.byStep}
        templates={templateNames}
        onEdit={setSelected}
        onAdd={addStep}
        onConnect={connect}
        onDeleteStep={deleteStep}
        onDeleteTransition={deleteTransition}
      />
      <Details flow={flow} onSave={(body) => act(api.PATCH("/workflows/{id}", { params: { path }, body }), "Saved the workflow’s details.")} />
    </section>
  );
}

/** The workflow's name, trigger event and re-entry, changed with PATCH. */
function Details({ flow, onSave }: { flow: Schemas["WorkflowDetail"]; onSave: (body: Schemas["UpdateWorkflow"]) => Promise<FieldError[] | null> }) {
  const [errors, setErrors] = useState<FieldError[]>([]);
  async function save(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    setErrors(
      (await onSave({
        name: String(form.get("name")).trim(),
        eventName: String(form.get("eventName")).trim(),
        allowReentry: form.get("allowReentry") === "on",
      })) ?? [],
    );
  }
  const at = (f: string) => errors.filter((e) => e.field.endsWith(f)).map((e) => e.message).join(" ") || undefined;
  return (
    <details className="card">
      <summary>Name and trigger</summary>
      <form onSubmit={(e) => void save(e)} key={flow.updatedAt} className="narrow">
        <Field label="Workflow name" name="name" defaultValue={flow.name} required hint={at("name")} />
        <Field label="Trigger event" name="eventName" defaultValue={flow.triggerConfig.eventName} required hint={at("eventName")} />
        <label className="check">
          <input type="checkbox" name="allowReentry" defaultChecked={flow.allowReentry} /> Let a contact enter again once its previous execution is over
        </label>
        <button type="submit">Save details</button>
      </form>
    </details>
  );
}
