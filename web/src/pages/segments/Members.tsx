import { useEffect, useId, useState, type FormEvent } from "react";
import { Link } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { Pager } from "../paging";
import { Alert } from "../parts";
import { addresses } from "./addresses";

const PAGE = 50;


/** A segment's members, a page at a time (live for a dynamic segment); a static segment's are
 * added and removed here. */
export function Members({ segment, version, onChange }: { segment: Schemas["SegmentBody"]; version: number; onChange: () => void }) {
  const [page, setPage] = useState(1);
  const [members, setMembers] = useState<Schemas["SegmentContactsPage"] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [done, setDone] = useState<string | null>(null);
  const [changes, setChanges] = useState(0);
  const [text, setText] = useState("");
  const [create, setCreate] = useState(false);
  const addId = useId();
  const isStatic = segment.type === "STATIC";

  useEffect(() => {
    let live = true;
    void api
      .GET("/segments/{id}/contacts", { params: { path: { id: segment.id }, query: { page, pageSize: PAGE } } })
      .then(({ data, error }) => {
        if (!live) return;
        setMembers(data ?? null);
        setError(error ? errorMessage(error) : null);
      });
    return () => {
      live = false;
    };
  }, [segment.id, segment.updatedAt, page, version, changes]);

  async function add(e: FormEvent) {
    e.preventDefault();
    const emails = addresses(text);
    if (emails.length === 0) {
      setError("Enter at least one email address.");
      return;
    }
    const { data, error } = await api.POST("/segments/{id}/members", {
      params: { path: { id: segment.id } },
      body: { emails, createMissing: create },
    });
    setError(error ? errorMessage(error) : null);
    if (!data) return;
    setText("");
    const missing = data.notFound.length > 0 ? ` No contact has ${data.notFound.join(", ")}.` : "";
    setDone(`Added ${data.added.toLocaleString()} ${data.added === 1 ? "member" : "members"}.${missing}`);
    setChanges((c) => c + 1);
    onChange();
  }

  async function remove(email: string) {
    const { data, error } = await api.DELETE("/segments/{id}/members", {
      params: { path: { id: segment.id } },
      body: { emails: [email] },
    });
    setError(error ? errorMessage(error) : null);
    if (!data) return;
    setDone(`Removed ${email} from the segment.`);
    setChanges((c) => c + 1);
    onChange();
  }

  return (
    <>
      <h2>Members</h2>
      {isStatic && (
        <form onSubmit={(e) => void add(e)} className="card">
          <div className="field">
            <label htmlFor={addId}>Email addresses to add</label>
            <textarea
              id={addId}
              rows={3}
              value={text}
              onChange={(e) => setText(e.target.value)}
              aria-describedby={`${addId}-hint`}
            />
            <small id={`${addId}-hint`} className="hint">
              One per line, or separated by commas; at most 1,000 at a time.
            </small>
          </div>
          <label className="seg-check">
            <input type="checkbox" checked={create} onChange={(e) => setCreate(e.target.checked)} /> Create a contact for each
            address that has none
          </label>
          <button type="submit">Add members</button>
        </form>
      )}
      <Alert message={error} />
      <p role="status">{done}</p>
      {members && (
        <>
          <p>
            {members.total === 0
              ? "No member."
              : `${members.total.toLocaleString()} ${members.total === 1 ? "member" : "members"}${
                  segment.type === "DYNAMIC" ? " now" : ""
                }; page ${members.page} of ${Math.max(1, members.totalPages)}.`}
          </p>
          {members.data.length > 0 && (
            <div className="seg-scroll">
              <table>
                <caption className="visually-hidden">Members of {segment.name}</caption>
                <thead>
                  <tr>
                    <th scope="col">Email</th>
                    <th scope="col">Subscribed</th>
                    <th scope="col">Added</th>
                    {isStatic && <th scope="col">Action</th>}
                  </tr>
                </thead>
                <tbody>
                  {members.data.map((c) => (
                    <tr key={c.id}>
                      <td>
                        <Link to={`/contacts/${c.id}`}>{c.email}</Link>
                      </td>
                      <td>{c.subscribed ? "Yes" : "No"}</td>
                      <td>{new Date(c.createdAt).toLocaleDateString()}</td>
                      {isStatic && (
                        <td>
                          <button type="button" className="seg-secondary" onClick={() => void remove(c.email)}>
                            Remove {c.email}
                          </button>
                        </td>
                      )}
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
          <Pager
            label="Pages of members"
            previous={page > 1 ? () => setPage(page - 1) : null}
            next={page < members.totalPages ? () => setPage(page + 1) : null}
          />
        </>
      )}
    </>
  );
}
