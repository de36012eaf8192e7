import { useEffect, useState } from "react";
import { Link, useParams } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { Alert } from "../parts";
import { Confirm } from "../Confirm";
import { EventsNav } from "./Events";

type Usage = Schemas["EventUsage"];
type Ref = Schemas["UsageRefBody"];

/** The service's own names, which cannot be deleted (the API says 422 for them). */
export const reserved = (name: string) =>
  name === "contact.subscribed" || name === "contact.unsubscribed" || /^(email|segment)\./.test(name);

function Refs({ title, refs, path }: { title: string; refs: Ref[]; path: string }) {
  if (refs.length === 0) return null;
  return (
    <>
      <h3>{title}</h3>
      <ul className="list">
        {refs.map((r) => (
          <li key={`${r.id}-${r.stepId ?? ""}`}>
            <Link to={`${path}/${r.id}`}>{r.name}</Link>
            {r.stepId ? ` (step ${r.stepId})` : path === "/workflows" ? " (its trigger)" : ""}
          </li>
        ))}
      </ul>
    </>
  );
}

/** One event name: how many events have it, where it is used, and deleting its events. */
export function EventName() {
  const { name = "" } = useParams();
  const { project } = useSession();
  const [usage, setUsage] = useState<Usage | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [said, setSaid] = useState("");
  const [version, setVersion] = useState(0);

  useEffect(() => {
    if (!project) return;
    let live = true;
    void api.GET("/events/{eventName}/usage", { params: { path: { eventName: name } } }).then(({ data, error }) => {
      if (!live) return;
      setUsage(data ?? null);
      setError(error ? errorMessage(error) : null);
    });
    return () => {
      live = false;
    };
  }, [project, name, version]);

  async function remove() {
    const { data, error } = await api.DELETE("/events/{eventName}", { params: { path: { eventName: name } } });
    if (error) {
      setError(errorMessage(error));
      return;
    }
    setError(null);
    const kept = data.pending > 0 ? ` ${data.pending.toLocaleString()} not yet handed to workflows were kept: delete again in a moment to remove them too.` : "";
    setSaid(`Deleted ${data.deleted.toLocaleString()} ${data.deleted === 1 ? "event" : "events"} named ${name}.${kept}`);
    setVersion((v) => v + 1);
  }

  const used = usage ? usage.segments.length + usage.campaigns.length + usage.workflows.length : 0;
  return (
    <section>
      <h1>
        Event <code>{name}</code>
      </h1>
      <EventsNav />
      <Alert message={error} />
      <p role="status">{said}</p>
      {usage && (
        <>
          <p>
            {usage.count.toLocaleString()} {usage.count === 1 ? "event has" : "events have"} this name.
          </p>
          <h2>Where it is used</h2>
          {used === 0 ? (
            <p>No segment, campaign or workflow uses it.</p>
          ) : (
            <>
              <Refs title="Segments" refs={usage.segments} path="/segments" />
              <Refs title="Campaigns" refs={usage.campaigns} path="/campaigns" />
              <Refs title="Workflows" refs={usage.workflows} path="/workflows" />
            </>
          )}
          <h2>Delete its events</h2>
          {reserved(name) ? (
            <p>The service records these events itself as the record of consent and delivery; they cannot be deleted.</p>
          ) : (
            <>
              <p>
                Deletes every event with this name. Segments, campaigns and workflows that use the name are not
                changed: from then on they see only the events tracked after the deletion.
              </p>
              <Confirm
                label="Delete these events"
                disabled={usage.count === 0}
                question={`Delete all ${usage.count.toLocaleString()} events named ${name}?${used > 0 ? ` It is used by ${used} ${used === 1 ? "segment, campaign or workflow" : "segments, campaigns or workflows"}.` : ""} This cannot be undone.`}
                confirmLabel="Yes, delete the events"
                onConfirm={remove}
              />
            </>
          )}
        </>
      )}
    </section>
  );
}
