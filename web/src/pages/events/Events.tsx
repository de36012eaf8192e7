import { useEffect, useState } from "react";
import { Link, NavLink } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { Alert } from "../parts";

/** The two pages of the events area. */
export function EventsNav() {
  return (
    <nav aria-label="Events and activity" className="subnav">
      <NavLink to="/events" end>
        Event names
      </NavLink>
      <NavLink to="/events/activity">Activity feed</NavLink>
    </nav>
  );
}

export const eventPath = (name: string) => `/events/names/${encodeURIComponent(name)}`;

/** The project's event names with their counts, and the figures of all its events. */
export function Events() {
  const { project } = useSession();
  const [names, setNames] = useState<Schemas["EventNameBody"][] | null>(null);
  const [stats, setStats] = useState<Schemas["EventStats"] | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    if (!project) return;
    let live = true;
    void Promise.all([api.GET("/events/names"), api.GET("/events/stats")]).then(([n, s]) => {
      if (!live) return;
      setNames(n.data?.names ?? null);
      setStats(s.data ?? null);
      const problem = n.error ?? s.error;
      setError(problem ? errorMessage(problem) : null);
    });
    return () => {
      live = false;
    };
  }, [project]);

  return (
    <section>
      <h1>Events</h1>
      <EventsNav />
      <Alert message={error} />
      {stats && (
        <dl className="figures">
          <div>
            <dt>Events in all</dt>
            <dd>{stats.total.toLocaleString()}</dd>
          </div>
          <div>
            <dt>Last 24 hours</dt>
            <dd>{stats.last24Hours.toLocaleString()}</dd>
          </div>
          <div>
            <dt>Last 7 days</dt>
            <dd>{stats.last7Days.toLocaleString()}</dd>
          </div>
          <div>
            <dt>Contacts with events</dt>
            <dd>{stats.uniqueContacts.toLocaleString()}</dd>
          </div>
          <div>
            <dt>Event names</dt>
            <dd>{stats.uniqueNames.toLocaleString()}</dd>
          </div>
        </dl>
      )}
      {names && names.length === 0 && (
        <p>
          No events yet. Your application tracks them with <code>POST /v1/track</code>; the service records its own
          (<code>email.*</code>, <code>contact.*</code>) as mail is sent and contacts change.
        </p>
      )}
      {names && names.length > 0 && (
        <div className="scroll" tabIndex={0} role="region" aria-label="Event names table">
          <table>
            <caption>Event names, most used first</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Events</th>
                <th scope="col">Last seen</th>
              </tr>
            </thead>
            <tbody>
              {names.map((n) => (
                <tr key={n.name}>
                  <td>
                    <Link to={eventPath(n.name)}>{n.name}</Link>
                  </td>
                  <td>{n.count.toLocaleString()}</td>
                  <td>
                    <time dateTime={n.lastSeenAt}>{new Date(n.lastSeenAt).toLocaleString()}</time>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
