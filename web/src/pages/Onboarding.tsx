import { useEffect, useState } from "react";
import { api, errorMessage, type Schemas } from "../api/client";
import { useSession } from "../session";
import { Alert } from "./parts";

type SetupState = Schemas["SetupStateBody"];

/** The onboarding steps in the order a new project takes them, as setup-state reports them. */
export const STEPS: { key: Exclude<keyof SetupState, "complete">; label: string; how: string }[] = [
  { key: "domainAdded", label: "Add a sending domain", how: "POST /domains with your domain's name." },
  { key: "domainVerified", label: "Publish its DNS records and verify it", how: "Publish the records GET /domains/:id lists, then GET /domains/:id/verify." },
  { key: "contactAdded", label: "Add a contact", how: "POST /contacts, or import a CSV file." },
  { key: "templateCreated", label: "Create a template", how: "POST /templates." },
  { key: "emailSent", label: "Send a first email", how: "POST /v1/send with your secret key." },
  { key: "workflowEnabled", label: "Enable a workflow", how: "POST /workflows, then enable it." },
  { key: "campaignSent", label: "Send a campaign", how: "POST /campaigns, then send it." },
];

/** Each step checked off as the project does it. */
export function Onboarding() {
  const { project } = useSession();
  const [state, setState] = useState<SetupState | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    if (!project) return;
    let live = true;
    void api
      .GET("/projects/{id}/setup-state", { params: { path: { id: project.id } } })
      .then(({ data, error }) => {
        if (!live) return;
        setState(data ?? null);
        setError(error ? errorMessage(error) : null);
      });
    return () => {
      live = false;
    };
  }, [project]);

  const done = state ? STEPS.filter((s) => state[s.key]).length : 0;
  return (
    <section>
      <h1>Get started with {project?.name}</h1>
      <Alert message={error} />
      {state && (
        <>
          <p role="status">
            {state.complete ? "Every step is done." : `${done} of ${STEPS.length} steps done.`}
          </p>
          <ol className="steps">
            {STEPS.map((step) => (
              <li key={step.key} className={state[step.key] ? "done" : undefined}>
                <span className="mark" aria-hidden="true">{state[step.key] ? "✓" : "○"}</span>
                <span>
                  <strong>{step.label}</strong>{" "}
                  <span className="visually-hidden">{state[step.key] ? "(done)" : "(to do)"}</span>
                  <br />
                  <small>{step.how}</small>
                </span>
              </li>
            ))}
          </ol>
        </>
      )}
    </section>
  );
}
