import { useState, type FormEvent } from "react";
import { Link, useLocation, useSearchParams } from "react-router";
import { api } from "../../api/client";
import { useSession } from "../../session";
import { Pager, usePagedList } from "../paging";
import { Alert } from "../parts";
import { BulkActions } from "./Bulk";
import { ImportContacts } from "./Import";
import { NewContact } from "./NewContact";

const PAGE = 50;
type Panel = "add" | "import" | null;

/** The contacts, newest first, searched by address and paged with the API's cursors; contacts
 * are added one by one or from a CSV file, and selected for bulk actions. */
export function Contacts() {
  const { project } = useSession();
  const location = useLocation();
  const [params, setParams] = useSearchParams();
  const search = params.get("search") ?? "";
  const [selected, setSelected] = useState<string[]>([]);
  const list = usePagedList(
    (cursor, signal) =>
      project
        ? api.GET("/contacts", { params: { query: { limit: PAGE, search: search || undefined, cursor: cursor ?? undefined } }, signal })
        : null,
    [project, search],
    { inUrl: true, onMove: () => setSelected([]) },
  );
  const { page, total, error } = list;
  const [panel, setPanel] = useState<Panel>(null);
  const said = (location.state as { said?: string } | null)?.said ?? "";

  function reload() {
    setSelected([]);
    list.reload();
  }

  function find(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const value = String(new FormData(e.currentTarget).get("search")).trim();
    list.reset();
    setSelected([]);
    setParams(value ? { search: value } : {});
  }

  const shown = page?.data ?? [];
  const all = shown.length > 0 && shown.every((c) => selected.includes(c.id));
  const toggle = (id: string, on: boolean) =>
    setSelected(on ? [...selected.filter((s) => s !== id), id] : selected.filter((s) => s !== id));

  return (
    <section>
      <h1>Contacts</h1>
      <p role="status">{said}</p>
      <div className="actions">
        {(["add", "import"] as const).map((p) => (
          <button
            key={p}
            type="button"
            className="secondary"
            aria-expanded={panel === p}
            onClick={() => setPanel(panel === p ? null : p)}
          >
            {p === "add" ? "Add a contact" : "Import from CSV"}
          </button>
        ))}
      </div>
      {panel === "add" && <NewContact onCreated={reload} />}
      {panel === "import" && <ImportContacts onDone={reload} />}
      <form role="search" onSubmit={find} className="inline">
        <label htmlFor="contact-search">Search contacts by email</label>
        <input id="contact-search" name="search" type="search" defaultValue={search} key={search} />
        <button type="submit">Search</button>
      </form>
      <Alert message={error} />
      {page && (
        <>
          <p role="status">
            {total === null ? "" : `${total.toLocaleString()} ${total === 1 ? "contact" : "contacts"}${search ? ` matching “${search}”` : ""}.`}
          </p>
          {shown.length > 0 && (
            <>
              <BulkActions selected={selected} onDone={reload} />
              <div className="scroll" tabIndex={0} role="region" aria-label="Contacts table">
                <table className="contacts">
                  <caption className="visually-hidden">Contacts</caption>
                  <thead>
                    <tr>
                      <th scope="col" className="pick">
                        <input
                          type="checkbox"
                          aria-label="Select all contacts on this page"
                          checked={all}
                          onChange={(e) => setSelected(e.target.checked ? shown.map((c) => c.id) : [])}
                        />
                      </th>
                      <th scope="col">Email</th>
                      <th scope="col">Subscribed</th>
                      <th scope="col">Added</th>
                    </tr>
                  </thead>
                  <tbody>
                    {shown.map((c) => (
                      <tr key={c.id}>
                        <td className="pick">
                          <input
                            type="checkbox"
                            aria-label={`Select ${c.email}`}
                            checked={selected.includes(c.id)}
                            onChange={(e) => toggle(c.id, e.target.checked)}
                          />
                        </td>
                        <td>
                          <Link to={`/contacts/${c.id}`}>{c.email}</Link>
                        </td>
                        <td>{c.subscribed ? "Yes" : "No"}</td>
                        <td>{new Date(c.createdAt).toLocaleDateString()}</td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
            </>
          )}
          <Pager label="Pages of contacts" previous={list.previous} next={list.next} />
        </>
      )}
    </section>
  );
}
