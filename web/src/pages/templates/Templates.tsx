import { useCallback, useEffect, useState, type FormEvent } from "react";
import { Link, useNavigate, useSearchParams } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { Pager, useCursorPages } from "../paging";
import { Alert, Field } from "../parts";
import { fieldErrors } from "./logic";

const PAGE = 50;
const STARTER_BODY = '<p>Hello {{firstName ?? "there"}},</p>\n\n<p><a href="{{unsubscribeUrl}}">Unsubscribe</a></p>\n';

/** The templates, newest first, by type, with create, duplicate and delete. */
export function Templates() {
  const { project } = useSession();
  const navigate = useNavigate();
  const [params, setParams] = useSearchParams();
  const type = (params.get("type") ?? "") as Schemas["TemplateKind"] | "";
  const pages = useCursorPages({ inUrl: true });
  const cursor = pages.cursor;
  const [page, setPage] = useState<Schemas["TemplatePage"] | null>(null);
  const [total, setTotal] = useState<number | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const [creating, setCreating] = useState(false);
  const [createErrors, setCreateErrors] = useState<Record<string, string>>({});
  const [deleting, setDeleting] = useState<Schemas["TemplateBody"] | null>(null);

  const load = useCallback(async () => {
    const { data, error } = await api.GET("/templates", {
      params: { query: { limit: PAGE, type: type || undefined, cursor: cursor ?? undefined } },
    });
    setPage(data ?? null);
    if (data && !cursor) setTotal(data.total);
    setError(error ? errorMessage(error) : null);
  }, [type, cursor]);

  useEffect(() => {
    if (!project) return;
    // Loads the page asked for; the effect syncs with the server.
    // eslint-disable-next-line react-hooks/set-state-in-effect
    void load();
  }, [project, load]);

  async function create(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    const { data, error } = await api.POST("/templates", {
      body: {
        name: String(form.get("name")),
        subject: String(form.get("subject")),
        type: String(form.get("type")) as Schemas["TemplateKind"],
        body: STARTER_BODY,
      },
    });
    if (error) {
      setCreateErrors(fieldErrors(error));
      setError(errorMessage(error));
      return;
    }
    navigate(`/templates/${data.id}`);
  }

  async function duplicate(t: Schemas["TemplateBody"]) {
    const { data, error } = await api.POST("/templates/{id}/duplicate", { params: { path: { id: t.id } } });
    if (error) return setError(errorMessage(error));
    setNotice(`“${t.name}” was copied.`);
    navigate(`/templates/${data.id}`);
  }

  async function remove(t: Schemas["TemplateBody"]) {
    const { error } = await api.DELETE("/templates/{id}", { params: { path: { id: t.id } } });
    setDeleting(null);
    if (error) return setError(errorMessage(error));
    setNotice(`“${t.name}” was deleted.`);
    await load();
  }

  return (
    <section>
      <h1>Templates</h1>
      <div className="inline">
        <label htmlFor="template-type">Show</label>
        <select
          id="template-type"
          value={type}
          onChange={(e) => {
            pages.reset();
            setParams(e.target.value ? { type: e.target.value } : {});
          }}
        >
          <option value="">All templates</option>
          <option value="TRANSACTIONAL">Transactional only</option>
          <option value="MARKETING">Marketing only</option>
        </select>
        <button type="button" onClick={() => setCreating(!creating)} aria-expanded={creating}>
          New template
        </button>
      </div>
      {creating && (
        <form onSubmit={(e) => void create(e)} className="card" aria-label="New template">
          <Field label="Template name" name="name" required maxLength={200} aria-invalid={!!createErrors.name} hint={createErrors.name} />
          <Field label="Subject" name="subject" required aria-invalid={!!createErrors.subject} hint={createErrors.subject ?? "Variables work here too: Hi {{firstName}}"} />
          <div className="field">
            <label htmlFor="new-template-type">Type</label>
            <select id="new-template-type" name="type" defaultValue="TRANSACTIONAL">
              <option value="TRANSACTIONAL">Transactional (receipts, password resets)</option>
              <option value="MARKETING">Marketing (newsletters; has an unsubscribe link)</option>
            </select>
          </div>
          <button type="submit">Create template</button>
        </form>
      )}
      <Alert message={error} />
      {notice && <p role="status">{notice}</p>}
      {page && (
        <>
          <p role="status">{total === null ? "" : `${total.toLocaleString()} ${total === 1 ? "template" : "templates"}.`}</p>
          {page.data.length > 0 && (
            <div className="table-wrap">
              <table className="templates-table">
                <caption className="visually-hidden">Templates</caption>
                <thead>
                  <tr>
                    <th scope="col">Name</th>
                    <th scope="col">Type</th>
                    <th scope="col">Languages</th>
                    <th scope="col">Changed</th>
                    <th scope="col">Actions</th>
                  </tr>
                </thead>
                <tbody>
                  {page.data.map((t) => (
                    <tr key={t.id}>
                      <td>
                        <Link to={`/templates/${t.id}`}>{t.name}</Link>
                      </td>
                      <td>{t.type === "MARKETING" ? "Marketing" : "Transactional"}</td>
                      <td>{["default", ...Object.keys(t.variants)].join(", ")}</td>
                      <td>{new Date(t.updatedAt).toLocaleDateString()}</td>
                      <td className="actions">
                        <button type="button" onClick={() => void duplicate(t)} aria-label={`Duplicate ${t.name}`}>
                          Duplicate
                        </button>
                        <button type="button" className="danger" onClick={() => setDeleting(t)} aria-label={`Delete ${t.name}`}>
                          Delete
                        </button>
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
          {deleting && (
            <div role="alertdialog" aria-labelledby="delete-title" className="card">
              <p id="delete-title">
                Delete “{deleting.name}”? Campaigns and workflow steps that send it can no longer use it. This cannot be undone.
              </p>
              <button type="button" className="danger" onClick={() => void remove(deleting)}>
                Yes, delete it
              </button>{" "}
              <button type="button" className="secondary" onClick={() => setDeleting(null)}>
                Keep it
              </button>
            </div>
          )}
          <Pager label="Pages of templates" previous={pages.previous} next={pages.after(page)} />
        </>
      )}
    </section>
  );
}
