import { useState, type FormEvent } from "react";
import { Link, useNavigate } from "react-router";
import { api, errorMessage } from "../../api/client";
import { useSession } from "../../session";
import { useRequest } from "../loading";
import { Alert, Field } from "../parts";
import { domainStatus } from "./words";
import { SendingHealth } from "./SendingHealth";

/** The project's sending domains, a form to add one, and the project's sending health. */
export function Domains() {
  const { project } = useSession();
  const navigate = useNavigate();
  const list = useRequest(
    (signal) => (project ? api.GET("/domains/project/{projectId}", { params: { path: { projectId: project.id } }, signal }) : null),
    [project],
  );
  const domains = list.data;
  // Why adding a domain failed (the list's own error shows when there is none).
  const [error, setError] = useState<string | null>(null);
  const [adding, setAdding] = useState(false);

  async function add(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    setAdding(true);
    const { data, error } = await api.POST("/domains", {
      body: {
        domain: String(form.get("domain")).trim(),
        allowSubdomains: form.get("allowSubdomains") === "on",
        dkimEd25519: form.get("dkimEd25519") === "on",
      },
    });
    setAdding(false);
    if (error) return setError(errorMessage(error));
    navigate(`/domains/${data.id}`);
  }

  return (
    <section>
      <h1>Domains</h1>
      <p>Mail is sent from addresses on a domain once its DNS records are published and verified.</p>
      <Alert message={error ?? list.error} />
      {domains && domains.length === 0 && <p>No domain yet.</p>}
      {domains && domains.length > 0 && (
        <div className="scroll" tabIndex={0} role="region" aria-label="Domains table">
          <table>
            <caption className="visually-hidden">Sending domains</caption>
            <thead>
              <tr>
                <th scope="col">Domain</th>
                <th scope="col">Status</th>
                <th scope="col">Added</th>
              </tr>
            </thead>
            <tbody>
              {domains.map((d) => (
                <tr key={d.id}>
                  <td>
                    <Link to={`/domains/${d.id}`}>{d.domain}</Link>
                  </td>
                  <td>{domainStatus(d.status)}</td>
                  <td>{new Date(d.createdAt).toLocaleDateString()}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <h2>Add a domain</h2>
      <form onSubmit={(e) => void add(e)}>
        <Field label="Domain name" name="domain" required placeholder="mail.example.com" hint="The part after the @ of the addresses you send from." />
        <div className="check">
          <input type="checkbox" id="domain-subdomains" name="allowSubdomains" />
          <label htmlFor="domain-subdomains">Let addresses on its subdomains send too</label>
        </div>
        <div className="check">
          <input type="checkbox" id="domain-ed25519" name="dkimEd25519" />
          <label htmlFor="domain-ed25519">Sign with an Ed25519 key as well (one more record to publish)</label>
        </div>
        <button type="submit" disabled={adding}>
          Add domain
        </button>
      </form>
      {project && <SendingHealth projectId={project.id} />}
    </section>
  );
}
