import { useMemo, useState, type FormEvent } from "react";
import { api, errorMessage } from "../../api/client";
import { Alert, Field } from "../parts";
import { ConfirmDialog } from "../Confirm";
import type { Campaign } from "./draft";
import { browserTimeZone, formatIn, timeZones, utcToZoned, wallAsUtc, zonedToUtc } from "./time";

interface SendingProps {
  campaign: Campaign;
  /** Saves the form first when it has changes; false when the save failed (its error shown). */
  save: () => Promise<boolean>;
  onChanged: (c: Campaign) => void;
}

/** A test send to one address. */
export function TestSend({ campaign, save }: Omit<SendingProps, "onChanged">) {
  const [email, setEmail] = useState("");
  const [done, setDone] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  async function submit(e: FormEvent) {
    e.preventDefault();
    setDone(null);
    setError(null);
    if (!(await save())) return;
    const { data, error } = await api.POST("/campaigns/{id}/test", { params: { path: { id: campaign.id } }, body: { email } });
    if (error) setError(errorMessage(error));
    else setDone(`A test (its subject marked [Test]) is on its way to ${data.to}.`);
  }
  return (
    <section aria-labelledby="test-title" className="card">
      <h2 id="test-title">Test send</h2>
      <form onSubmit={(e) => void submit(e)} className="inline">
        <Field
          label="Send a test to"
          type="email"
          value={email}
          onChange={(e) => setEmail(e.target.value)}
          required
          hint="A contact's address renders with that contact's data."
        />
        <button type="submit">Send a test</button>
      </form>
      <Alert message={error} />
      {done && <p role="status">{done}</p>}
    </section>
  );
}

/** Schedule the campaign (in a time zone, or at each contact's own time) or send it now. */
export function ScheduleAndSend({ campaign, save, onChanged }: SendingProps) {
  const [zone, setZone] = useState(browserTimeZone);
  // The browser's own zone is offered even under a name its list leaves out ("Etc/UTC").
  const zones = useMemo(() => {
    const all = timeZones();
    return all.includes(zone) ? all : [zone, ...all];
  }, [zone]);
  const [local, setLocal] = useState(() => {
    if (campaign.localScheduledFor) return new Date(campaign.localScheduledFor).toISOString().slice(0, 16);
    return campaign.scheduledAt ? utcToZoned(new Date(campaign.scheduledAt), browserTimeZone()) : "";
  });
  const [inContactZone, setInContactZone] = useState(!!campaign.localScheduledFor);
  const [error, setError] = useState<string | null>(null);
  const [confirm, setConfirm] = useState<number | null>(null);

  const at = inContactZone ? wallAsUtc(local) : zonedToUtc(local, zone);
  const starts = at && inContactZone ? new Date(at.getTime() - 14 * 3_600_000) : at;
  const scheduled = campaign.status === "SCHEDULED";

  async function schedule(e: FormEvent) {
    e.preventDefault();
    setError(null);
    if (!at) return setError("Choose a date and time.");
    if (!(await save())) return;
    const { data, error } = await api.POST("/campaigns/{id}/send", {
      params: { path: { id: campaign.id } },
      body: { scheduledFor: at.toISOString(), inContactTimeZone: inContactZone || null },
    });
    if (error) setError(errorMessage(error));
    else onChanged(data);
  }

  async function askSendNow() {
    setError(null);
    if (!(await save())) return;
    const { data, error } = await api.POST("/campaigns/{id}/audience", { params: { path: { id: campaign.id } } });
    if (error) setError(errorMessage(error));
    else setConfirm(data.recipients);
  }

  async function sendNow() {
    setConfirm(null);
    const { data, error } = await api.POST("/campaigns/{id}/send", { params: { path: { id: campaign.id } }, body: {} });
    if (error) setError(errorMessage(error));
    else onChanged(data);
  }

  return (
    <section aria-labelledby="send-title" className="card">
      <h2 id="send-title">Schedule or send</h2>
      {scheduled && campaign.scheduledAt && (
        <p>
          {campaign.localScheduledFor
            ? `Scheduled at ${formatIn(campaign.localScheduledFor, "UTC").replace(" UTC", "")} in each contact's own time zone; sending starts ${formatIn(campaign.scheduledAt, "UTC")}.`
            : `Scheduled to start ${formatIn(campaign.scheduledAt, zone)}, that is ${formatIn(campaign.scheduledAt, "UTC")}.`}{" "}
          Schedule again to move it, or send it now.
        </p>
      )}
      <form onSubmit={(e) => void schedule(e)}>
        <div className="inline">
          <Field
            label="Date and time"
            type="datetime-local"
            value={local}
            onChange={(e) => setLocal(e.target.value)}
            required
            aria-describedby="schedule-means"
          />
          <div className="field">
            <label htmlFor="schedule-zone">Time zone</label>
            <select id="schedule-zone" value={zone} disabled={inContactZone} onChange={(e) => setZone(e.target.value)}>
              {zones.map((z) => (
                <option key={z} value={z}>
                  {z.replaceAll("_", " ")}
                </option>
              ))}
            </select>
          </div>
        </div>
        <label>
          <input type="checkbox" checked={inContactZone} onChange={(e) => setInContactZone(e.target.checked)} /> At this
          date and time in each contact's own time zone
        </label>
        <p id="schedule-means" className="hint" aria-live="polite">
          {!at
            ? "Choose a date and time."
            : inContactZone
              ? `Each contact gets it at ${local.replace("T", " ")} in its own time zone (the IANA name in its data.timezone, such as Europe/Paris; UTC for a contact without one). Sending starts at ${formatIn(starts!, "UTC")}, when that time first comes anywhere on Earth, and each email waits for its contact's time. Not possible with an A/B test.`
              : `That is ${formatIn(at, "UTC")}.`}
        </p>
        <div className="actions">
          <button type="submit">{scheduled ? "Move the schedule" : "Schedule"}</button>
          <button type="button" onClick={() => void askSendNow()}>
            Send now…
          </button>
        </div>
      </form>
      <Alert message={error} />
      {confirm !== null && (
        <ConfirmDialog
          title={`Send “${campaign.name}” now?`}
          confirmLabel={confirm === 0 ? "Send it anyway" : `Send to ${confirm.toLocaleString()} ${confirm === 1 ? "contact" : "contacts"}`}
          cancelLabel="Not now"
          onConfirm={() => void sendNow()}
          onCancel={() => setConfirm(null)}
        >
          <p>
            {confirm.toLocaleString()} {confirm === 1 ? "contact" : "contacts"} will receive it. Sending starts at once; you
            can pause or cancel it while it runs, but what is sent stays sent.
          </p>
        </ConfirmDialog>
      )}
    </section>
  );
}
