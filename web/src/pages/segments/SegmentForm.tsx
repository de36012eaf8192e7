import { useCallback, useEffect, useId, useState, type FormEvent } from "react";
import { Link, useNavigate, useParams } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { FilterBuilder, type ApiFilter, type PathError } from "../../filter/FilterBuilder";
import { splitErrors } from "../../filter/model";
import { FilterPreview } from "../../filter/Preview";
import { useSession } from "../../session";
import { Alert, Field } from "../parts";

/** Creates a segment (at /segments/new) or edits one (at /segments/:id/edit). */
export function SegmentForm() {
  const { id } = useParams();
  const { project } = useSession();
  const navigate = useNavigate();
  const [segment, setSegment] = useState<Schemas["SegmentBody"] | null>(null);
  const [name, setName] = useState("");
  const [description, setDescription] = useState("");
  const [type, setType] = useState<"DYNAMIC" | "STATIC">("DYNAMIC");
  const [track, setTrack] = useState(false);
  const [filter, setFilter] = useState<ApiFilter | null>(null);
  const [complete, setComplete] = useState(true);
  const [error, setError] = useState<string | null>(null);
  const [filterErrors, setFilterErrors] = useState<PathError[]>([]);
  const [saving, setSaving] = useState(false);
  const descriptionId = useId();

  useEffect(() => {
    if (!project || !id) return;
    let live = true;
    void api.GET("/segments/{id}", { params: { path: { id } } }).then(({ data, error }) => {
      if (!live) return;
      setError(error ? errorMessage(error) : null);
      if (!data) return;
      setSegment(data);
      setName(data.name);
      setDescription(data.description ?? "");
      setType(data.type);
      setTrack(data.trackMembership);
      setFilter((data.condition as ApiFilter | null) ?? null);
    });
    return () => {
      live = false;
    };
  }, [project, id]);

  const changed = useCallback((next: ApiFilter, ok: boolean) => {
    setFilter(next);
    setComplete(ok);
    setFilterErrors([]);
  }, []);

  async function save(e: FormEvent) {
    e.preventDefault();
    if (type === "DYNAMIC" && (!filter || !complete)) {
      setError("Some conditions are not complete: see the messages beside them.");
      return;
    }
    setSaving(true);
    const condition = type === "DYNAMIC" ? filter : undefined;
    const result = id
      ? await api.PATCH("/segments/{id}", {
          params: { path: { id } },
          body: {
            name,
            description: description.trim() || null,
            ...(type === "DYNAMIC" ? { condition, trackMembership: track } : {}),
          },
        })
      : await api.POST("/segments", {
          body: { name, description: description.trim() || null, type, condition, trackMembership: type === "DYNAMIC" ? track : undefined },
        });
    if (result.data && type === "DYNAMIC") {
      // The stored count follows the new conditions (a refresh only counts: no event).
      await api.POST("/segments/{id}/refresh", { params: { path: { id: result.data.id } } });
    }
    setSaving(false);
    if (result.data) {
      navigate(`/segments/${result.data.id}`);
      return;
    }
    const fieldErrors = (result.error as Partial<Schemas["ErrorBody"]> | undefined)?.error?.errors ?? [];
    setFilterErrors(splitErrors(fieldErrors, "condition").filter);
    setError(errorMessage(result.error));
  }

  const editing = Boolean(id);
  if (editing && !segment) {
    return (
      <section>
        <h1>Edit segment</h1>
        <Alert message={error} />
        {!error && <p role="status">Loading…</p>}
      </section>
    );
  }

  return (
    <section>
      <p>
        <Link to={editing ? `/segments/${id}` : "/segments"}>{editing ? "Back to the segment" : "Back to segments"}</Link>
      </p>
      <h1>{editing ? `Edit segment ${segment?.name}` : "New segment"}</h1>
      <form onSubmit={(e) => void save(e)}>
        <Field label="Name" value={name} onChange={(e) => setName(e.target.value)} required maxLength={200} />
        <div className="field">
          <label htmlFor={descriptionId}>Description (optional)</label>
          <textarea id={descriptionId} value={description} onChange={(e) => setDescription(e.target.value)} maxLength={2000} rows={2} />
        </div>
        {editing ? (
          <p>
            Type: <strong>{type === "DYNAMIC" ? "dynamic" : "static"}</strong> (fixed at creation).
          </p>
        ) : (
          <fieldset className="seg-choices">
            <legend>Type</legend>
            <label>
              <input type="radio" name="type" checked={type === "DYNAMIC"} onChange={() => setType("DYNAMIC")} /> Dynamic: the
              contacts that match the conditions below
            </label>
            <label>
              <input type="radio" name="type" checked={type === "STATIC"} onChange={() => setType("STATIC")} /> Static: the
              contacts you add by hand
            </label>
          </fieldset>
        )}
        {type === "DYNAMIC" && (
          <>
            <label className="seg-check">
              <input type="checkbox" checked={track} onChange={(e) => setTrack(e.target.checked)} /> Track membership: store the
              members at each compute and record each entry and exit as an event
            </label>
            <fieldset className="seg-filter">
              <legend>Conditions</legend>
              <FilterBuilder value={filter} onChange={changed} errors={filterErrors} exclude={id} />
              <FilterPreview filter={filter} complete={complete} onErrors={setFilterErrors} />
            </fieldset>
            <p className="hint">Once the segment is saved, its members follow the conditions live, on the segment’s page.</p>
          </>
        )}
        <Alert message={error} />
        <button type="submit" disabled={saving}>
          {editing ? "Save segment" : "Create segment"}
        </button>
      </form>
    </section>
  );
}
