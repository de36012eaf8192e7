import { useState, type FormEvent } from "react";
import { api, errorMessage, type Schemas } from "../../api/client";
import { Alert } from "../parts";

type Detail = Schemas["ContactDetail"];

/** The contact's choice for each topic of the project, saved with PATCH `topics`. */
export function ContactTopics({ contact, onSaved }: { contact: Detail; onSaved: (c: Detail) => void }) {
  const initial = () => Object.fromEntries(contact.topics.map((t) => [t.id, t.subscribed]));
  const [chosen, setChosen] = useState<Record<string, boolean>>(initial);
  const [error, setError] = useState<string | null>(null);
  const [said, setSaid] = useState("");
  const changed = contact.topics.filter((t) => (chosen[t.id] ?? t.subscribed) !== t.subscribed);

  async function save(e: FormEvent) {
    e.preventDefault();
    const topics = changed.map((t) => ({ id: t.id, subscribed: chosen[t.id] ?? t.subscribed }));
    const res = await api.PATCH("/contacts/{id}", { params: { path: { id: contact.id } }, body: { topics } });
    if (res.error) {
      setError(errorMessage(res.error));
      return;
    }
    setError(null);
    setSaid("Topics saved.");
    setChosen(Object.fromEntries(res.data.topics.map((t) => [t.id, t.subscribed])));
    onSaved(res.data);
  }

  return (
    <section aria-labelledby="contact-topics">
      <h2 id="contact-topics">Topics</h2>
      {contact.topics.length === 0 ? (
        <p>This project has no topics.</p>
      ) : (
        <form onSubmit={(e) => void save(e)}>
          <fieldset>
            <legend>Topics {contact.email} receives mail about</legend>
            {contact.topics.map((t) => (
              <label key={t.id} className="check">
                <input
                  type="checkbox"
                  checked={chosen[t.id] ?? t.subscribed}
                  onChange={(e) => {
                    setSaid("");
                    setChosen({ ...chosen, [t.id]: e.target.checked });
                  }}
                />
                {t.name}
              </label>
            ))}
          </fieldset>
          <Alert message={error} />
          <button type="submit" disabled={changed.length === 0}>
            Save topics
          </button>
        </form>
      )}
      <p role="status">{said}</p>
    </section>
  );
}
