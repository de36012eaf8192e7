import { useEffect, useRef, useState } from "react";
import { Link } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { Alert } from "../parts";
import { EventsNav } from "./Events";
import { announcement, kindName, merge } from "./feed";

type Entry = Schemas["ActivityBody"];
const PAGE = 50;
const EVERY_MS = 5000;

/** The activity feed (sends, deliveries, opens, clicks, bounces, complaints, replies), newest
 * first, checked for new entries every few seconds unless paused; new entries are announced
 * politely, once per poll that brought some. */
export function Activity() {
  const { project } = useSession();
  const [type, setType] = useState("");
  const [types, setTypes] = useState<string[]>([]);
  const [entries, setEntries] = useState<Entry[]>([]);
  const shown = useRef<Entry[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  const [total, setTotal] = useState<number | null>(null);
  const [recent, setRecent] = useState<number | null>(null);
  const [paused, setPaused] = useState(false);
  const [said, setSaid] = useState("");
  const [error, setError] = useState<string | null>(null);

  function show(list: Entry[]) {
    shown.current = list;
    setEntries(list);
  }

  // The first page of the chosen kind, the kinds present and the last hour's count.
  useEffect(() => {
    if (!project) return;
    let live = true;
    void Promise.all([
      api.GET("/activity", { params: { query: { limit: PAGE, type: type || undefined } } }),
      api.GET("/activity/types"),
      api.GET("/activity/recent-count", { params: { query: { minutes: 60 } } }),
    ]).then(([page, kinds, count]) => {
      if (!live) return;
      const problem = page.error ?? kinds.error ?? count.error;
      setError(problem ? errorMessage(problem) : null);
      show(page.data?.data ?? []);
      setCursor(page.data?.hasMore ? (page.data.cursor ?? null) : null);
      setTotal(page.data?.total ?? null);
      setTypes(kinds.data?.types ?? []);
      setRecent(count.data?.count ?? null);
      setSaid("");
    });
    return () => {
      live = false;
    };
  }, [project, type]);

  // New entries every few seconds, while not paused and the page is in view.
  useEffect(() => {
    if (!project || paused) return;
    let live = true;
    const timer = setInterval(() => {
      if (document.hidden) return;
      void Promise.all([
        api.GET("/activity", { params: { query: { limit: PAGE, type: type || undefined } } }),
        api.GET("/activity/recent-count", { params: { query: { minutes: 60 } } }),
      ]).then(([page, count]) => {
        if (!live) return;
        if (page.error) {
          setError(errorMessage(page.error));
          return;
        }
        setError(null);
        if (count.data) setRecent(count.data.count);
        const { entries, added } = merge(shown.current, page.data.data);
        if (added > 0) {
          show(entries);
          setTotal((t) => (t === null ? t : t + added));
        }
        setSaid(announcement(added, entries.length));
      });
    }, EVERY_MS);
    return () => {
      live = false;
      clearInterval(timer);
    };
  }, [project, type, paused]);

  async function older() {
    if (!cursor) return;
    const { data, error } = await api.GET("/activity", {
      params: { query: { limit: PAGE, type: type || undefined, cursor } },
    });
    setError(error ? errorMessage(error) : null);
    if (!data) return;
    const known = new Set(shown.current.map((e) => e.id));
    show([...shown.current, ...data.data.filter((e) => !known.has(e.id))]);
    setCursor(data.hasMore ? (data.cursor ?? null) : null);
  }

  return (
    <section>
      <h1>Activity</h1>
      <EventsNav />
      <div className="inline">
        <label htmlFor="activity-type">Show</label>
        <select id="activity-type" value={type} onChange={(e) => setType(e.target.value)}>
          <option value="">Every kind</option>
          {types.map((t) => (
            <option key={t} value={t}>
              {kindName(t)}
            </option>
          ))}
        </select>
        <button type="button" className="secondary" onClick={() => setPaused(!paused)}>
          {paused ? "Resume live updates" : "Pause live updates"}
        </button>
      </div>
      <p>
        {paused ? "Live updates are paused." : `Live: checked every ${EVERY_MS / 1000} seconds.`}
        {recent !== null && ` ${recent.toLocaleString()} in the last hour.`}
      </p>
      <p role="status">{said}</p>
      <Alert message={error} />
      {total === 0 && entries.length === 0 && <p>No activity yet: it appears here as mail is sent and received.</p>}
      {entries.length > 0 && (
        <div className="scroll" tabIndex={0} role="region" aria-label="Activity table">
          <table className="activity">
            <caption className="visually-hidden">Activity, newest first</caption>
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">What</th>
                <th scope="col">Who</th>
                <th scope="col">Subject</th>
                <th scope="col">Detail</th>
              </tr>
            </thead>
            <tbody>
              {entries.map((e) => (
                <tr key={e.id}>
                  <td>
                    <time dateTime={e.createdAt}>{new Date(e.createdAt).toLocaleString()}</time>
                  </td>
                  <td>{kindName(e.type)}</td>
                  <td>{e.contactId ? <Link to={`/contacts/${e.contactId}`}>{e.email}</Link> : (e.email ?? "")}</td>
                  <td>{e.subject ?? ""}</td>
                  <td className="long">{e.detail ?? ""}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {cursor && (
        <button type="button" className="secondary" onClick={() => void older()}>
          Show older entries
        </button>
      )}
    </section>
  );
}
