import { useEffect, useId, useState, type FormEvent } from "react";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useDebouncedRequest } from "../loading";
import { Alert } from "../parts";
import { fieldErrors, type Draft } from "./logic";

const DEBOUNCE_MS = 400;

interface Props {
  templateId: string;
  draft: Draft;
  /** Called with the field errors of the draft the server found (`{}` when none). */
  onFieldErrors: (errors: Record<string, string>) => void;
}

/**
 * The draft rendered by the server for a contact (`POST /templates/:id/preview`), a moment after
 * the last change, in a sandboxed frame (no script, no same-origin access, no navigation of the
 * page); and a test send of the saved template.
 */
export function Preview({ templateId, draft, onFieldErrors }: Props) {
  const [contacts, setContacts] = useState<Schemas["ContactBody"][]>([]);
  const [email, setEmail] = useState("");
  const [locale, setLocale] = useState("");
  const listId = useId();

  // The first contacts, offered as the address to preview for; the first is chosen.
  useEffect(() => {
    let live = true;
    void api.GET("/contacts", { params: { query: { limit: 20 } } }).then(({ data }) => {
      if (!live || !data) return;
      setContacts(data.data);
      setEmail((e) => e || data.data[0]?.email || "");
    });
    return () => {
      live = false;
    };
  }, []);

  // A broken draft has no preview: an older one would say what is no longer so.
  const { data: preview, error } = useDebouncedRequest(
    (signal) =>
      email.includes("@")
        ? api
            .POST("/templates/{id}/preview", {
              params: { path: { id: templateId } },
              body: {
                email,
                locale: locale || undefined,
                subject: draft.subject,
                body: draft.body,
                variants: draft.variants,
              },
              signal,
            })
            .then((answer) => {
              if (!signal.aborted) onFieldErrors(answer.error ? fieldErrors(answer.error) : {});
              return answer;
            })
        : null,
    [templateId, draft, email, locale, onFieldErrors],
    DEBOUNCE_MS,
  );

  const tags = Object.keys(draft.variants);
  return (
    <section aria-labelledby="preview-title" className="preview">
      <h2 id="preview-title">Preview</h2>
      <div className="field">
        <label htmlFor="preview-email">Preview for (contact's email)</label>
        <input
          id="preview-email"
          type="email"
          list={listId}
          value={email}
          onChange={(e) => setEmail(e.target.value.trim())}
          aria-describedby="preview-email-hint"
        />
        <small id="preview-email-hint" className="hint">
          Rendered with this contact's data, as a send would; an address that is no contact yet has no data.
        </small>
        <datalist id={listId}>
          {contacts.map((c) => (
            <option key={c.id} value={c.email} />
          ))}
        </datalist>
      </div>
      <div className="field">
        <label htmlFor="preview-locale">Language</label>
        <select id="preview-locale" value={locale} onChange={(e) => setLocale(e.target.value)}>
          <option value="">The contact's own (data.locale)</option>
          {tags.map((t) => (
            <option key={t} value={t}>
              {t}
            </option>
          ))}
        </select>
      </div>
      <Alert message={error} />
      {preview && (
        <>
          <p role="status" aria-live="polite">
            For {preview.email}
            {preview.contactId ? "" : " (not a contact yet)"}, {preview.locale ? `the ${preview.locale} version` : "the default version"}.
            {preview.notSentReason && ` A send would not deliver it: ${preview.notSentReason}.`}
          </p>
          <p className="preview-subject">
            <strong>Subject:</strong> {preview.subject}
          </p>
          <iframe sandbox="" srcDoc={preview.html} title="Email preview" className="preview-frame" />
        </>
      )}
      <TestSend templateId={templateId} />
    </section>
  );
}

/** Sends the saved template to an address with `/v1/send` (there is no separate test send). */
function TestSend({ templateId }: { templateId: string }) {
  const [outcome, setOutcome] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);

  async function send(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const to = String(new FormData(e.currentTarget).get("to")).trim();
    setOutcome(null);
    const { data, error } = await api.POST("/v1/send", { body: { to, template: templateId } });
    if (error) return setError(errorMessage(error));
    setError(null);
    const sent = data.data.emails[0];
    setOutcome(`Sent to ${to} (email ${sent?.email ?? "queued"}).`);
  }

  return (
    <form onSubmit={(e) => void send(e)} className="card" aria-labelledby="test-send-title">
      <h3 id="test-send-title">Send a test</h3>
      <div className="field">
        <label htmlFor="test-send-to">Send the saved template to</label>
        <input id="test-send-to" name="to" type="email" required aria-describedby="test-send-hint" />
        <small id="test-send-hint" className="hint">
          A real send: the address becomes a contact, and marketing mail reaches only subscribed contacts.
        </small>
      </div>
      <button type="submit">Send test</button>
      <Alert message={error} />
      {outcome && <p role="status">{outcome}</p>}
    </form>
  );
}
