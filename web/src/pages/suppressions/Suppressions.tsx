import { useState, type FormEvent } from "react";
import { api, errorMessage } from "../../api/client";
import { useSession } from "../../session";
import { Pager, usePagedList } from "../paging";
import { Alert } from "../parts";
import { parseAddresses, reasonWords } from "./words";

const PAGE = 50;

/** The addresses no email of the project goes to: paged, searched, added by hand and removed. */
export function Suppressions() {
  const { project } = useSession();
  // The search the list shows (the API's `search`: addresses containing it).
  const [search, setSearch] = useState("");
  // What adding or removing went wrong with (the list's own error shows when there is none).
  const [error, setError] = useState<string | null>(null);
  const [done, setDone] = useState<string | null>(null);
  const list = usePagedList(
    (cursor, signal) =>
      project ? api.GET("/suppressions", { params: { query: { limit: PAGE, cursor: cursor ?? undefined, search: search || undefined } }, signal }) : null,
    [project, search],
    { onMove: () => setError(null) },
  );
  const { page, total } = list;

  async function add(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const form = e.currentTarget;
    const emails = parseAddresses(String(new FormData(form).get("emails")));
    if (emails.length === 0) return setError("Enter at least one address.");
    const { data, error } = await api.POST("/suppressions", { body: { emails } });
    if (error) return setError(errorMessage(error));
    setError(null);
    form.reset();
    setDone(`${data.added} added${data.alreadyListed ? `, ${data.alreadyListed} listed already` : ""}.`);
    list.reset();
  }

  async function remove(email: string) {
    const { error } = await api.DELETE("/suppressions/{email}", { params: { path: { email } } });
    if (error) return setError(errorMessage(error));
    setError(null);
    setDone(`${email} removed: the project's email may go to it again.`);
    list.reload();
  }

  function find(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    setSearch(String(new FormData(e.currentTarget).get("search")).trim());
    setError(null);
    list.reset();
  }

  const shown = page?.data ?? [];

  return (
    <section>
      <h1>Suppressions</h1>
      <p>
        No email of this project goes to these addresses: hard bounces and spam complaints are added by themselves; you can
        add others by hand.
      </p>
      <h2>Add addresses</h2>
      <form onSubmit={(e) => void add(e)}>
        <div className="field">
          <label htmlFor="suppress-emails">Addresses to suppress</label>
          <textarea id="suppress-emails" name="emails" rows={3} aria-describedby="suppress-emails-hint" />
          <small id="suppress-emails-hint" className="hint">
            One or more addresses, separated by commas, spaces or new lines (up to 1,000).
          </small>
        </div>
        <button type="submit">Suppress</button>
      </form>
      <Alert message={error ?? list.error} />
      <p role="status">{done}</p>
      <h2>Suppressed addresses</h2>
      {page && (
        <>
          <form role="search" className="inline" onSubmit={find}>
            <label htmlFor="suppress-search">Search suppressed addresses</label>
            <input id="suppress-search" name="search" type="search" defaultValue={search} />
            <button type="submit">Search</button>
          </form>
          <p>
            {total === null
              ? ""
              : `${total.toLocaleString()} ${total === 1 ? "address" : "addresses"}${search ? ` containing “${search}”` : " in all"}.`}
          </p>
          {shown.length === 0 ? (
            <p>{search ? "No suppressed address contains it." : "No suppressed address."}</p>
          ) : (
            <div className="scroll" tabIndex={0} role="region" aria-label="Suppressions table">
              <table className="suppressed">
                <caption className="visually-hidden">Suppressed addresses</caption>
                <thead>
                  <tr>
                    <th scope="col">Address</th>
                    <th scope="col">Why</th>
                    <th scope="col">Since</th>
                    <th scope="col">
                      <span className="visually-hidden">Actions</span>
                    </th>
                  </tr>
                </thead>
                <tbody>
                  {shown.map((s) => (
                    <tr key={s.email}>
                      <td>{s.email}</td>
                      <td>
                        {reasonWords(s.reason)}
                        {s.detail && <small className="hint"> ({s.detail})</small>}
                      </td>
                      <td>{new Date(s.createdAt).toLocaleDateString()}</td>
                      <td>
                        <button type="button" className="secondary small" aria-label={`Remove ${s.email}`} onClick={() => void remove(s.email)}>
                          Remove
                        </button>
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
          <Pager label="Pages of suppressed addresses" previous={list.previous} next={list.next} />
        </>
      )}
    </section>
  );
}
