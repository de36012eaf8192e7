import { useCallback, useEffect, useState } from "react";
import { Link, useNavigate, useParams } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useFieldChoices } from "../../filter/fields";
import { describe, type ApiFilter } from "../../filter/model";
import { useSession } from "../../session";
import { Alert } from "../parts";
import { Members } from "./Members";

/** A segment: what it is, its count (refresh, compute), its members, edit and delete. */
export function Segment() {
  const { id = "" } = useParams();
  const { project } = useSession();
  const navigate = useNavigate();
  const { fields } = useFieldChoices();
  const [segment, setSegment] = useState<Schemas["SegmentBody"] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [done, setDone] = useState<string | null>(null);
  const [confirming, setConfirming] = useState(false);
  const [busy, setBusy] = useState(false);
  // Bumped after a change of the members, so that the list reads them again.
  const [version, setVersion] = useState(0);

  const load = useCallback(async () => {
    const { data, error } = await api.GET("/segments/{id}", { params: { path: { id } } });
    setSegment(data ?? null);
    if (error) setError(errorMessage(error));
  }, [id]);

  useEffect(() => {
    if (!project) return;
    let live = true;
    void api.GET("/segments/{id}", { params: { path: { id } } }).then(({ data, error }) => {
      if (!live) return;
      setSegment(data ?? null);
      setError(error ? errorMessage(error) : null);
    });
    return () => {
      live = false;
    };
  }, [project, id]);

  /** Counts the members now ("refresh") or, for a tracked segment, stores them too ("compute"). */
  async function count(action: "refresh" | "compute") {
    setBusy(true);
    const path = { params: { path: { id } } };
    const { data, error } =
      action === "refresh"
        ? await api.POST("/segments/{id}/refresh", path).then((r) => ({ ...r, data: r.data && `Counted: ${members(r.data.memberCount)} now.` }))
        : await api.POST("/segments/{id}/compute", path).then((r) => ({
            ...r,
            data: r.data && `Computed: ${members(r.data.added)} entered, ${members(r.data.removed)} left, ${members(r.data.total)} now.`,
          }));
    setBusy(false);
    setError(error ? errorMessage(error) : null);
    if (data) {
      setDone(data);
      setVersion((v) => v + 1);
      await load();
    }
  }

  async function remove() {
    setBusy(true);
    const { error } = await api.DELETE("/segments/{id}", { params: { path: { id } } });
    setBusy(false);
    setConfirming(false);
    if (error) setError(errorMessage(error));
    else navigate("/segments");
  }

  const membersChanged = useCallback(() => {
    void load();
  }, [load]);

  return (
    <section>
      <p>
        <Link to="/segments">Back to segments</Link>
      </p>
      <Alert message={error} />
      {!segment && !error && <p role="status">Loading…</p>}
      {segment && (
        <>
          <h1>{segment.name}</h1>
          <dl className="facts">
            <dt>Type</dt>
            <dd>{segment.type === "DYNAMIC" ? "Dynamic: the contacts matching its conditions" : "Static: members added by hand"}</dd>
            {segment.description && (
              <>
                <dt>Description</dt>
                <dd>{segment.description}</dd>
              </>
            )}
            {segment.type === "DYNAMIC" && (
              <>
                <dt>Conditions</dt>
                <dd>{fields ? describe(segment.condition as ApiFilter, fields) : "…"}</dd>
                <dt>Membership</dt>
                <dd>
                  {segment.trackMembership
                    ? "Tracked: compute stores the members and records each entry and exit as an event."
                    : "Not tracked: the members are read live."}
                </dd>
              </>
            )}
            <dt>Member count</dt>
            <dd>
              {members(segment.memberCount)}
              {segment.type === "DYNAMIC" && " (at the last compute or refresh)"}
            </dd>
          </dl>
          <div className="seg-actions">
            <Link to={`/segments/${id}/edit`} className="seg-button">
              Edit segment
            </Link>
            <button type="button" disabled={busy} onClick={() => void count("refresh")}>
              Refresh count
            </button>
            {segment.type === "DYNAMIC" && segment.trackMembership && (
              <button type="button" disabled={busy} onClick={() => void count("compute")}>
                Compute members
              </button>
            )}
            {!confirming && (
              <button type="button" className="seg-danger" onClick={() => setConfirming(true)}>
                Delete segment
              </button>
            )}
          </div>
          {segment.type === "DYNAMIC" && (
            <p className="hint">
              “Refresh count” counts the members now and stores the count; nothing else changes.
              {segment.trackMembership &&
                " “Compute members” also stores who is in the segment and records an entry or exit event for each contact that came in or left, which can start workflows."}
            </p>
          )}
          {confirming && (
            <div role="group" aria-label="Confirm deletion" className="card">
              <p>Delete “{segment.name}”? Its members stay contacts; campaigns and conditions naming it stop finding it.</p>
              <button type="button" className="seg-danger" disabled={busy} onClick={() => void remove()}>
                Yes, delete segment
              </button>{" "}
              <button type="button" className="seg-secondary" onClick={() => setConfirming(false)}>
                Keep it
              </button>
            </div>
          )}
          <p role="status">{done}</p>
          <Members segment={segment} version={version} onChange={membersChanged} />
        </>
      )}
    </section>
  );
}

/** "1 member", "1,204 members". */
function members(n: number): string {
  return `${n.toLocaleString()} ${n === 1 ? "member" : "members"}`;
}
