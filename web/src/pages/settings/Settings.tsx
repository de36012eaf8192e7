// /app/settings: the current project's settings, API keys, sending health, reset and deletion.
import { useSession } from "../../session";
import { SendingHealth } from "../domains/SendingHealth";
import { Danger } from "./Danger";
import { General } from "./General";
import { Keys } from "./Keys";

export function Settings() {
  const { project } = useSession();
  if (!project) return null;
  return (
    <section className="settings">
      <h1>Project settings</h1>
      <p>
        Settings of <strong>{project.name}</strong>, where you are {project.role.toLowerCase()}.
      </p>
      <General key={project.id} project={project} />
      <Keys key={`keys-${project.id}`} project={project} />
      <SendingHealth projectId={project.id} />
      <Danger key={`danger-${project.id}`} project={project} />
    </section>
  );
}
