import { useEffect, useState, type FormEvent } from "react";
import { Link, useSearchParams } from "react-router";
import { api, errorMessage, type Schemas } from "../api/client";
import { useSession } from "../session";
import { Alert } from "./parts";

const PAGE = 50;

/** The contacts, newest first, searched by address and paged with the API's cursors. */
export function Contacts() {
  const { project } = useSession();
  const [params, setParams] = useSearchParams();
  const search = params.get("search") ?? "";
  const cursor = params.get("cursor");
  const [page, setPage] = useState<Schemas["ContactPage"] | null>(null);
  const [total, setTotal] = useState<number | null>(null);
  const [error, setError] = useState<string | null>(null);
  // The cursors of the pages before this one, for "Previous page".
  const [trail, setTrail] = useState<(string | null)[]>([]);

  useEffect(() => {
    if (!project) return;
    let live = true;
    void api
      .GET("/contacts", {
        params: { query: { limit: PAGE, search: search || undefined, cursor: cursor ?? undefined } },
      })
      .then(({ data, error }) => {
        if (!live) return;
        setPage(data ?? null);
        // The total is counted on the first page only.
        if (data && !cursor) setTotal(data.total);
        setError(error ? errorMessage(error) : null);
      });
    return () => {
      live = false;
    };
  }, [project, search, cursor]);

  function find(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const value = String(new FormData(e.currentTarget).get("search")).trim();
    setTrail([]);
    setParams(value ? { search: value } : {});
  }

  function go(next: string | null, back: boolean) {
    const q: Record<string, string> = {};
    if (search) q.search = search;
    if (next) q.cursor = next;
    setTrail(back ? trail.slice(0, -1) : [...trail, cursor]);
    setParams(q);
  }

  return (
    <section>
      <h1>Contacts</h1>
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
          {page.data.length > 0 && (
            <table>
              <caption className="visually-hidden">Contacts</caption>
              <thead>
                <tr>
                  <th scope="col">Email</th>
                  <th scope="col">Subscribed</th>
                  <th scope="col">Added</th>
                </tr>
              </thead>
              <tbody>
                {page.data.map((c) => (
                  <tr key={c.id}>
                    <td>
                      <Link to={`/contacts/${c.id}`}>{c.email}</Link>
                    </td>
                    <td>{c.subscribed ? "Yes" : "No"}</td>
                    <td>{new Date(c.createdAt).toLocaleDateString()}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
          <nav aria-label="Pages of contacts" className="pager">
            <button type="button" disabled={trail.length === 0} onClick={() => go(trail[trail.length - 1] ?? null, true)}>
              Previous page
            </button>
            <button type="button" disabled={!page.hasMore} onClick={() => go(page.cursor ?? null, false)}>
              Next page
            </button>
          </nav>
        </>
      )}
    </section>
  );
}
