// The project's own settings (PATCH /users/@me/projects/{id}): only the fields changed are sent,
// and the API's field errors are shown on the fields.
import { useEffect, useState, type FormEvent } from "react";
import { api, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { Alert } from "../parts";
import { CheckField, SelectField, TextField } from "./controls";
import { placeErrors } from "./fieldErrors";

type Project = Schemas["ProjectBody"];
type Update = Schemas["UpdateProject"];
type Mode = Schemas["DoubleOptInMode"];

const FIELDS = ["name", "defaultFrom.email", "defaultFrom.name", "trackOpens", "trackClicks", "transport", "doubleOptIn", "confirmationTemplateId"];

interface Values {
  name: string;
  fromEmail: string;
  fromName: string;
  trackOpens: boolean;
  trackClicks: boolean;
  transport: string;
  doubleOptIn: Mode;
  confirmationTemplateId: string;
}

function valuesOf(p: Project): Values {
  return {
    name: p.name,
    fromEmail: p.defaultFrom?.email ?? "",
    fromName: p.defaultFrom?.name ?? "",
    trackOpens: p.trackOpens,
    trackClicks: p.trackClicks,
    transport: p.transport ?? "",
    doubleOptIn: p.doubleOptIn,
    confirmationTemplateId: p.confirmationTemplateId ?? "",
  };
}

/** The PATCH body: the fields whose value differs from the project's. */
export function changes(p: Project, v: Values): Update {
  const was = valuesOf(p);
  const body: Update = {};
  if (v.name.trim() !== was.name) body.name = v.name.trim();
  if (v.fromEmail.trim() !== was.fromEmail || v.fromName.trim() !== was.fromName) {
    body.defaultFrom = v.fromEmail.trim() ? { email: v.fromEmail.trim(), name: v.fromName.trim() || null } : null;
  }
  if (v.trackOpens !== was.trackOpens) body.trackOpens = v.trackOpens;
  if (v.trackClicks !== was.trackClicks) body.trackClicks = v.trackClicks;
  if (v.transport.trim() !== was.transport) body.transport = v.transport.trim() || null;
  if (v.doubleOptIn !== was.doubleOptIn) body.doubleOptIn = v.doubleOptIn;
  if (v.confirmationTemplateId !== was.confirmationTemplateId) {
    body.confirmationTemplateId = v.confirmationTemplateId || null;
  }
  return body;
}

const OPT_IN: Record<Mode, string> = {
  OFF: "Off: subscriptions count at once",
  PUBLIC_KEY: "For sign-ups from your pages (made with the public key)",
  ALL: "For every subscription (either key, the API and the dashboard)",
};

/** The form of the project's name, sender, tracking, transport and confirmed opt-in. */
export function General({ project }: { project: Project }) {
  const { reload } = useSession();
  const [v, setV] = useState<Values>(() => valuesOf(project));
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [general, setGeneral] = useState<string | null>(null);
  const [saved, setSaved] = useState("");
  const [templates, setTemplates] = useState<Schemas["TemplateBody"][]>([]);
  const canEdit = project.role !== "MEMBER";

  useEffect(() => {
    let live = true;
    void api.GET("/templates", { params: { query: { limit: 100 } } }).then(({ data }) => {
      if (live && data) setTemplates(data.data);
    });
    return () => {
      live = false;
    };
  }, [project.id]);

  function set<K extends keyof Values>(key: K, value: Values[K]) {
    setV((old) => ({ ...old, [key]: value }));
    setSaved("");
  }

  async function save(e: FormEvent) {
    e.preventDefault();
    const body = changes(project, v);
    if (Object.keys(body).length === 0) {
      setSaved("Nothing changed.");
      return;
    }
    const { error } = await api.PATCH("/users/@me/projects/{id}", { params: { path: { id: project.id } }, body });
    if (error) {
      const placed = placeErrors(error, FIELDS);
      setErrors(placed.fields);
      setGeneral(placed.general);
      setSaved("");
      return;
    }
    setErrors({});
    setGeneral(null);
    setSaved("Settings saved.");
    await reload();
  }

  const known = templates.some((t) => t.id === v.confirmationTemplateId);
  return (
    <form onSubmit={(e) => void save(e)} aria-labelledby="settings-general" noValidate>
      <h2 id="settings-general">General</h2>
      {!canEdit && <p>Only owners and admins change these settings; you can read them.</p>}
      <fieldset disabled={!canEdit}>
        <legend className="visually-hidden">The project&apos;s settings</legend>
        <TextField label="Project name" value={v.name} onChange={(e) => set("name", e.target.value)} maxLength={100} required error={errors.name} />
        <TextField
          label="Default sender address"
          type="email"
          value={v.fromEmail}
          onChange={(e) => set("fromEmail", e.target.value)}
          hint="Used when an email names no sender itself. It must be on a verified sending domain. Leave empty for none."
          error={errors["defaultFrom.email"]}
        />
        <TextField
          label="Default sender name"
          value={v.fromName}
          onChange={(e) => set("fromName", e.target.value)}
          hint="The name people see beside the address, such as your company's."
          error={errors["defaultFrom.name"]}
        />
        <CheckField
          label="Track opens"
          checked={v.trackOpens}
          onChange={(e) => set("trackOpens", e.target.checked)}
          hint="Emails carry a tiny image that tells Herald when they are opened."
          error={errors.trackOpens}
        />
        <CheckField
          label="Track clicks"
          checked={v.trackClicks}
          onChange={(e) => set("trackClicks", e.target.checked)}
          hint="Links in emails go through Herald first, so clicks are counted."
          error={errors.trackClicks}
        />
        <TextField
          label="Transport"
          value={v.transport}
          onChange={(e) => set("transport", e.target.value)}
          hint="The name of the way mail leaves (a transport set up by whoever runs Herald). Leave empty for the usual one."
          error={errors.transport}
        />
        <SelectField
          label="Confirmed opt-in"
          value={v.doubleOptIn}
          onChange={(e) => set("doubleOptIn", e.target.value as Mode)}
          hint="With it on, a new subscription waits until the contact clicks the link in a confirmation email. It needs a sender: the default sender above, or the confirmation template's own."
          error={errors.doubleOptIn}
        >
          {(Object.keys(OPT_IN) as Mode[]).map((m) => (
            <option key={m} value={m}>
              {OPT_IN[m]}
            </option>
          ))}
        </SelectField>
        <SelectField
          label="Confirmation email"
          value={v.confirmationTemplateId}
          onChange={(e) => set("confirmationTemplateId", e.target.value)}
          hint="The email that asks contacts to confirm. Your own template must contain the {{confirmUrl}} link; the built-in one is in the contact's language."
          error={errors.confirmationTemplateId}
        >
          <option value="">The built-in confirmation email</option>
          {v.confirmationTemplateId && !known && <option value={v.confirmationTemplateId}>Template {v.confirmationTemplateId}</option>}
          {templates.map((t) => (
            <option key={t.id} value={t.id}>
              {t.name}
            </option>
          ))}
        </SelectField>
        <button type="submit">Save settings</button>{" "}
        <span role="status">{saved}</span>
      </fieldset>
      <Alert message={general} />
    </form>
  );
}
