// What a contacts job (an import or a bulk action) reports in its `result`:
// `{ total, succeeded, failed, created?, updated?, errors: [{ row?|contactId?, email?, error }] }`.

export interface JobRowError {
  /** The CSV row (1 is the header) of an import's error. */
  row?: number;
  /** The contact of a bulk action's error. */
  contactId?: string;
  email?: string;
  error: string;
}

export interface JobResult {
  total: number;
  succeeded: number;
  failed: number;
  created?: number;
  updated?: number;
  errors: JobRowError[];
}

function count(v: unknown): number | undefined {
  return typeof v === "number" && Number.isFinite(v) ? v : undefined;
}

/** The job's result read defensively (it is untyped in the API): null when there is none yet. */
export function jobResult(result: unknown): JobResult | null {
  if (!result || typeof result !== "object") return null;
  const r = result as Record<string, unknown>;
  const errors = Array.isArray(r.errors)
    ? r.errors.flatMap((e): JobRowError[] => {
        if (!e || typeof e !== "object") return [];
        const x = e as Record<string, unknown>;
        return [
          {
            row: count(x.row),
            contactId: typeof x.contactId === "string" ? x.contactId : undefined,
            email: typeof x.email === "string" ? x.email : undefined,
            error: typeof x.error === "string" ? x.error : JSON.stringify(x.error ?? e),
          },
        ];
      })
    : [];
  return {
    total: count(r.total) ?? 0,
    succeeded: count(r.succeeded) ?? 0,
    failed: count(r.failed) ?? 0,
    created: count(r.created),
    updated: count(r.updated),
    errors,
  };
}

/** One line saying what a job did so far, in plain words. */
export function jobSummary(result: JobResult | null, finished: boolean): string {
  if (!result) return finished ? "Done." : "Waiting to start…";
  const parts = [`${result.succeeded.toLocaleString()} of ${result.total.toLocaleString()} done`];
  if (result.created !== undefined) parts.push(`${result.created.toLocaleString()} added`);
  if (result.updated !== undefined) parts.push(`${result.updated.toLocaleString()} updated`);
  parts.push(`${result.failed.toLocaleString()} failed`);
  return parts.join(", ") + (finished ? "." : "…");
}
