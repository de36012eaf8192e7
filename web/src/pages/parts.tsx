import { useId, type InputHTMLAttributes, type ReactNode } from "react";
import { Link } from "react-router";

type FieldProps = InputHTMLAttributes<HTMLInputElement> & { label: string; hint?: string };

/** A labelled input, with its hint read out with it. */
export function Field({ label, hint, ...input }: FieldProps) {
  const id = useId();
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      <input id={id} aria-describedby={hint ? `${id}-hint` : undefined} {...input} />
      {hint && (
        <small id={`${id}-hint`} className="hint">
          {hint}
        </small>
      )}
    </div>
  );
}

/** An error said at once to screen readers; nothing when there is none. */
export function Alert({ message }: { message: string | null }) {
  return message ? (
    <p role="alert" className="error">
      {message}
    </p>
  ) : null;
}

/**
 * A chart with its caption (a title, and a summary in words if any) and its text alternative:
 * the drawing is hidden from screen readers, the table after it says the same; with `details`,
 * the table is folded under that summary.
 */
export function ChartWithTable({
  title,
  summary,
  chart,
  table,
  details,
}: {
  title: ReactNode;
  summary?: string;
  chart: ReactNode;
  table: ReactNode;
  details?: string;
}) {
  return (
    <figure className="chart">
      <figcaption>
        {summary ? (
          <>
            <strong>{title}</strong>
            <span className="hint"> {summary}</span>
          </>
        ) : (
          title
        )}
      </figcaption>
      <div className="chart-drawing" aria-hidden="true">
        {chart}
      </div>
      {details ? (
        <details>
          <summary>{details}</summary>
          {table}
        </details>
      ) : (
        table
      )}
    </figure>
  );
}

/** An id drawn short: its start and its last characters (ids share their time-ordered start, the
 * end tells them apart), "cnt_019a…9c1d"; a short id as it is. */
export function shortId(id: string): string {
  return id.length > 14 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id;
}

/**
 * A link to a resource named by its id, drawn short (shortId); screen readers hear the whole id
 * after `what` ("Contact"), and a pointer's title shows it.
 */
export function IdLink({ to, id, what }: { to: string; id: string; what?: string }) {
  return (
    <Link to={to} title={what ? `${what} ${id}` : id} className="short-id">
      <span aria-hidden="true">{shortId(id)}</span>
      <span className="visually-hidden">{what ? `${what} ${id}` : id}</span>
    </Link>
  );
}
