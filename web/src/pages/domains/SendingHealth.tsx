import { useId } from "react";
import { api } from "../../api/client";
import { useRequest } from "../loading";
import { Alert } from "../parts";
import { percent } from "./words";

/** A project's sending health (`GET /users/@me/projects/{id}/security`): bounce and complaint
 * rates against the thresholds that suspend sending, and the suspensions. Shown on the domains
 * and the settings pages. */
export function SendingHealth({ projectId }: { projectId: string }) {
  const titleId = useId();
  const { data: health, error } = useRequest(
    (signal) => api.GET("/users/@me/projects/{id}/security", { params: { path: { id: projectId } }, signal }),
    [projectId],
  );

  return (
    <section aria-labelledby={titleId}>
      <h2 id={titleId}>Sending health</h2>
      <Alert message={error} />
      {health && (
        <>
          <p role="status">
            {health.suspended
              ? "Sending is suspended: no email of this project goes out until an operator lifts the suspension."
              : "Sending is on."}
          </p>
          <div className="scroll" tabIndex={0} role="region" aria-label="Suspensions table">
            <table>
              <caption>Over the last {health.windowDays} days ({health.sent.toLocaleString()} emails sent)</caption>
              <thead>
                <tr>
                  <th scope="col">Measure</th>
                  <th scope="col">Emails</th>
                  <th scope="col">Rate</th>
                  <th scope="col">Sending stops at</th>
                </tr>
              </thead>
              <tbody>
                <tr>
                  <th scope="row">Hard bounces</th>
                  <td>{health.bounced.toLocaleString()}</td>
                  <td>{percent(health.bounceRate)}</td>
                  <td>{percent(health.thresholds.bounceRate)}</td>
                </tr>
                <tr>
                  <th scope="row">Spam complaints</th>
                  <td>{health.complained.toLocaleString()}</td>
                  <td>{percent(health.complaintRate)}</td>
                  <td>{percent(health.thresholds.complaintRate)}</td>
                </tr>
              </tbody>
            </table>
          </div>
          <p className="hint">Rates count once at least {health.thresholds.minVolume.toLocaleString()} emails were sent in the period.</p>
          <h3>Suspensions</h3>
          {health.suspensions.length === 0 ? (
            <p>Sending was never suspended.</p>
          ) : (
            <ul className="list">
              {health.suspensions.map((s) => (
                <li key={s.id}>
                  <time dateTime={s.createdAt}>{new Date(s.createdAt).toLocaleString()}</time>: {s.reason}{" "}
                  {s.liftedAt ? `(lifted ${new Date(s.liftedAt).toLocaleString()})` : "(still in force)"}
                </li>
              ))}
            </ul>
          )}
        </>
      )}
    </section>
  );
}
