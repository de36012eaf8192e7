import { useEffect, useState } from "react";
import { Link, useParams } from "react-router";
import { api, errorMessage, type Schemas } from "../api/client";
import { useSession } from "../session";
import { Alert } from "./parts";

/** A contact: its address, subscription, custom data and events (newest first). */
export function Contact() {
  const { id = "" } = useParams();
  const { project } = useSession();
  const [contact, setContact] = useState<Schemas["ContactBody"] | null>(null);
  const [events, setEvents] = useState<Schemas["EventPage"] | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    if (!project) return;
    let live = true;
    void Promise.all([
      api.GET("/contacts/{id}", { params: { path: { id } } }),
      api.GET("/events/contact/{contactId}", { params: { path: { contactId: id }, query: { limit: 50 } } }),
    ]).then(([c, e]) => {
      if (!live) return;
      setContact(c.data ?? null);
      setEvents(e.data ?? null);
      setError(c.error ? errorMessage(c.error) : e.error ? errorMessage(e.error) : null);
    });
    return () => {
      live = false;
    };
  }, [project, id]);

  const data = Object.entries(contact?.data ?? {});
  return (
    <section>
      <p>
        <Link to="/contacts">Back to contacts</Link>
      </p>
      <Alert message={error} />
      {contact && (
        <>
          <h1>{contact.email}</h1>
          <dl className="facts">
            <dt>Subscribed</dt>
            <dd>{contact.subscribed ? "Yes" : "No"}</dd>
            <dt>Added</dt>
            <dd>{new Date(contact.createdAt).toLocaleString()}</dd>
            <dt>Last changed</dt>
            <dd>{new Date(contact.updatedAt).toLocaleString()}</dd>
          </dl>
          <h2>Data</h2>
          {data.length === 0 ? (
            <p>No custom data.</p>
          ) : (
            <table>
              <caption className="visually-hidden">Custom data</caption>
              <thead>
                <tr>
                  <th scope="col">Field</th>
                  <th scope="col">Value</th>
                </tr>
              </thead>
              <tbody>
                {data.map(([k, v]) => (
                  <tr key={k}>
                    <th scope="row">{k}</th>
                    <td><code>{JSON.stringify(v)}</code></td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
          <h2>Events</h2>
          {events && events.data.length === 0 && <p>No events yet.</p>}
          {events && events.data.length > 0 && (
            <ol className="list">
              {events.data.map((e) => (
                <li key={e.id}>
                  <strong>{e.name}</strong>{" "}
                  <time dateTime={e.createdAt}>{new Date(e.createdAt).toLocaleString()}</time>
                  {Object.keys(e.data).length > 0 && <code className="block">{JSON.stringify(e.data)}</code>}
                </li>
              ))}
            </ol>
          )}
        </>
      )}
    </section>
  );
}
