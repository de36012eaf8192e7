import { useState, type FormEvent } from "react";
import { api, errorMessage } from "../../api/client";
import { Alert } from "../parts";
import { JobProgress, useJob } from "./Job";

/** CSV import: the file is uploaded, then its job is polled with a progress bar until it
 * finishes; the rows that failed are listed. */
export function ImportContacts({ onDone }: { onDone: () => void }) {
  const [jobId, setJobId] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [sending, setSending] = useState(false);
  const { job, error: pollError } = useJob("import", jobId, onDone);

  async function upload(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const file = new FormData(e.currentTarget).get("file");
    if (!(file instanceof File) || file.size === 0) {
      setError("Choose a CSV file first.");
      return;
    }
    setSending(true);
    setJobId(null);
    const form = new FormData();
    form.append("file", file);
    const { data, error } = await api.POST("/contacts/import", {
      // The generated type says string (format binary); the body sent is this form.
      body: { file: "" },
      bodySerializer: () => form,
    });
    setSending(false);
    setError(error ? errorMessage(error) : null);
    if (data) setJobId(data.jobId);
  }

  return (
    <section aria-labelledby="import-title" className="card">
      <h2 id="import-title">Import contacts from a CSV file</h2>
      <p className="hint" id="import-hint">
        A header row with an <code>email</code> column; an optional <code>subscribed</code> column (true or false);
        every other column is stored as custom data. Existing contacts are updated. At most 5 MB.
      </p>
      <form onSubmit={(e) => void upload(e)} className="inline">
        <div className="field">
          <label htmlFor="import-file">CSV file</label>
          <input id="import-file" name="file" type="file" accept=".csv,text/csv" aria-describedby="import-hint" />
        </div>
        <button type="submit" disabled={sending}>
          Import
        </button>
      </form>
      <Alert message={error} />
      {jobId && <JobProgress title="Import progress" job={job} error={pollError} />}
    </section>
  );
}
