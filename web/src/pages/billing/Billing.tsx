import { useCallback, useEffect, useState, type FormEvent } from "react";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { Alert, Field } from "../parts";
import { money, parseCap, usageWords, usedPercent } from "./usage";

const CATEGORIES = [
  ["emails", "Emails queued"],
  ["contacts", "Contacts created"],
  ["events", "Events tracked"],
] as const;

/** This period's consumption as bars, the caps, invoices, checkout and the billing portal. */
export function Billing() {
  const { project } = useSession();
  const [usage, setUsage] = useState<Schemas["ConsumptionBody"] | null>(null);
  const [limits, setLimits] = useState<Schemas["BillingLimitsBody"] | null>(null);
  const [invoices, setInvoices] = useState<Schemas["InvoiceBody"][] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [done, setDone] = useState<string | null>(null);
  const [version, setVersion] = useState(0);
  const refresh = useCallback(() => setVersion((v) => v + 1), []);

  useEffect(() => {
    if (!project) return;
    let live = true;
    const path = { params: { path: { id: project.id } } };
    void Promise.all([
      api.GET("/users/@me/projects/{id}/billing-consumption", path),
      api.GET("/users/@me/projects/{id}/billing-limits", path),
      api.GET("/users/@me/projects/{id}/billing-invoices", path),
    ]).then(([u, l, i]) => {
      if (!live) return;
      setUsage(u.data ?? null);
      setLimits(l.data ?? null);
      setInvoices(i.data?.data ?? null);
      const failed = u.error ?? l.error ?? i.error;
      setError(failed ? errorMessage(failed) : null);
    });
    return () => {
      live = false;
    };
  }, [project, version]);

  async function saveLimits(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    if (!project) return;
    const f = new FormData(e.currentTarget);
    const body: Schemas["BillingLimitsBody"] = {};
    for (const [key, label] of CATEGORIES) {
      const cap = parseCap(String(f.get(key)));
      if (cap === "invalid") return setError(`${label}: enter a whole number, or leave it empty for no cap.`);
      body[key] = cap;
    }
    const { error } = await api.PUT("/users/@me/projects/{id}/billing-limits", { params: { path: { id: project.id } }, body });
    if (error) return setError(errorMessage(error));
    setError(null);
    setDone("Caps saved.");
    refresh();
  }

  async function checkout(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    if (!project) return;
    const plan = String(new FormData(e.currentTarget).get("plan")).trim();
    const { data, error } = await api.POST("/users/@me/projects/{id}/checkout", { params: { path: { id: project.id } }, body: { plan } });
    if (error) return setError(errorMessage(error));
    window.location.assign(data.url);
  }

  async function portal() {
    if (!project) return;
    const { data, error } = await api.POST("/users/@me/projects/{id}/billing-portal", { params: { path: { id: project.id } }, body: {} });
    if (error) return setError(errorMessage(error));
    window.location.assign(data.url);
  }

  return (
    <section>
      <h1>Billing</h1>
      <Alert message={error} />
      <p role="status">{done}</p>
      {usage && (
        <>
          {usage.billingEnabled ? (
            <p>
              Plan: {usage.plan ?? "none yet"}
              {usage.subscriptionStatus ? ` (subscription ${usage.subscriptionStatus.replace("_", " ")})` : ""}.
            </p>
          ) : (
            <p className="card">
              Billing is off in this deployment: there are no plans, payments or invoices. The caps below still limit what
              this project can do each month.
            </p>
          )}
          <h2>
            This period ({new Date(usage.periodStart).toLocaleDateString()} to {new Date(usage.periodEnd).toLocaleDateString()})
          </h2>
          <ul className="usage">
            {CATEGORIES.map(([key, label]) => {
              const u = usage[key];
              const pct = usedPercent(u);
              return (
                <li key={key}>
                  <span>
                    {label}: {usageWords(u)}
                  </span>
                  {pct !== null && (
                    <span className="bar" aria-hidden="true">
                      <span className={pct >= 90 ? "fill high" : "fill"} style={{ width: `${pct}%` }} />
                    </span>
                  )}
                </li>
              );
            })}
          </ul>
        </>
      )}
      {limits && (
        <>
          <h2>Caps</h2>
          <p>An operation past its cap is refused until the next period. Leave a field empty for no cap.</p>
          <form onSubmit={(e) => void saveLimits(e)} className="inline" key={JSON.stringify(limits)}>
            {CATEGORIES.map(([key, label]) => (
              <Field key={key} label={`${label} per month`} name={key} inputMode="numeric" defaultValue={limits[key] ?? ""} />
            ))}
            <button type="submit">Save caps</button>
          </form>
        </>
      )}
      {usage?.billingEnabled && (
        <>
          <h2>Plan and payment</h2>
          <form onSubmit={(e) => void checkout(e)} className="inline">
            <Field label="Plan" name="plan" required maxLength={64} hint="The plan's name, as your operator gave it." />
            <button type="submit">Go to checkout</button>
          </form>
          <p>
            <button type="button" onClick={() => void portal()}>
              Open the billing portal
            </button>
          </p>
        </>
      )}
      {invoices && (
        <>
          <h2>Invoices</h2>
          {invoices.length === 0 ? (
            <p>No invoice{usage?.billingEnabled ? " yet" : ": billing is off"}.</p>
          ) : (
            <div className="scroll" tabIndex={0} role="region" aria-label="Invoices table">
              <table>
                <caption className="visually-hidden">Invoices</caption>
                <thead>
                  <tr>
                    <th scope="col">Date</th>
                    <th scope="col">Amount</th>
                    <th scope="col">Status</th>
                    <th scope="col">Invoice</th>
                  </tr>
                </thead>
                <tbody>
                  {invoices.map((i) => (
                    <tr key={i.id}>
                      <td>{new Date(i.createdAt).toLocaleDateString()}</td>
                      <td>{money(i.amount, i.currency)}</td>
                      <td>{i.status}</td>
                      <td>{i.url ? <a href={i.url}>View invoice {i.id}</a> : i.id}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </>
      )}
    </section>
  );
}
