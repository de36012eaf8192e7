import { useCallback, useEffect, useState, type FormEvent } from "react";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { Pager, useCursorPages } from "../paging";
import { Alert } from "../parts";
import { parseAddresses, reasonWords } from "./words";

const PAGE = 50;

/** The addresses no email of the project goes to: paged, filtered, added by hand and removed. */
export function Suppressions() {
  const { project } = useSession();
  const [page, setPage] = useState<Schemas["SuppressionPage"] | null>(null);
  const [total, setTotal] = useState<number | null>(null);
  const pages = useCursorPages();
  const cursor = pages.cursor;
  const [filter, setFilter] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [done, setDone] = useState<string | null>(null);
  const [version, setVersion] = useState(0);

  const refresh = useCallback(() => setVersion((v) => v + 1), []);

  useEffect(() => {
    if (!project) return;
    let live = true;
    void api.GET("/suppressions", { params: { query: { limit: PAGE, cursor: cursor ?? undefined } } }).then(({ data, error }) => {
      if (!live) return;
      setPage(data ?? null);
      if (data && !cursor) setTotal(data.total);
      setError(error ? errorMessage(error) : null);
    });
    return () => {
      live = false;
    };
  }, [project, cursor, version]);

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
    pages.reset();
    refresh();
  }

  async function remove(email: string) {
    const { error } = await api.DELETE("/suppressions/{email}", { params: { path: { email } } });
    if (error) return setError(errorMessage(error));
    setError(null);
    setDone(`${email} removed: the project's email may go to it again.`);
    refresh();
  }

  const needle = filter.trim().toLowerCase();
  const shown = (page?.data ?? []).filter((s) => !needle || s.email.includes(needle));

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
      <Alert message={error} />
      <p role="status">{done}</p>
      <h2>Suppressed addresses</h2>
      {page && (
        <>
          <p>{total === null ? "" : `${total.toLocaleString()} ${total === 1 ? "address" : "addresses"} in all.`}</p>
          <div className="field narrow">
            <label htmlFor="suppress-filter">Filter the addresses on this page</label>
            <input id="suppress-filter" type="search" value={filter} onChange={(e) => setFilter(e.target.value)} />
          </div>
          {shown.length === 0 ? (
            <p>{needle ? "No address on this page matches." : "No suppressed address."}</p>
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
          <Pager label="Pages of suppressed addresses" previous={pages.previous} next={pages.after(page)} />
        </>
      )}
    </section>
  );
}
