import { useEffect, useState } from "react";
import { api, errorMessage, type Schemas } from "../../api/client";
import { Alert } from "../parts";

type Event = Schemas["EventBody"];
const PAGE = 25;

/** The contact's events, newest first (its own and the service's: `email.*`, `contact.*`),
 * with older ones loaded on demand. */
export function ContactEvents({ contactId }: { contactId: string }) {
  const [events, setEvents] = useState<Event[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  const [total, setTotal] = useState<number | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);

  async function load(after: string | null) {
    setLoading(true);
    const { data, error } = await api.GET("/events/contact/{contactId}", {
      params: { path: { contactId }, query: { limit: PAGE, cursor: after ?? undefined } },
    });
    setLoading(false);
    setError(error ? errorMessage(error) : null);
    if (!data) return;
    setEvents((old) => (after ? [...old, ...data.data] : data.data));
    setCursor(data.hasMore ? (data.cursor ?? null) : null);
    if (!after) setTotal(data.total);
  }

  useEffect(() => {
    // The first page of the contact's events; later pages come from the button.
    // eslint-disable-next-line react-hooks/set-state-in-effect
    void load(null);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [contactId]);

  return (
    <section aria-labelledby="contact-events">
      <h2 id="contact-events">Events</h2>
      <Alert message={error} />
      {total !== null && (
        <p>{total === 0 ? "No events yet." : `${total.toLocaleString()} ${total === 1 ? "event" : "events"}, newest first.`}</p>
      )}
      {events.length > 0 && (
        <ol className="list timeline">
          {events.map((e) => (
            <li key={e.id}>
              <strong>{e.name}</strong>{" "}
              <time dateTime={e.createdAt}>{new Date(e.createdAt).toLocaleString()}</time>
              {Object.keys(e.data).length > 0 && <code className="block">{JSON.stringify(e.data)}</code>}
            </li>
          ))}
        </ol>
      )}
      {cursor && (
        <button type="button" className="secondary" disabled={loading} onClick={() => void load(cursor)}>
          Show older events
        </button>
      )}
    </section>
  );
}
