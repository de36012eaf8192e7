import { useState, type FormEvent } from "react";
import { api, errorMessage, type Schemas } from "../api/client";
import { useSession } from "../session";
import { Alert, Field } from "./parts";

/** The user's projects and a form to create one; a new project's keys are shown this once. */
export function Projects() {
  const { projects, project, choose, reload } = useSession();
  const [error, setError] = useState<string | null>(null);
  const [created, setCreated] = useState<Schemas["CreatedProject"] | null>(null);

  async function create(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const form = e.currentTarget;
    const name = String(new FormData(form).get("name"));
    const { data, error } = await api.POST("/users/@me/projects", { body: { name } });
    if (error) return setError(errorMessage(error));
    setError(null);
    form.reset();
    setCreated(data);
    choose(data.id);
    await reload();
  }

  return (
    <section>
      <h1>Projects</h1>
      {created && (
        <div role="status" className="card">
          <h2>{created.name} is ready</h2>
          <p>Store the secret key now: it is not shown again.</p>
          <dl>
            <dt>Public key (for tracking from a page)</dt>
            <dd><code>{created.publicKey}</code></dd>
            <dt>Secret key (for your server)</dt>
            <dd><code>{created.secretKey}</code></dd>
          </dl>
        </div>
      )}
      {projects.length > 0 && (
        <ul className="list">
          {projects.map((p) => (
            <li key={p.id}>
              <span>{p.name}</span> <small>({p.role.toLowerCase()})</small>{" "}
              {p.id === project?.id ? (
                <strong>Current project</strong>
              ) : (
                <button type="button" onClick={() => choose(p.id)} aria-label={`Switch to ${p.name}`}>
                  Switch
                </button>
              )}
            </li>
          ))}
        </ul>
      )}
      <h2>Create a project</h2>
      <form onSubmit={(e) => void create(e)} className="inline">
        <Field label="Project name" name="name" required maxLength={100} />
        <button type="submit">Create project</button>
      </form>
      <Alert message={error} />
    </section>
  );
}
