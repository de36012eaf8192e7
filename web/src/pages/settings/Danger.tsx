// Reset (delete the project's data, keep the project) and delete the project: the owner's, each
// behind a dialog where the project's name must be typed.
import { useState } from "react";
import { useNavigate } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { ConfirmDialog } from "../Confirm";
import { Alert } from "../parts";
import { TextField } from "./controls";

type Action = "reset" | "delete";

const count = (n: number, what: string) => `${n} ${what}${n === 1 ? "" : "s"}`;

export function Danger({ project }: { project: Schemas["ProjectBody"] }) {
  const { reload } = useSession();
  const navigate = useNavigate();
  const [asking, setAsking] = useState<Action | null>(null);
  const [typed, setTyped] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [done, setDone] = useState("");
  if (project.role !== "OWNER") return null;

  function ask(action: Action) {
    setTyped("");
    setAsking(action);
  }

  async function act() {
    const action = asking;
    setAsking(null);
    const path = { params: { path: { id: project.id } } };
    if (action === "reset") {
      const { data, error } = await api.POST("/users/@me/projects/{id}/reset", path);
      if (error) return setError(errorMessage(error));
      setError(null);
      const d = data.deleted;
      const counts = [
        count(d.contacts, "contact"),
        count(d.events, "event"),
        count(d.emails, "email"),
        count(d.templates, "template"),
        count(d.segments, "segment"),
        count(d.campaigns, "campaign"),
        count(d.workflows, "workflow"),
      ];
      setDone(`The project was reset: ${counts.join(", ")} deleted.`);
    } else if (action === "delete") {
      const { error } = await api.DELETE("/users/@me/projects/{id}", path);
      if (error) return setError(errorMessage(error));
      await reload();
      navigate("/projects");
    }
  }

  const what =
    asking === "reset"
      ? "Every contact, event, email, template, segment, campaign and workflow of the project is deleted. The project, its members, keys, settings and sending domains stay."
      : "The project and everything in it are deleted, for every member. Its API keys stop working.";
  return (
    <section aria-labelledby="settings-danger" className="danger-zone">
      <h2 id="settings-danger">Reset or delete the project</h2>
      <p>Only owners see this. Neither can be undone.</p>
      <div className="inline">
        <button type="button" className="danger" onClick={() => ask("reset")}>
          Reset project
        </button>
        <button type="button" className="danger" onClick={() => ask("delete")}>
          Delete project
        </button>
      </div>
      {done && <p role="status">{done}</p>}
      <Alert message={error} />
      <ConfirmDialog
        danger
        open={asking !== null}
        title={asking === "reset" ? `Reset ${project.name}?` : `Delete ${project.name}?`}
        confirmLabel={asking === "reset" ? "Reset the project" : "Delete the project"}
        confirmDisabled={typed !== project.name}
        onConfirm={() => void act()}
        onCancel={() => setAsking(null)}
      >
        <p>{what} This cannot be undone.</p>
        <TextField
          label={`Type the project's name (${project.name}) to confirm`}
          value={typed}
          onChange={(e) => setTyped(e.target.value)}
          autoComplete="off"
        />
      </ConfirmDialog>
    </section>
  );
}
