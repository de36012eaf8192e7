import { useId, useState, type FormEvent, type ReactNode } from "react";
import type { Schemas } from "../../api/client";
import { errorsAt, type FieldError, type StepType } from "./graph";
import { configOf, draftOf, emptyRule, needsValue, OPERATORS, ruleOfPath, TIMED, type Draft, type Rule } from "./stepConfig";

/** The config keys each type's form shows (errors at other keys are listed at the top). */
const KEYS: Record<StepType, string[]> = {
  SEND_EMAIL: ["templateId", "to"],
  DELAY: ["amount", "unit"],
  WAIT_FOR_EVENT: ["eventName", "timeoutSeconds"],
  CONDITION: ["filter"],
  WEBHOOK: ["url", "method", "headers", "body"],
  UPDATE_CONTACT: ["data", "subscribed"],
  EXIT: ["reason"],
  PLUGIN: ["plugin"],
};

export type Lists = { templates: Schemas["TemplateBody"][]; fields: string[] };

type Props = {
  type: StepType;
  name?: string | null;
  config?: unknown;
  /** Errors by config key ("" for the whole config), e.g. from enabling. */
  errors?: Record<string, string[]>;
  lists: Lists;
  submit: string;
  disabled?: boolean;
  /** Sends the step; answers the 422 errors of a refusal (field paths `name`, `config.…`). */
  onSubmit: (name: string | null, config: Record<string, unknown>) => Promise<FieldError[] | null>;
  children?: ReactNode;
};

/** A step's name and config, each field with the errors the API reported for it. */
export function StepForm({ type, name, config, errors: given = {}, lists, submit, disabled, onSubmit, children }: Props) {
  const [draft, setDraft] = useState<Draft>(() => draftOf(type, config));
  const [title, setTitle] = useState(name ?? "");
  const [errors, setErrors] = useState<Record<string, string[]> | null>(null);
  const [nameErrors, setNameErrors] = useState<string[]>([]);
  const id = useId();
  const shown = errors ?? given;

  async function send(e: FormEvent) {
    e.preventDefault();
    const made = configOf(type, draft);
    if ("errors" in made) {
      setErrors(made.errors);
      return;
    }
    const refused = await onSubmit(title.trim() || null, made.config);
    const out: Record<string, string[]> = {};
    for (const f of refused ?? []) {
      if (f.field === "name") continue;
      const key = f.field === "config" ? "" : f.field.startsWith("config.") ? f.field.slice(7) : "";
      (out[key] ??= []).push(f.field.startsWith("config") ? f.message : `${f.field}: ${f.message}`);
    }
    setNameErrors((refused ?? []).filter((f) => f.field === "name").map((f) => f.message));
    setErrors(out);
  }

  const set = (key: string, value: string) => setDraft({ ...draft, values: { ...draft.values, [key]: value } });
  const v = draft.values;
  const known = KEYS[type];
  const general = Object.entries(shown)
    .filter(([k]) => !known.some((key) => k === key || k.startsWith(`${key}.`) || k.startsWith(`${key}[`)))
    .filter(([k]) => !(type === "PLUGIN" && k !== ""))
    .flatMap(([, m]) => m);
  const pluginOther = type === "PLUGIN" ? Object.entries(shown).filter(([k]) => k !== "" && k !== "plugin" && !k.startsWith("plugin.")).flatMap(([k, m]) => m.map((x) => `${k}: ${x}`)) : [];
  const text = (key: string, label: string, extra: { type?: string; hint?: string; required?: boolean } = {}) => (
    <Control label={label} errors={errorsAt(shown, key)} hint={extra.hint}>
      {(p) => <input {...p} type={extra.type ?? "text"} required={extra.required} value={v[key] ?? ""} onChange={(e) => set(key, e.target.value)} />}
    </Control>
  );
  const area = (key: string, label: string, hint: string, extraErrors: string[] = []) => (
    <Control label={label} errors={[...errorsAt(shown, key), ...extraErrors]} hint={hint}>
      {(p) => <textarea {...p} rows={4} value={v[key] ?? ""} onChange={(e) => set(key, e.target.value)} />}
    </Control>
  );

  return (
    <form onSubmit={(e) => void send(e)} className="step-form" aria-describedby={general.length ? `${id}-general` : undefined}>
      {general.length > 0 && (
        <ul id={`${id}-general`} className="error" role="alert">
          {general.map((m, i) => (
            <li key={i}>{m}</li>
          ))}
        </ul>
      )}
      <Control label="Step name (optional)" errors={nameErrors}>
        {(p) => <input {...p} maxLength={200} value={title} onChange={(e) => setTitle(e.target.value)} />}
      </Control>
      {type === "SEND_EMAIL" && (
        <>
          <Control label="Template" errors={errorsAt(shown, "templateId")}>
            {(p) => (
              <select {...p} value={v.templateId} onChange={(e) => set("templateId", e.target.value)}>
                <option value="">Choose a template</option>
                {v.templateId && !lists.templates.some((t) => t.id === v.templateId) && <option value={v.templateId}>{v.templateId}</option>}
                {lists.templates.map((t) => (
                  <option key={t.id} value={t.id}>
                    {t.name}
                  </option>
                ))}
              </select>
            )}
          </Control>
          {text("to", "Send to another address (optional)", { type: "email", hint: "Empty: the contact." })}
        </>
      )}
      {type === "DELAY" && (
        <>
          {text("amount", "Amount", { type: "text" })}
          <Control label="Unit" errors={errorsAt(shown, "unit")}>
            {(p) => (
              <select {...p} value={v.unit} onChange={(e) => set("unit", e.target.value)}>
                <option value="minutes">minutes</option>
                <option value="hours">hours</option>
                <option value="days">days</option>
              </select>
            )}
          </Control>
        </>
      )}
      {type === "WAIT_FOR_EVENT" && (
        <>
          {text("eventName", "Event to wait for")}
          {text("timeoutSeconds", "Time out after (seconds, optional)", { hint: "The “timeout” way is taken then; the “event” way when the event comes." })}
        </>
      )}
      {type === "CONDITION" &&
        (draft.rules ? (
          <Rules draft={draft} setDraft={setDraft} errors={shown} fields={lists.fields} />
        ) : (
          area("filter", "Filter (JSON)", "A nested filter, in the filter language of segments.")
        ))}
      {type === "WEBHOOK" && (
        <>
          {text("url", "Address (URL)", { type: "url" })}
          <Control label="Method" errors={errorsAt(shown, "method")}>
            {(p) => (
              <select {...p} value={v.method} onChange={(e) => set("method", e.target.value)}>
                {["POST", "PUT", "PATCH", "GET", "DELETE"].map((m) => (
                  <option key={m}>{m}</option>
                ))}
              </select>
            )}
          </Control>
          {area("headers", "Headers (JSON object, optional)", 'For example {"Authorization": "Bearer …"}.')}
          {area("body", "Body (JSON, optional)", "Empty: the contact, the event and the context.")}
        </>
      )}
      {type === "UPDATE_CONTACT" && (
        <>
          {area("data", "Data to set (JSON object, optional)", 'For example {"plan": "pro"}; null removes a key.')}
          <Control label="Subscribed" errors={errorsAt(shown, "subscribed")}>
            {(p) => (
              <select {...p} value={v.subscribed} onChange={(e) => set("subscribed", e.target.value)}>
                <option value="">Leave as it is</option>
                <option value="true">Subscribe</option>
                <option value="false">Unsubscribe</option>
              </select>
            )}
          </Control>
        </>
      )}
      {type === "EXIT" && text("reason", "Reason (optional)")}
      {type === "PLUGIN" && (
        <>
          {text("plugin", "Plugin name", { hint: "A step plugin loaded by this server (herald plugins list shows them)." })}
          {area("settings", "Its other settings (JSON object, optional)", "The plugin checks them.", pluginOther)}
        </>
      )}
      {children}
      <button type="submit" disabled={disabled}>
        {submit}
      </button>
    </form>
  );
}

type ControlProps = {
  label: string;
  errors: string[];
  hint?: string;
  children: (p: { id: string; "aria-invalid"?: boolean; "aria-describedby"?: string }) => ReactNode;
};

/** A labelled control with its hint and its errors read out with it. */
export function Control({ label, errors, hint, children }: ControlProps) {
  const id = useId();
  const described = [hint ? `${id}-hint` : "", errors.length ? `${id}-error` : ""].filter(Boolean).join(" ");
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      {children({ id, "aria-invalid": errors.length ? true : undefined, "aria-describedby": described || undefined })}
      {hint && (
        <small id={`${id}-hint`} className="hint">
          {hint}
        </small>
      )}
      {errors.length > 0 && (
        <small id={`${id}-error`} className="error">
          {errors.join(" ")}
        </small>
      )}
    </div>
  );
}

/** A condition's rules: all or any of them, each a field, an operator and a value. */
function Rules({ draft, setDraft, errors, fields }: { draft: Draft; setDraft: (d: Draft) => void; errors: Record<string, string[]>; fields: string[] }) {
  const id = useId();
  const rules = draft.rules!;
  const byRule = new Map<number, Record<string, string[]>>();
  const other: string[] = [];
  for (const [k, m] of Object.entries(errors)) {
    if (!k.startsWith("filter")) continue;
    const at = ruleOfPath(k, draft.match);
    if (at && at.rule < rules.length) {
      const r = byRule.get(at.rule) ?? {};
      (r[at.part] ??= []).push(...m);
      byRule.set(at.rule, r);
    } else other.push(...m);
  }
  const change = (i: number, rule: Partial<Rule>) => setDraft({ ...draft, rules: rules.map((r, j) => (j === i ? { ...r, ...rule } : r)) });
  return (
    <fieldset className="rules">
      <legend>Condition: the “yes” way when</legend>
      <div className="field">
        <label htmlFor={`${id}-match`}>Match</label>
        <select id={`${id}-match`} value={draft.match} onChange={(e) => setDraft({ ...draft, match: e.target.value as Draft["match"] })}>
          <option value="all">all of the rules</option>
          <option value="any">any of the rules</option>
        </select>
      </div>
      {other.length > 0 && <p className="error">{other.join(" ")}</p>}
      <datalist id={`${id}-fields`}>
        {fields.map((f) => (
          <option key={f} value={f} />
        ))}
      </datalist>
      {rules.map((r, i) => {
        const e = byRule.get(i) ?? {};
        const n = i + 1;
        return (
          <div key={i} className="rule" role="group" aria-label={`Rule ${n}`}>
            <Control label={`Field of rule ${n}`} errors={e.field ?? []} hint={i === 0 ? "data.<key>, email, subscribed, event.data.<key>, context.<key>…" : undefined}>
              {(p) => <input {...p} list={`${id}-fields`} value={r.field} onChange={(ev) => change(i, { field: ev.target.value })} />}
            </Control>
            <Control label={`Operator of rule ${n}`} errors={e.operator ?? []}>
              {(p) => (
                <select {...p} value={r.operator} onChange={(ev) => change(i, { operator: ev.target.value })}>
                  {!OPERATORS.includes(r.operator) && <option>{r.operator}</option>}
                  {OPERATORS.map((o) => (
                    <option key={o}>{o}</option>
                  ))}
                </select>
              )}
            </Control>
            {needsValue(r.operator) && (
              <Control label={`Value of rule ${n}`} errors={e.value ?? []}>
                {(p) => <input {...p} value={r.value} onChange={(ev) => change(i, { value: ev.target.value })} />}
              </Control>
            )}
            {TIMED.has(r.operator) && (
              <Control label={`Unit of rule ${n}`} errors={e.unit ?? []}>
                {(p) => (
                  <select {...p} value={r.unit} onChange={(ev) => change(i, { unit: ev.target.value })}>
                    <option value="minutes">minutes</option>
                    <option value="hours">hours</option>
                    <option value="days">days</option>
                  </select>
                )}
              </Control>
            )}
            {e[""] && <p className="error">{e[""].join(" ")}</p>}
            <button type="button" className="secondary" disabled={rules.length === 1} onClick={() => setDraft({ ...draft, rules: rules.filter((_, j) => j !== i) })}>
              Remove rule {n}
            </button>
          </div>
        );
      })}
      <button type="button" className="secondary" onClick={() => setDraft({ ...draft, rules: [...rules, emptyRule()] })}>
        Add rule
      </button>
    </fieldset>
  );
}
