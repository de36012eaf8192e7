import { useCallback, useEffect, useState, type FormEvent } from "react";
import { Link, useParams } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { Alert } from "../parts";
import { CodeEditor } from "./CodeEditor";
import { Preview } from "./Preview";
import { changes, dataVariables, draftOf, fieldErrors, tagProblem, type Draft } from "./logic";

/** One template: its name, type, subject and body per language, a live preview, its uses. */
export function Template() {
  const { id = "" } = useParams();
  const { project } = useSession();
  const [saved, setSaved] = useState<Draft | null>(null);
  const [draft, setDraft] = useState<Draft | null>(null);
  const [variables, setVariables] = useState<string[]>([]);
  const [usage, setUsage] = useState<Schemas["TemplateUsage"] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const [saveErrors, setSaveErrors] = useState<Record<string, string>>({});
  const [previewErrors, setPreviewErrors] = useState<Record<string, string>>({});
  // The language being edited: "" for the template's own subject and body.
  const [lang, setLang] = useState("");

  useEffect(() => {
    if (!project) return;
    let live = true;
    void Promise.all([
      api.GET("/templates/{id}", { params: { path: { id } } }),
      api.GET("/contacts/fields"),
      api.GET("/templates/{id}/usage", { params: { path: { id } } }),
    ]).then(([t, f, u]) => {
      if (!live) return;
      if (t.data) {
        setSaved(draftOf(t.data));
        setDraft(draftOf(t.data));
      }
      setVariables(f.data ? dataVariables(f.data.fields) : []);
      setUsage(u.data ?? null);
      setError(t.error ? errorMessage(t.error) : null);
    });
    return () => {
      live = false;
    };
  }, [project, id]);

  const onPreviewErrors = useCallback((e: Record<string, string>) => setPreviewErrors(e), []);

  if (!draft || !saved) {
    return (
      <section>
        <p>
          <Link to="/templates">Back to templates</Link>
        </p>
        {error ? <Alert message={error} /> : <p role="status">Loading…</p>}
      </section>
    );
  }

  const errors = { ...previewErrors, ...saveErrors };
  const patch = changes(saved, draft);
  const edit = (d: Partial<Draft>) => {
    setDraft({ ...draft, ...d });
    setSaveErrors({});
    setNotice(null);
  };
  const current = (lang && draft.variants[lang]) || { subject: draft.subject, body: draft.body };
  const prefix = lang ? `variants.${lang}.` : "";
  const setPart = (part: "subject" | "body", value: string) =>
    lang
      ? edit({ variants: { ...draft.variants, [lang]: { ...current, [part]: value } } })
      : edit({ [part]: value });

  async function save() {
    if (!patch || !draft) return;
    const { data, error } = await api.PATCH("/templates/{id}", { params: { path: { id } }, body: patch });
    if (error) {
      setSaveErrors(fieldErrors(error));
      setError(errorMessage(error));
      return;
    }
    setSaved(draftOf(data));
    setError(null);
    setNotice("Saved.");
  }

  function addLanguage(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const input = e.currentTarget.elements.namedItem("tag") as HTMLInputElement;
    const tag = input.value.trim();
    const problem = tagProblem(tag, Object.keys(draft!.variants));
    if (problem) return setSaveErrors({ tag: problem });
    edit({ variants: { ...draft!.variants, [tag]: { subject: draft!.subject, body: draft!.body } } });
    setLang(tag);
    input.value = "";
  }

  function removeLanguage(tag: string) {
    const rest = { ...draft!.variants };
    delete rest[tag];
    edit({ variants: rest });
    setLang("");
  }

  const subjectError = errors[`${prefix}subject`];
  const bodyError = errors[`${prefix}body`];
  const langError = lang ? errors[`variants.${lang}`] : undefined;
  return (
    <section>
      <p>
        <Link to="/templates">Back to templates</Link>
      </p>
      <h1>{saved.name}</h1>
      <div className="template-layout">
        <div className="template-editor">
          <div className="inline">
            <div className="field">
              <label htmlFor="tpl-name">Template name</label>
              <input id="tpl-name" value={draft.name} onChange={(e) => edit({ name: e.target.value })} aria-invalid={!!errors.name} aria-describedby="tpl-name-error" />
              <small id="tpl-name-error" className="error">{errors.name}</small>
            </div>
            <div className="field">
              <label htmlFor="tpl-type">Type</label>
              <select id="tpl-type" value={draft.type} onChange={(e) => edit({ type: e.target.value as Draft["type"] })}>
                <option value="TRANSACTIONAL">Transactional</option>
                <option value="MARKETING">Marketing</option>
              </select>
            </div>
          </div>

          <fieldset className="languages">
            <legend>Language versions</legend>
            <div className="language-list" role="group" aria-label="Version being edited">
              {["", ...Object.keys(draft.variants)].map((t) => (
                <button key={t || "default"} type="button" aria-pressed={lang === t} className={lang === t ? "" : "secondary"} onClick={() => setLang(t)}>
                  {t ? `Edit ${t}` : "Edit default"}
                </button>
              ))}
            </div>
            <form onSubmit={addLanguage} className="inline">
              <div className="field">
                <label htmlFor="tpl-tag">New language tag</label>
                <input id="tpl-tag" name="tag" placeholder="fr" aria-invalid={!!saveErrors.tag} aria-describedby="tpl-tag-hint" />
                <small id="tpl-tag-hint" className={saveErrors.tag ? "error" : "hint"}>
                  {saveErrors.tag ?? "Contacts whose data.locale is this language (fr-CA counts as fr) get this version."}
                </small>
              </div>
              <button type="submit">Add language</button>
            </form>
            {lang && (
              <button type="button" className="danger" onClick={() => removeLanguage(lang)}>
                Remove the {lang} version
              </button>
            )}
            {langError && <p className="error">{langError}</p>}
          </fieldset>

          <div className="field">
            <label htmlFor="tpl-subject">{lang ? `Subject (${lang})` : "Subject"}</label>
            <input
              id="tpl-subject"
              value={current.subject}
              onChange={(e) => setPart("subject", e.target.value)}
              aria-invalid={!!subjectError}
              aria-describedby="tpl-subject-error"
            />
            <small id="tpl-subject-error" className="error">{subjectError}</small>
          </div>
          <div className="field">
            <span id="tpl-body-label" className="label">{lang ? `Body (${lang})` : "Body"}</span>
            <CodeEditor
              label={lang ? `Body (${lang})` : "Body"}
              value={current.body}
              onChange={(v) => setPart("body", v)}
              variables={variables}
              describedBy="tpl-body-hint tpl-body-error"
              invalid={!!bodyError}
            />
            <small id="tpl-body-hint" className="hint">
              HTML. Type {"{{"} for the contact's data and the built-in links (unsubscribeUrl, manageUrl, viewInBrowserUrl).
            </small>
            <small id="tpl-body-error" className="error">{bodyError}</small>
          </div>

          <div className="inline">
            <button type="button" onClick={() => void save()} disabled={!patch}>
              Save template
            </button>
            <span role="status">{notice ?? (patch ? "Unsaved changes." : "")}</span>
          </div>
          <Alert message={error} />
        </div>
        <Preview templateId={id} draft={draft} onFieldErrors={onPreviewErrors} />
      </div>
      <Usage usage={usage} />
    </section>
  );
}

/** The campaigns and workflow steps that send the template. */
function Usage({ usage }: { usage: Schemas["TemplateUsage"] | null }) {
  if (!usage) return null;
  const uses = [
    ...usage.campaigns.map((c) => ({ key: c.id, text: `Campaign “${c.name}”`, to: `/campaigns/${c.id}` })),
    ...usage.workflows.map((w) => ({ key: `${w.id}-${w.stepId ?? ""}`, text: `Workflow “${w.name}”${w.stepId ? " (a send step)" : ""}`, to: `/workflows/${w.id}` })),
  ];
  return (
    <section aria-labelledby="usage-title">
      <h2 id="usage-title">Where it is used</h2>
      {uses.length === 0 ? (
        <p>No campaign or workflow sends this template.</p>
      ) : (
        <ul className="list">
          {uses.map((u) => (
            <li key={u.key}>
              <Link to={u.to}>{u.text}</Link>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}
