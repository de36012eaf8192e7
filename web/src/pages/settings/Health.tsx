// The project's sending health (GET /users/@me/projects/{id}/security): bounce and complaint
// rates against the thresholds that stop sending, and the latest suspensions.
import { useEffect, useState } from "react";
import { api, errorMessage, type Schemas } from "../../api/client";
import { Alert } from "../parts";

const percent = (rate: number) => `${(rate * 100).toFixed(2)} %`;

export function Health({ projectId }: { projectId: string }) {
  const [health, setHealth] = useState<Schemas["SecurityBody"] | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    let live = true;
    void api.GET("/users/@me/projects/{id}/security", { params: { path: { id: projectId } } }).then(({ data, error }) => {
      if (!live) return;
      if (error) return setError(errorMessage(error));
      setHealth(data);
    });
    return () => {
      live = false;
    };
  }, [projectId]);

  return (
    <section aria-labelledby="settings-health">
      <h2 id="settings-health">Sending health</h2>
      <Alert message={error} />
      {health && (
        <>
          <p role="status">
            {health.suspended
              ? "Sending is suspended: too many emails bounced or were reported as spam. Whoever runs Herald can lift it."
              : "Sending is on."}
          </p>
          <table>
            <caption className="visually-hidden">Bounces and spam reports over the last {health.windowDays} days</caption>
            <thead>
              <tr>
                <th scope="col">Over the last {health.windowDays} days</th>
                <th scope="col">Count</th>
                <th scope="col">Rate</th>
                <th scope="col">Sending stops at</th>
              </tr>
            </thead>
            <tbody>
              <tr>
                <th scope="row">Emails sent</th>
                <td>{health.sent}</td>
                <td></td>
                <td></td>
              </tr>
              <tr>
                <th scope="row">Bounced</th>
                <td>{health.bounced}</td>
                <td>{percent(health.bounceRate)}</td>
                <td>{percent(health.thresholds.bounceRate)}</td>
              </tr>
              <tr>
                <th scope="row">Reported as spam</th>
                <td>{health.complained}</td>
                <td>{percent(health.complaintRate)}</td>
                <td>{percent(health.thresholds.complaintRate)}</td>
              </tr>
            </tbody>
          </table>
          <p className="hint">Rates count once at least {health.thresholds.minVolume} emails were sent in the window.</p>
          {health.suspensions.length > 0 && (
            <>
              <h3>Suspensions</h3>
              <ul className="list">
                {health.suspensions.map((s) => (
                  <li key={s.id}>
                    {new Date(s.createdAt).toLocaleString()}: {s.reason}{" "}
                    {s.liftedAt ? `(lifted ${new Date(s.liftedAt).toLocaleString()})` : "(in force)"}
                  </li>
                ))}
              </ul>
            </>
          )}
        </>
      )}
    </section>
  );
}
