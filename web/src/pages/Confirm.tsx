import { useEffect, useId, useRef, useState } from "react";

interface ConfirmProps {
  /** The button that asks, e.g. "Delete contact". */
  label: string;
  /** What will happen, said before anything is done. */
  question: string;
  /** The button that does it, e.g. "Yes, delete". */
  confirmLabel: string;
  onConfirm: () => void | Promise<void>;
  disabled?: boolean;
}

/** A button that asks first: the question and a confirming button appear in place, with the
 * focus on the confirming button (Escape or "Cancel" goes back). */
export function Confirm({ label, question, confirmLabel, onConfirm, disabled }: ConfirmProps) {
  const [open, setOpen] = useState(false);
  const [busy, setBusy] = useState(false);
  const yes = useRef<HTMLButtonElement>(null);
  const ask = useRef<HTMLButtonElement>(null);
  const id = useId();

  useEffect(() => {
    if (open) yes.current?.focus();
  }, [open]);

  function close() {
    setOpen(false);
    // Back to the button that asked, once it is shown again.
    requestAnimationFrame(() => ask.current?.focus());
  }

  async function confirm() {
    setBusy(true);
    try {
      await onConfirm();
    } finally {
      setBusy(false);
      setOpen(false);
    }
  }

  if (!open) {
    return (
      <button type="button" ref={ask} className="danger" disabled={disabled} onClick={() => setOpen(true)}>
        {label}
      </button>
    );
  }
  return (
    <div
      role="group"
      aria-labelledby={id}
      className="ask-first"
      onKeyDown={(e) => {
        if (e.key === "Escape") close();
      }}
    >
      <p id={id}>{question}</p>
      <button type="button" ref={yes} className="danger" disabled={busy} onClick={() => void confirm()}>
        {confirmLabel}
      </button>
      <button type="button" className="secondary" disabled={busy} onClick={close}>
        Cancel
      </button>
    </div>
  );
}
