import { useState, type FormEvent } from "react";
import type { Schemas } from "../../api/client";
import { freeWays, labelOf, STEP_TYPES, stepLabel, summary, TYPE_NAMES, wayName, waysOut, withLabels, type FieldError, type Step, type StepType, type Way } from "./graph";
import { Control, StepForm, type Lists } from "./StepForm";

type Props = {
  flow: Schemas["WorkflowDetail"];
  lists: Lists;
  frozen: boolean;
  problems: Record<string, string[]>;
  templates: Record<string, string>;
  onEdit: (stepId: string) => void;
  onAdd: (type: StepType, name: string | null, config: Record<string, unknown>, after: { from: string; way: Way } | null) => Promise<FieldError[] | null>;
  onConnect: (from: string, way: Way, to: string) => Promise<FieldError[] | null>;
  onDeleteStep: (stepId: string) => Promise<unknown>;
  onDeleteTransition: (transitionId: string) => Promise<unknown>;
};

/** "after:<step id>:<way>", the value of an "After" choice ("" for no step). */
const afterValue = (from: string, way: Way) => `${from}:${way ?? ""}`;
const parseAfter = (v: string) => (v ? { from: v.slice(0, v.indexOf(":")), way: v.slice(v.indexOf(":") + 1) || null } : null);

/** Everything the canvas does, without it: the steps and their ways out, adding, connecting and deleting. */
export function Steps({ flow, lists, frozen, problems, templates, onEdit, onAdd, onConnect, onDeleteStep, onDeleteTransition }: Props) {
  const { steps, transitions } = flow;
  const [after, setAfter] = useState("");
  const [type, setType] = useState<StepType>("SEND_EMAIL");
  // Bumped after each added step, so that the form starts empty again.
  const [round, setRound] = useState(0);
  const label = (id: string) => labelOf(steps, id);
  const openings = steps.flatMap((s) => freeWays(s, transitions).map((w) => ({ step: s, way: w })));

  function addAfter(step: Step, way: Way) {
    setAfter(afterValue(step.id, way));
    document.getElementById("add-step")?.scrollIntoView({ block: "start" });
    document.getElementById("add-step-type")?.focus();
  }

  return (
    <>
      <section aria-labelledby="steps-title">
        <h2 id="steps-title">Steps</h2>
        {steps.length === 0 ? (
          <p>No steps yet: add the first one below.</p>
        ) : (
          <ol className="wf-steps">
            {steps.map((s, i) => {
              const name = stepLabel(s, i);
              const ways = waysOut(s.type);
              const out = transitions.filter((t) => t.fromStepId === s.id);
              return (
                <li key={s.id} className="card">
                  <h3>
                    {name} <span className="hint">({TYPE_NAMES[s.type]})</span>
                  </h3>
                  <p>{summary(s, templates)}</p>
                  {(problems[s.id] ?? []).length > 0 && (
                    <ul className="error">
                      {(problems[s.id] ?? []).map((m, j) => (
                        <li key={j}>{withLabels(m, steps, transitions)}</li>
                      ))}
                    </ul>
                  )}
                  <ul className="wf-ways">
                    {ways.length === 0 && <li>Ends the execution.</li>}
                    {[...new Set([...ways, ...out.map((t) => t.branch ?? null)])].map((w) => {
                      const t = out.find((x) => (x.branch ?? null) === w);
                      return (
                        <li key={wayName(w)}>
                          {w ? `If “${w}”: ` : "Then: "}
                          {t ? (
                            <>
                              {label(t.toStepId)}{" "}
                              <button type="button" className="link" disabled={frozen} onClick={() => void onDeleteTransition(t.id)}>
                                Disconnect {name} {w ? `(${w}) ` : ""}from {label(t.toStepId)}
                              </button>
                            </>
                          ) : (
                            <>
                              the execution ends here.{" "}
                              <button type="button" className="link" disabled={frozen} onClick={() => addAfter(s, w)}>
                                Add step after {name}
                                {w ? ` (${w})` : ""}
                              </button>
                            </>
                          )}
                        </li>
                      );
                    })}
                  </ul>
                  <p className="actions">
                    <button type="button" className="secondary" onClick={() => onEdit(s.id)}>
                      Edit step {name}
                    </button>
                    <button type="button" className="danger" disabled={frozen} onClick={() => void onDeleteStep(s.id)}>
                      Delete step {name}
                    </button>
                  </p>
                </li>
              );
            })}
          </ol>
        )}
      </section>

      <section aria-labelledby="add-step-title" id="add-step" className="card">
        <h2 id="add-step-title">Add a step</h2>
        <div className="field">
          <label htmlFor="add-step-type">Step type</label>
          <select id="add-step-type" value={type} onChange={(e) => setType(e.target.value as StepType)} disabled={frozen}>
            {STEP_TYPES.map((t) => (
              <option key={t} value={t}>
                {TYPE_NAMES[t]}
              </option>
            ))}
          </select>
        </div>
        <div className="field">
          <label htmlFor="add-step-after">After</label>
          <select id="add-step-after" value={after} onChange={(e) => setAfter(e.target.value)} disabled={frozen}>
            <option value="">No step (connect it later)</option>
            {openings.map(({ step, way }) => (
              <option key={afterValue(step.id, way)} value={afterValue(step.id, way)}>
                {label(step.id)}
                {way ? ` (${way})` : ""}
              </option>
            ))}
          </select>
        </div>
        <StepForm
          key={`${type}:${round}`}
          type={type}
          lists={lists}
          submit="Add step"
          disabled={frozen}
          onSubmit={async (name, config) => {
            const refused = await onAdd(type, name, config, parseAfter(after));
            if (!refused) {
              setAfter("");
              setRound(round + 1);
            }
            return refused;
          }}
        />
      </section>

      <Connect flow={flow} frozen={frozen} label={label} onConnect={onConnect} />
    </>
  );
}

/** Connects a way out of one step to another step: the canvas's drag, as a form. */
function Connect({ flow, frozen, label, onConnect }: { flow: Schemas["WorkflowDetail"]; frozen: boolean; label: (id: string) => string; onConnect: Props["onConnect"] }) {
  const { steps, transitions } = flow;
  const [from, setFrom] = useState("");
  const [errors, setErrors] = useState<FieldError[]>([]);
  const source = steps.find((s) => s.id === from);
  const ways = source ? freeWays(source, transitions) : [];
  const at = (f: string) => errors.filter((e) => e.field === f).map((e) => e.message);

  async function connect(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    const raw = String(form.get("way") ?? "").trim();
    const refused = await onConnect(from, raw === "" || raw === "next" ? null : raw, String(form.get("to")));
    setErrors(refused ?? []);
  }

  return (
    <section aria-labelledby="connect-title" className="card">
      <h2 id="connect-title">Connect steps</h2>
      <form onSubmit={(e) => void connect(e)} className="narrow">
        <Control label="From step" errors={at("fromStepId")}>
          {(p) => (
            <select {...p} value={from} onChange={(e) => setFrom(e.target.value)} required disabled={frozen}>
              <option value="">Choose a step</option>
              {steps
                .filter((s) => s.type !== "EXIT")
                .map((s) => (
                  <option key={s.id} value={s.id}>
                    {label(s.id)}
                  </option>
                ))}
            </select>
          )}
        </Control>
        <Control label="Way out" errors={at("branch")} hint={source?.type === "PLUGIN" ? "Empty for the plain way, or a branch the plugin names." : undefined}>
          {(p) =>
            source?.type === "PLUGIN" ? (
              <input {...p} name="way" disabled={frozen} />
            ) : (
              <select {...p} name="way" disabled={frozen || !source}>
                {!source && <option value="">Choose a step first</option>}
                {source && ways.length === 0 && <option value="">Every way out is connected</option>}
                {ways.map((w) => (
                  <option key={wayName(w)} value={wayName(w)}>
                    {w ?? "next (the only way out)"}
                  </option>
                ))}
              </select>
            )
          }
        </Control>
        <Control label="To step" errors={at("toStepId")}>
          {(p) => (
            <select {...p} name="to" required disabled={frozen}>
              <option value="">Choose a step</option>
              {steps
                .filter((s) => s.id !== from)
                .map((s) => (
                  <option key={s.id} value={s.id}>
                    {label(s.id)}
                  </option>
                ))}
            </select>
          )}
        </Control>
        <button type="submit" disabled={frozen}>
          Connect
        </button>
      </form>
      <h3>Transitions</h3>
      {transitions.length === 0 ? (
        <p>None yet.</p>
      ) : (
        <ul className="list">
          {transitions.map((t) => (
            <li key={t.id}>
              {label(t.fromStepId)} {t.branch ? `(${t.branch}) ` : ""}→ {label(t.toStepId)}
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}
