// Form controls of the settings and members pages: fields that show the API's error for them,
// and a copy button.
import { useId, useState, type ReactNode, type SelectHTMLAttributes, type InputHTMLAttributes } from "react";

type Common = { label: string; hint?: ReactNode; error?: string };

function described(id: string, hint: unknown, error: unknown) {
  const ids = [hint ? `${id}-hint` : "", error ? `${id}-error` : ""].filter(Boolean).join(" ");
  return ids || undefined;
}

function Notes({ id, hint, error }: { id: string; hint?: ReactNode; error?: string }) {
  return (
    <>
      {hint && (
        <small id={`${id}-hint`} className="hint">
          {hint}
        </small>
      )}
      {error && (
        <small id={`${id}-error`} className="error">
          {error}
        </small>
      )}
    </>
  );
}

/** A labelled input with its hint and the API's error for it. */
export function TextField({ label, hint, error, ...input }: Common & InputHTMLAttributes<HTMLInputElement>) {
  const id = useId();
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      <input id={id} aria-invalid={error ? true : undefined} aria-describedby={described(id, hint, error)} {...input} />
      <Notes id={id} hint={hint} error={error} />
    </div>
  );
}

/** A labelled select with its hint and the API's error for it. */
export function SelectField({ label, hint, error, children, ...select }: Common & SelectHTMLAttributes<HTMLSelectElement>) {
  const id = useId();
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      <select id={id} aria-invalid={error ? true : undefined} aria-describedby={described(id, hint, error)} {...select}>
        {children}
      </select>
      <Notes id={id} hint={hint} error={error} />
    </div>
  );
}

/** A checkbox with its label beside it, its hint and the API's error for it. */
export function CheckField({ label, hint, error, ...input }: Common & InputHTMLAttributes<HTMLInputElement>) {
  const id = useId();
  return (
    <div className="field check">
      <span>
        <input id={id} type="checkbox" aria-describedby={described(id, hint, error)} {...input} />{" "}
        <label htmlFor={id}>{label}</label>
      </span>
      <Notes id={id} hint={hint} error={error} />
    </div>
  );
}

/** Copies `value` to the clipboard and says so. */
export function CopyButton({ value, label }: { value: string; label: string }) {
  const [said, setSaid] = useState("");
  async function copy() {
    try {
      await navigator.clipboard.writeText(value);
      setSaid("Copied.");
    } catch {
      setSaid("Could not copy: select the text and copy it yourself.");
    }
  }
  return (
    <>
      <button type="button" onClick={() => void copy()}>
        {label}
      </button>{" "}
      <span role="status">{said}</span>
    </>
  );
}
