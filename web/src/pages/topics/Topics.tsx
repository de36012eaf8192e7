import { useId, useState, type FormEvent } from "react";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { useRequest } from "../loading";
import { Alert, Field } from "../parts";
import { deleteError, topicDefaultWords } from "./words";

type Topic = Schemas["TopicBody"];

/** The project's topics (what contacts choose to hear about): list, create, edit, delete. */
export function Topics() {
  const { project } = useSession();
  const list = useRequest((signal) => (project ? api.GET("/topics", { signal }) : null), [project]);
  const topics = list.data;
  const refresh = list.reload;
  // What creating, changing or deleting went wrong with (the list's own error shows when there is none).
  const [error, setError] = useState<string | null>(null);
  const [done, setDone] = useState<string | null>(null);
  const [editing, setEditing] = useState<string | null>(null);
  const [deleting, setDeleting] = useState<string | null>(null);

  async function create(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const form = e.currentTarget;
    const f = new FormData(form);
    const description = String(f.get("description")).trim();
    const { data, error } = await api.POST("/topics", {
      body: {
        name: String(f.get("name")).trim(),
        description: description || undefined,
        defaultSubscription: f.get("defaultSubscription") as Schemas["TopicDefault"],
        visibility: f.get("visibility") as Schemas["TopicVisibility"],
      },
    });
    if (error) return setError(errorMessage(error));
    setError(null);
    form.reset();
    setDone(`Topic “${data.name}” created.`);
    refresh();
  }

  async function save(e: FormEvent<HTMLFormElement>, topic: Topic) {
    e.preventDefault();
    const f = new FormData(e.currentTarget);
    const description = String(f.get("description")).trim();
    const { data, error } = await api.PATCH("/topics/{id}", {
      params: { path: { id: topic.id } },
      body: {
        name: String(f.get("name")).trim(),
        description: description || null,
        visibility: f.get("visibility") as Schemas["TopicVisibility"],
      },
    });
    if (error) return setError(errorMessage(error));
    setError(null);
    setEditing(null);
    setDone(`Topic “${data.name}” saved.`);
    refresh();
  }

  async function remove(topic: Topic) {
    const { error, response } = await api.DELETE("/topics/{id}", { params: { path: { id: topic.id } } });
    setDeleting(null);
    if (error) return setError(deleteError(topic.name, response.status, errorMessage(error)));
    setError(null);
    setDone(`Topic “${topic.name}” deleted.`);
    refresh();
  }

  return (
    <section>
      <h1>Topics</h1>
      <p>
        Topics are the kinds of email contacts can choose to receive or not (a newsletter, product news…). Public topics are
        listed on the contacts' preference page.
      </p>
      <Alert message={error ?? list.error} />
      <p role="status">{done}</p>
      {topics && topics.length === 0 && <p>No topic yet.</p>}
      {topics && topics.length > 0 && (
        <ul className="topics">
          {topics.map((t) =>
            editing === t.id ? (
              <li key={t.id} className="card">
                <form onSubmit={(e) => void save(e, t)} aria-label={`Edit topic ${t.name}`}>
                  <Field label="Name" name="name" defaultValue={t.name} required maxLength={200} />
                  <Field label="Description" name="description" defaultValue={t.description ?? ""} maxLength={2000} />
                  <VisibilityField value={t.visibility} />
                  <p className="hint">{topicDefaultWords(t.defaultSubscription)} This cannot be changed.</p>
                  <button type="submit">Save topic</button>{" "}
                  <button type="button" className="secondary" onClick={() => setEditing(null)}>
                    Cancel
                  </button>
                </form>
              </li>
            ) : (
              <li key={t.id} className="card">
                <h2>{t.name}</h2>
                {t.description && <p>{t.description}</p>}
                <p>
                  {topicDefaultWords(t.defaultSubscription)}{" "}
                  {t.visibility === "PUBLIC" ? "Listed on the preference page." : "Not listed on the preference page."}
                </p>
                {deleting === t.id ? (
                  <div role="group" aria-label={`Confirm deleting ${t.name}`}>
                    <p>Delete “{t.name}”? Contacts' choices for it are forgotten.</p>
                    <button type="button" onClick={() => void remove(t)}>
                      Yes, delete {t.name}
                    </button>{" "}
                    <button type="button" className="secondary" onClick={() => setDeleting(null)}>
                      Keep it
                    </button>
                  </div>
                ) : (
                  <p>
                    <button type="button" aria-label={`Edit ${t.name}`} onClick={() => setEditing(t.id)}>
                      Edit
                    </button>{" "}
                    <button type="button" className="secondary" aria-label={`Delete ${t.name}`} onClick={() => setDeleting(t.id)}>
                      Delete
                    </button>
                  </p>
                )}
              </li>
            ),
          )}
        </ul>
      )}
      <h2>Create a topic</h2>
      <form onSubmit={(e) => void create(e)}>
        <Field label="Topic name" name="name" required maxLength={200} />
        <Field label="Topic description" name="description" maxLength={2000} hint="Shown to contacts on the preference page." />
        <fieldset>
          <legend>Who is subscribed at first</legend>
          <div className="check">
            <input type="radio" id="topic-opt-in" name="defaultSubscription" value="OPT_IN" defaultChecked aria-describedby="topic-opt-in-hint" />
            <label htmlFor="topic-opt-in">Everyone (opt-in by default)</label>
          </div>
          <small id="topic-opt-in-hint" className="hint">
            Every contact is subscribed until they opt out.
          </small>
          <div className="check">
            <input type="radio" id="topic-opt-out" name="defaultSubscription" value="OPT_OUT" aria-describedby="topic-opt-out-hint" />
            <label htmlFor="topic-opt-out">No one (opt-out by default)</label>
          </div>
          <small id="topic-opt-out-hint" className="hint">
            Contacts are subscribed only once they opt in. This choice cannot be changed later.
          </small>
        </fieldset>
        <VisibilityField value="PRIVATE" />
        <button type="submit">Create topic</button>
      </form>
    </section>
  );
}

function VisibilityField({ value }: { value: Schemas["TopicVisibility"] }) {
  const id = useId();
  return (
    <div className="field">
      <label htmlFor={id}>Visibility</label>
      <select id={id} name="visibility" defaultValue={value}>
        <option value="PUBLIC">Public: listed on the preference page</option>
        <option value="PRIVATE">Private: not listed</option>
      </select>
    </div>
  );
}
