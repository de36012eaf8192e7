import { useState } from "react";
import { api, errorMessage } from "../../api/client";
import { Alert } from "../parts";
import { Confirm } from "../Confirm";
import { JobProgress, useJob } from "./Job";

type Action = "subscribe" | "unsubscribe" | "delete";
const PATHS = {
  subscribe: "/contacts/bulk-subscribe",
  unsubscribe: "/contacts/bulk-unsubscribe",
  delete: "/contacts/bulk-delete",
} as const;
const TITLES = { subscribe: "Subscribing", unsubscribe: "Unsubscribing", delete: "Deleting" };

/** Actions on the selected contacts: each queued as a job and followed until it finishes;
 * then `onDone` reloads the list. */
export function BulkActions({ selected, onDone }: { selected: string[]; onDone: () => void }) {
  const [running, setRunning] = useState<{ action: Action; jobId: string } | null>(null);
  const [error, setError] = useState<string | null>(null);
  const { job, error: pollError } = useJob("bulk", running?.jobId ?? null, onDone);
  const n = selected.length;
  const some = `${n} selected ${n === 1 ? "contact" : "contacts"}`;

  async function start(action: Action) {
    const { data, error } = await api.POST(PATHS[action], { body: { contactIds: selected } });
    setError(error ? errorMessage(error) : null);
    if (data) setRunning({ action, jobId: data.jobId });
  }

  return (
    <div className="bulk" role="group" aria-label="Actions on the selected contacts">
      <p>{n === 0 ? "Select contacts to act on several at once." : `${some}.`}</p>
      <div className="actions">
        <button type="button" className="secondary" disabled={n === 0} onClick={() => void start("subscribe")}>
          Subscribe selected
        </button>
        <button type="button" className="secondary" disabled={n === 0} onClick={() => void start("unsubscribe")}>
          Unsubscribe selected
        </button>
        <Confirm
          label="Delete selected"
          disabled={n === 0}
          question={`Delete the ${some}, with their data and events? This cannot be undone.`}
          confirmLabel={`Yes, delete ${n === 1 ? "it" : `all ${n}`}`}
          onConfirm={() => start("delete")}
        />
      </div>
      <Alert message={error} />
      {running && <JobProgress title={`${TITLES[running.action]} contacts`} job={job} error={pollError} />}
    </div>
  );
}
