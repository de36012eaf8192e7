import { useEffect, useState } from "react";
import { Link, useNavigate, useParams } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { Alert } from "../parts";
import { checkSummary, domainStatus, recordStatus } from "./words";

type Domain = Schemas["DomainBody"];

/** A domain: the DNS records to publish with copy buttons and their live status, "Verify now", delete. */
export function DomainPage() {
  const { id = "" } = useParams();
  const { project } = useSession();
  const navigate = useNavigate();
  const [domain, setDomain] = useState<Domain | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [checked, setChecked] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [copied, setCopied] = useState<string | null>(null);
  const [confirming, setConfirming] = useState(false);

  useEffect(() => {
    if (!project) return;
    let live = true;
    void api.GET("/domains/{id}", { params: { path: { id } } }).then(({ data, error }) => {
      if (!live) return;
      setDomain(data ?? null);
      setError(error ? errorMessage(error) : null);
    });
    return () => {
      live = false;
    };
  }, [project, id]);

  async function verify() {
    setBusy(true);
    setChecked(null);
    const { data, error } = await api.GET("/domains/{id}/verify", { params: { path: { id } } });
    setBusy(false);
    if (error) return setError(errorMessage(error));
    setError(null);
    setDomain(data);
    setChecked(`Checked at ${new Date().toLocaleTimeString()}. ${checkSummary(data)}`);
  }

  async function copy(label: string, value: string) {
    try {
      await navigator.clipboard.writeText(value);
      setCopied(`Copied the value of ${label}.`);
    } catch {
      setCopied(`Could not copy: select the value of ${label} and copy it by hand.`);
    }
  }

  async function remove() {
    const { error } = await api.DELETE("/domains/{id}", { params: { path: { id } } });
    if (error) return setError(errorMessage(error));
    navigate("/domains");
  }

  return (
    <section>
      <p>
        <Link to="/domains">Back to domains</Link>
      </p>
      <Alert message={error} />
      {domain && (
        <>
          <h1>{domain.domain}</h1>
          <dl className="facts">
            <dt>Status</dt>
            <dd>{domainStatus(domain.status)}</dd>
            {domain.failureReason && (
              <>
                <dt>Why</dt>
                <dd>{domain.failureReason}</dd>
              </>
            )}
            <dt>Added</dt>
            <dd>{new Date(domain.createdAt).toLocaleString()}</dd>
            {domain.verifiedAt && (
              <>
                <dt>Verified</dt>
                <dd>{new Date(domain.verifiedAt).toLocaleString()}</dd>
              </>
            )}
            <dt>Subdomains may send</dt>
            <dd>{domain.allowSubdomains ? "Yes" : "No"}</dd>
          </dl>
          <h2>DNS records to publish</h2>
          <p>
            Add these records at your DNS provider, then choose “Verify now”. Required records are needed to send;
            recommended ones improve delivery.
          </p>
          <div className="scroll" tabIndex={0} role="region" aria-label="DNS records table">
            <table className="records">
              <caption className="visually-hidden">DNS records of {domain.domain}</caption>
              <thead>
                <tr>
                  <th scope="col">Type</th>
                  <th scope="col">Name</th>
                  <th scope="col">Value</th>
                  <th scope="col">Needed</th>
                  <th scope="col">Status</th>
                </tr>
              </thead>
              <tbody>
                {domain.records.map((r) => {
                  const label = `the ${r.type} record at ${r.name}`;
                  return (
                    <tr key={`${r.type} ${r.name} ${r.value}`}>
                      <td>{r.type}</td>
                      <td>
                        <code>{r.name}</code>
                      </td>
                      <td>
                        <code className="value">{r.value}</code>
                        <button type="button" className="small" aria-label={`Copy value of ${r.type} record ${r.name}`} onClick={() => void copy(label, r.value)}>
                          Copy
                        </button>
                      </td>
                      <td>{r.required ? "Required" : "Recommended"}</td>
                      <td>{recordStatus(r)}</td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          </div>
          <p role="status">{copied}</p>
          <button type="button" onClick={() => void verify()} disabled={busy}>
            {busy ? "Checking…" : "Verify now"}
          </button>
          <p role="status">{checked}</p>
          <h2>Delete</h2>
          {confirming ? (
            <div className="card" role="group" aria-label="Confirm deletion">
              <p>Delete {domain.domain}? Mail can no longer be sent from it and its key is deleted.</p>
              <button type="button" onClick={() => void remove()}>
                Yes, delete {domain.domain}
              </button>{" "}
              <button type="button" className="secondary" onClick={() => setConfirming(false)}>
                Keep it
              </button>
            </div>
          ) : (
            <button type="button" className="secondary" onClick={() => setConfirming(true)}>
              Delete domain
            </button>
          )}
        </>
      )}
    </section>
  );
}
