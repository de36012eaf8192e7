import { useEffect, useId, useState } from "react";
import { api, errorMessage, type Schemas } from "../../api/client";
import { Alert } from "../parts";
import { jobResult, jobSummary } from "./jobResult";

type JobKind = "import" | "bulk";
const POLL_MS = 700;

function fetchJob(kind: JobKind, jobId: string) {
  return kind === "import"
    ? api.GET("/contacts/import/{jobId}", { params: { path: { jobId } } })
    : api.GET("/contacts/bulk/{jobId}", { params: { path: { jobId } } });
}

export function finished(job: Schemas["JobStatus"] | null): boolean {
  return job?.state === "completed" || job?.state === "failed";
}

/** A queued job, polled until it finishes; `onDone` is called once, when it has. */
export function useJob(kind: JobKind, jobId: string | null, onDone?: (job: Schemas["JobStatus"]) => void) {
  const [job, setJob] = useState<Schemas["JobStatus"] | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    if (!jobId) return;
    let live = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const poll = async () => {
      const { data, error } = await fetchJob(kind, jobId);
      if (!live) return;
      setError(error ? errorMessage(error) : null);
      if (data) setJob(data);
      if (data && finished(data)) onDone?.(data);
      else if (!error) timer = setTimeout(() => void poll(), POLL_MS);
    };
    void poll();
    return () => {
      live = false;
      clearTimeout(timer);
    };
    // onDone is read when the job finishes; a new function each render must not restart polling.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [kind, jobId]);

  return { job: jobId && job?.id === jobId ? job : null, error };
}

/** A job's progress bar (with its label), what it did so far and the rows or contacts that failed. */
export function JobProgress({ title, job, error }: { title: string; job: Schemas["JobStatus"] | null; error: string | null }) {
  const id = useId();
  const done = finished(job);
  const result = jobResult(job?.result);
  return (
    <div className="job">
      <label htmlFor={id}>{title}</label>
      <progress id={id} max={100} value={job?.progress ?? 0}>
        {job?.progress ?? 0}%
      </progress>
      <p role="status">
        {job?.state === "failed"
          ? `Failed: ${job.error ?? "the job could not finish"}.`
          : `${done ? "Finished" : `${job?.progress ?? 0}%`}: ${jobSummary(result, done)}`}
      </p>
      <Alert message={error} />
      {result && result.errors.length > 0 && (
        <div className="scroll" tabIndex={0} role="region" aria-label="Rows that failed">
          <table>
            <caption>Rows that failed</caption>
            <thead>
              <tr>
                <th scope="col">{result.errors.some((e) => e.row !== undefined) ? "Row" : "Contact"}</th>
                <th scope="col">Email</th>
                <th scope="col">Error</th>
              </tr>
            </thead>
            <tbody>
              {result.errors.map((e, i) => (
                <tr key={i}>
                  <td>{e.row ?? e.contactId ?? ""}</td>
                  <td>{e.email ?? ""}</td>
                  <td>{e.error}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}
